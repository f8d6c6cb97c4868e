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
