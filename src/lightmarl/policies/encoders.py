"""Observation encoders: the first stage of a neural policy, replaceable and shareable.

An encoder maps observations ``[*batch, *observation_shape]`` to features
``[*batch, out_features]`` and says how many features it makes (``out_features``). A policy
that takes an ``encoder`` argument runs its actor and critic on the encoder's features, so
the same encoder object can be handed to several policies (``shared_modules`` in a recipe)
or swapped for a convolutional one on image observations.

``encoder`` arguments accept:

* ``None``: [`FlattenEncoder`][lightmarl.policies.encoders.FlattenEncoder] (identity on vector observations);
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


def activation_class(name: str, field: str) -> type[nn.Module]:
    """The activation module class called ``name``; a ``ValueError`` naming ``field`` if there is none."""
    if name not in ACTIVATIONS:
        raise ValueError(f"{field}: {name!r} is not one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def hidden_widths(hidden_sizes: Sequence[int], field: str) -> tuple[int, ...]:
    """``hidden_sizes`` as layer widths; a ``ValueError`` naming ``field`` unless each is a positive integer.

    (A width of 0 builds a layer with no units: the network then outputs its biases alone and
    trains without a word.)
    """
    if isinstance(hidden_sizes, str | bytes) or not isinstance(hidden_sizes, Sequence):
        raise ValueError(f"{field}: expected a list of positive layer widths, got {hidden_sizes!r}")
    if not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hidden_sizes):
        raise ValueError(f"{field}: expected positive integer layer widths, got {list(hidden_sizes)!r}")
    return tuple(hidden_sizes)


class FlattenEncoder(nn.Module):
    """Flattens each observation to a vector (a no-op on vector observations).

    Integer observations (``uint8`` ones are stored as ``uint8``) become float32, unscaled.

    Args:
        group: the agent group whose observations it reads.
    """

    def __init__(self, group: GroupSpec) -> None:
        super().__init__()
        self.observation_shape = tuple(group.observation_shape)
        self.out_features = math.prod(self.observation_shape)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if not observation.is_floating_point():  # uint8 observations are stored as such: float here, unscaled
            observation = observation.to(torch.float32)
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
        activation_class(activation, "encoder activation")
        hidden_sizes = hidden_widths(hidden_sizes, "encoder hidden_sizes")
        if not isinstance(out_features, int) or out_features < 1:
            raise ValueError(f"encoder out_features: expected a positive integer, got {out_features!r}")
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


def image_shape(group: GroupSpec, encoder: str) -> tuple[int, ...]:
    """``group``'s observation shape, checked to be an image (``[H, W, C]``, ``[C, H, W]`` or ``[H, W]``)."""
    shape = tuple(group.observation_shape)
    if len(shape) not in (2, 3):
        raise ValueError(
            f"{encoder} reads images ([H, W, C], [C, H, W] or [H, W]); group {group.name!r} has observations "
            f"of shape {shape}: use the default FlattenEncoder or MLPEncoder"
        )
    return shape


def resolve_channels_last(shape: tuple[int, ...], channels_last: bool | None) -> bool:
    """``channels_last``, or from the shape: ``[C, H, W]`` when the first dim is at most 4 and the last larger."""
    if channels_last is None:
        return len(shape) == 3 and not (shape[0] <= 4 < shape[-1])
    return bool(channels_last)


def resolve_scale(group: GroupSpec, scale: float | None) -> float:
    """``scale``, or ``1/255`` for ``uint8`` observations and 1 for others."""
    return (1 / 255 if group.observation_dtype == "uint8" else 1.0) if scale is None else float(scale)


def image_channels(shape: tuple[int, ...], channels_last: bool) -> int:
    return 1 if len(shape) == 2 else (shape[-1] if channels_last else shape[0])


def to_images(
    observation: torch.Tensor, shape: tuple[int, ...], channels_last: bool, scale: float, dtype: torch.dtype
) -> torch.Tensor:
    """``[*batch, *shape]`` (``uint8`` or float, on the encoder's device) -> ``[N, C, H, W]`` of ``dtype``, scaled."""
    batch = observation.shape[: observation.dim() - len(shape)]
    # An explicit row count, not -1: reshape cannot infer it for an empty batch.
    x = observation.reshape(math.prod(batch), *shape).to(dtype)
    if scale != 1.0:
        x = x * scale
    if len(shape) == 2:
        return x.unsqueeze(1)
    return x.permute(0, 3, 1, 2) if channels_last else x


class CNNEncoder(nn.Module):
    """Convolutions over image observations, then a linear layer: images -> ``[*batch, out_features]``.

    Reads ``[*batch, H, W, C]`` (PettingZoo's usual layout), ``[*batch, C, H, W]`` or
    single-channel ``[*batch, H, W]`` observations, with any number of leading batch dims.
    Each conv layer is followed by ``activation``; the flattened maps are projected to
    ``out_features`` (also activated). The defaults suit small views such as sisl pursuit's
    7x7x3; for large images (e.g. 84x84) use a strided stack such as Nature-DQN's
    (``channels=(32, 64, 64), kernel_sizes=(8, 4, 3), strides=(4, 2, 1)``).

    ``uint8`` images (``group.observation_dtype``) reach the policy as ``uint8`` (that is how
    vectors and rollouts store them): they become float here, on the device the encoder is on,
    scaled to ``[0, 1]`` unless ``scale`` says otherwise.

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
        shape = image_shape(group, "CNNEncoder")
        activation_class(activation, "encoder activation")
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
        self.observation_shape = shape
        self.channels_last = resolve_channels_last(shape, channels_last)
        self.scale = resolve_scale(group, scale)
        self.out_features = int(out_features)
        in_channels = image_channels(shape, self.channels_last)
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
        dtype = next(self.convs.parameters()).dtype
        return to_images(observation, self.observation_shape, self.channels_last, self.scale, dtype)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[: observation.dim() - len(self.observation_shape)]
        features = self.project(self.convs(self._images(observation)))
        return features.reshape(*batch, self.out_features)


class ResidualBlock(nn.Module):
    """``x + conv(act(conv(act(x))))`` with 3x3 convolutions that keep the size (IMPALA's block)."""

    def __init__(self, channels: int, activation: type[nn.Module]) -> None:
        super().__init__()
        self.body = nn.Sequential(
            activation(),
            nn.Conv2d(channels, channels, 3, padding=1),
            activation(),
            nn.Conv2d(channels, channels, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ImpalaCNNEncoder(nn.Module):
    """IMPALA's residual CNN over image observations (Espeholt et al. 2018, "IMPALA", Fig. 3).

    Per stage: a 3x3 convolution to ``channels[i]``, a 3x3 max-pool with stride 2 (halving the
    image) and ``blocks_per_stage`` residual blocks; then ``activation``, flatten and a linear
    layer to ``out_features`` (activated). The paper's stack is ``channels=(16, 32, 32)``,
    ``blocks_per_stage=2``, ``out_features=256``, as Procgen's and CleanRL's PPO use. Reads the
    same layouts as [`CNNEncoder`][lightmarl.policies.encoders.CNNEncoder] and converts ``uint8`` images to float (scaled to
    ``[0, 1]``) on the encoder's device.

    Args:
        group: the agent group whose observations it reads.
        channels: output channels of each stage.
        blocks_per_stage: residual blocks after each stage's pooling.
        out_features: feature size it makes.
        activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
        channels_last: as [`CNNEncoder`][lightmarl.policies.encoders.CNNEncoder]'s.
        scale: as [`CNNEncoder`][lightmarl.policies.encoders.CNNEncoder]'s.

    Example:
        >>> group = GroupSpec("piston", ("piston_0",), (0,), (24, 24, 3), "discrete", num_actions=3, observation_dtype="uint8")
        >>> ImpalaCNNEncoder(group, channels=(8, 16), out_features=32)(torch.zeros(5, 1, 24, 24, 3, dtype=torch.uint8)).shape
        torch.Size([5, 1, 32])
    """

    def __init__(
        self,
        group: GroupSpec,
        channels: Sequence[int] = (16, 32, 32),
        blocks_per_stage: int = 2,
        out_features: int = 256,
        activation: str = "relu",
        channels_last: bool | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        shape = image_shape(group, "ImpalaCNNEncoder")
        activation_class(activation, "encoder activation")
        if not len(channels) or any(isinstance(c, bool) or int(c) < 1 for c in channels):
            raise ValueError(
                f"ImpalaCNNEncoder.channels: expected one positive channel count per stage, got {channels!r}"
            )
        if isinstance(blocks_per_stage, bool) or not isinstance(blocks_per_stage, int) or blocks_per_stage < 0:
            raise ValueError(f"ImpalaCNNEncoder.blocks_per_stage: expected an integer >= 0, got {blocks_per_stage!r}")
        act = ACTIVATIONS[activation]
        self.observation_shape = shape
        self.channels_last = resolve_channels_last(shape, channels_last)
        self.scale = resolve_scale(group, scale)
        self.out_features = int(out_features)
        in_channels = image_channels(shape, self.channels_last)
        stages: list[nn.Module] = []
        for out_channels in (int(c) for c in channels):
            stages += [nn.Conv2d(in_channels, out_channels, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1)]
            stages += [ResidualBlock(out_channels, act) for _ in range(blocks_per_stage)]
            in_channels = out_channels
        self.convs = nn.Sequential(*stages, act(), nn.Flatten())
        with torch.no_grad():
            conv_features = self.convs(self._images(torch.zeros(1, *shape))).shape[-1]
        self.project = nn.Sequential(nn.Linear(conv_features, self.out_features), act())

    def _images(self, observation: torch.Tensor) -> torch.Tensor:
        dtype = next(self.convs.parameters()).dtype
        return to_images(observation, self.observation_shape, self.channels_last, self.scale, dtype)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[: observation.dim() - len(self.observation_shape)]
        features = self.project(self.convs(self._images(observation)))
        return features.reshape(*batch, self.out_features)


def build_encoder(group: GroupSpec, encoder: nn.Module | Mapping[str, Any] | None, *, field: str) -> nn.Module:
    """The encoder a policy of ``group`` should use, from its ``encoder`` argument.

    Raises:
        ValueError: naming ``field`` when the spec cannot be built or the module has no ``out_features``.
    """
    if encoder is None:
        return FlattenEncoder(group)
    if isinstance(encoder, Mapping):
        encoder = instantiate(encoder, field=field, base=nn.Module, group=group)
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
    """The feature size an encoder built by `build_encoder` makes."""
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
