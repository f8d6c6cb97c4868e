"""Observation encoders: the first stage of a neural policy, replaceable and shareable.

An encoder maps observations ``[*batch, *observation_shape]`` to features
``[*batch, out_features]`` and says how many features it makes (``out_features``). A policy
that takes an ``encoder`` argument runs its actor and critic on the encoder's features, so
the same encoder object can be handed to several policies (``shared_modules`` in a recipe)
or swapped for a convolutional one on image observations.

``encoder`` arguments accept:

* ``None``: :class:`FlattenEncoder` (identity on vector observations);
* a module: used as is (that is how ``shared_modules`` inject one object into many policies);
* ``{"class_path": ..., "init_args": {...}}``: built here; the class receives the agent group
  as ``group=`` when its constructor has a ``group`` parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torchrl.modules import MLP

from lightmarl._imports import instantiate
from lightmarl.envs.spec import GroupSpec

#: hidden activations by name, for every neural policy and encoder.
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


class FlattenEncoder(nn.Module):
    """Flattens each observation to a vector (a no-op on vector observations).

    Args:
        group: the agent group whose observations it reads.
    """

    def __init__(self, group: GroupSpec) -> None:
        super().__init__()
        self.observation_shape = tuple(group.observation_shape)
        self.out_features = math.prod(self.observation_shape)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if len(self.observation_shape) == 1:
            return observation
        batch = observation.shape[: observation.dim() - len(self.observation_shape)]
        return observation.reshape(*batch, self.out_features)


class MLPEncoder(nn.Module):
    """A small MLP over the (flattened) observation: a trainable encoder to share between policies.

    Args:
        group: the agent group whose observations it reads.
        hidden_sizes: widths of the hidden layers.
        out_features: feature size it makes.
        activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
    """

    def __init__(
        self,
        group: GroupSpec,
        hidden_sizes: Sequence[int] = (64,),
        out_features: int = 64,
        activation: str = "tanh",
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"encoder activation: {activation!r} is not one of {sorted(ACTIVATIONS)}")
        self.flatten = FlattenEncoder(group)
        self.out_features = int(out_features)
        self.net = MLP(
            self.flatten.out_features,
            self.out_features,
            num_cells=[int(h) for h in hidden_sizes],
            activation_class=ACTIVATIONS[activation],
            activate_last_layer=True,
        )

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(self.flatten(observation))


class CNNEncoder(nn.Module):
    """Convolutions over image observations, then a linear layer: images -> ``[*batch, out_features]``.

    Reads ``[*batch, H, W, C]`` (PettingZoo's usual layout), ``[*batch, C, H, W]`` or
    single-channel ``[*batch, H, W]`` observations, with any number of leading batch dims.
    Each conv layer is followed by ``activation``; the flattened maps are projected to
    ``out_features`` (also activated). The defaults suit small views such as sisl pursuit's
    7x7x3; for large images (e.g. 84x84) use a strided stack such as Nature-DQN's
    (``channels=(32, 64, 64), kernel_sizes=(8, 4, 3), strides=(4, 2, 1)``).

    Observations reach policies as float32 whatever the env's dtype; ``uint8`` images
    (``group.observation_dtype``) are scaled to ``[0, 1]`` unless ``scale`` says otherwise.

    Args:
        group: the agent group whose observations it reads.
        channels: output channels of each conv layer.
        kernel_sizes: kernel size of each conv layer (one number: every layer).
        strides: stride of each conv layer (one number: every layer).
        paddings: zero padding of each conv layer (one number: every layer).
        out_features: feature size it makes.
        activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
        channels_last: ``True`` for ``[H, W, C]`` images, ``False`` for ``[C, H, W]``; ``None``
            decides from the shape: ``[C, H, W]`` when the first dim is at most 4 and the last
            is larger, else ``[H, W, C]``.
        scale: factor applied to observations before the first conv; ``None``: ``1/255`` for
            ``uint8`` observations, else 1.

    Example:
        >>> group = GroupSpec("pursuer", ("pursuer_0",), (0,), (7, 7, 3), "discrete", num_actions=5)
        >>> CNNEncoder(group, out_features=32)(torch.zeros(4, 10, 1, 7, 7, 3)).shape
        torch.Size([4, 10, 1, 32])
    """

    def __init__(
        self,
        group: GroupSpec,
        channels: Sequence[int] = (32, 64),
        kernel_sizes: int | Sequence[int] = 3,
        strides: int | Sequence[int] = 1,
        paddings: int | Sequence[int] = 0,
        out_features: int = 128,
        activation: str = "relu",
        channels_last: bool | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        shape = tuple(group.observation_shape)
        if len(shape) not in (2, 3):
            raise ValueError(
                f"CNNEncoder reads images ([H, W, C], [C, H, W] or [H, W]); group {group.name!r} has observations "
                f"of shape {shape}: use the default FlattenEncoder or MLPEncoder"
            )
        if activation not in ACTIVATIONS:
            raise ValueError(f"encoder activation: {activation!r} is not one of {sorted(ACTIVATIONS)}")
        layers = len(channels)
        per_layer = {
            name: [int(v)] * layers if isinstance(v, int) else [int(x) for x in v]
            for name, v in (("kernel_sizes", kernel_sizes), ("strides", strides), ("paddings", paddings))
        }
        bad = [f"{name} has {len(v)}" for name, v in per_layer.items() if len(v) != layers]
        if not layers or bad:
            raise ValueError(
                f"CNNEncoder: one kernel size, stride and padding per conv layer ({layers} channels given); "
                + (", ".join(bad) or "give at least one layer")
            )
        if channels_last is None:
            channels_last = len(shape) == 3 and not (shape[0] <= 4 < shape[-1])
        self.observation_shape = shape
        self.channels_last = bool(channels_last)
        self.scale = (1 / 255 if group.observation_dtype == "uint8" else 1.0) if scale is None else float(scale)
        self.out_features = int(out_features)
        in_channels = 1 if len(shape) == 2 else (shape[-1] if self.channels_last else shape[0])
        convs: list[nn.Module] = []
        for out_channels, kernel, stride, padding in zip(channels, *per_layer.values()):
            convs += [nn.Conv2d(in_channels, int(out_channels), kernel, stride, padding), ACTIVATIONS[activation]()]
            in_channels = int(out_channels)
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            try:
                conv_features = self.convs(self._images(torch.zeros(1, *shape))).shape[-1]
            except RuntimeError as err:
                raise ValueError(
                    f"CNNEncoder: images of shape {shape} are too small for kernel_sizes {per_layer['kernel_sizes']}, "
                    f"strides {per_layer['strides']}, paddings {per_layer['paddings']}: {err}"
                ) from None
        self.project = nn.Sequential(nn.Linear(conv_features, self.out_features), ACTIVATIONS[activation]())

    def _images(self, observation: torch.Tensor) -> torch.Tensor:
        """``[*batch, *observation_shape]`` -> ``[N, C, H, W]`` float, scaled."""
        batch = observation.shape[: observation.dim() - len(self.observation_shape)]
        # An explicit row count, not -1: reshape cannot infer it for an empty batch.
        dtype = next(self.convs.parameters()).dtype
        x = observation.reshape(math.prod(batch), *self.observation_shape).to(dtype)
        if self.scale != 1.0:
            x = x * self.scale
        if len(self.observation_shape) == 2:
            return x.unsqueeze(1)
        return x.permute(0, 3, 1, 2) if self.channels_last else x

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[: observation.dim() - len(self.observation_shape)]
        features = self.project(self.convs(self._images(observation)))
        return features.reshape(*batch, self.out_features)


def build_encoder(group: GroupSpec, encoder: nn.Module | Mapping[str, Any] | None, *, field: str) -> nn.Module:
    """The encoder a policy of ``group`` should use, from its ``encoder`` argument (see the module doc).

    Raises:
        ValueError: naming ``field`` when the spec cannot be built or the module has no ``out_features``.
    """
    if encoder is None:
        return FlattenEncoder(group)
    if isinstance(encoder, Mapping):
        encoder = instantiate(encoder, field=field, group=group)
    if not isinstance(encoder, nn.Module):
        raise ValueError(f"{field}: expected an nn.Module or {{class_path, init_args}}, got {type(encoder).__name__}")
    out_features = getattr(encoder, "out_features", None)
    if not isinstance(out_features, int) or out_features < 1:
        raise ValueError(
            f"{field}: encoder {type(encoder).__name__} must say how many features it makes "
            "(a positive integer attribute `out_features`)"
        )
    return encoder


def out_features_of(encoder: nn.Module) -> int:
    """The feature size an encoder built by :func:`build_encoder` makes."""
    return int(encoder.out_features)  # type: ignore[arg-type]


class Encoded(nn.Module):
    """Runs ``net`` on ``encoder(observation)``, passing any further inputs (e.g. ``agent_id``) through.

    Args:
        encoder: observation -> features.
        net: features (+ extra inputs) -> outputs.
    """

    def __init__(self, encoder: nn.Module, net: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = net

    def forward(self, observation: torch.Tensor, *extra: torch.Tensor) -> torch.Tensor:
        return self.net(self.encoder(observation), *extra)
