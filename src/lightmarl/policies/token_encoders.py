"""Encoders for token observations: a set of ``(location, feature id, value)`` rows, as MettaGrid sends.

MettaGrid observes each agent as ``[num_tokens, 3]`` uint8 rows (``lightmarl.envs.mettagrid``):
one row per thing seen, ``location`` packing the cell of the agent's view as ``row << 4 |
column`` (``0xFE`` for global tokens), then a feature id and its value; unused rows are padding,
``0xFF``. Flattening those rows into an MLP's input ties every weight to a row *position*,
while what a row means does not depend on where in the list it sits. [`TokenEncoder`][lightmarl.policies.token_encoders.TokenEncoder]
does as Metta's own policies do: it embeds each token from its parts, runs a small MLP on each
token, then pools the tokens that are not padding (max, mean or attention with a learned query),
so that its features ignore padding rows and do not change when the tokens are reordered.

Choose it in a recipe as any encoder::

    policy_kwargs:
      encoder:
        class_path: lightmarl.policies.token_encoders.TokenEncoder
        init_args: {hidden_size: 64, out_features: 64, pooling: max}
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.encoders import ACTIVATIONS, activation_class

#: the ``location`` byte of a padding row.
PADDING_LOCATION = 0xFF
POOLINGS = ("max", "mean", "attention")


class TokenEncoder(nn.Module):
    """Per-token embedding and MLP, then pooling over the tokens that are not padding.

    Each row ``(location, feature, value)`` (bytes, given as floats or ints) is embedded as the
    sum of four learned vectors of ``hidden_size``: one for its feature id, one for its value
    (values are categories: object types and small counts alike), and one each for the row and
    the column of its location (a global token's ``0xFE`` is row 15, column 14, which no cell of
    a view of at most 15 rows has). A sum of embeddings is a linear layer on their
    concatenation, at the cost of a lookup. After ``activation``, a linear layer and
    ``activation`` again give each token's features. Rows whose location is ``0xFF`` are left
    out of the pooling (and not even computed, except with attention pooling and under
    ``torch.vmap``, where they are computed and masked); a linear layer and ``activation`` make
    ``out_features``. An observation with no token pools to zeros.

    The output depends on the set of tokens only: reordering rows, or adding or removing
    padding rows, leaves it unchanged (up to float rounding).

    Args:
        group: the agent group; its observations must be ``[num_tokens, 3]``.
        hidden_size: per-token features (and the pooled size).
        out_features: feature size it makes.
        pooling: ``max`` (default), ``mean``, or ``attention`` (one learned query attends over
            the tokens with ``num_heads`` heads; a forward and backward of 400 observations of
            22 tokens took about four times as long as with ``max`` here).
        num_heads: attention heads for ``pooling: attention`` (must divide ``hidden_size``).
        activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.

    Example:
        >>> group = GroupSpec("agent", ("agent_0",), (0,), (48, 3), "discrete", num_actions=5)
        >>> TokenEncoder(group, out_features=32)(torch.full((4, 1, 48, 3), 255.0)).shape
        torch.Size([4, 1, 32])
    """

    def __init__(
        self,
        group: GroupSpec,
        hidden_size: int = 64,
        out_features: int = 64,
        pooling: Literal["max", "mean", "attention"] = "max",
        num_heads: int = 4,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        shape = tuple(group.observation_shape)
        if len(shape) != 2 or shape[1] != 3:
            raise ValueError(
                f"TokenEncoder reads token observations [num_tokens, 3] (location, feature id, value); group "
                f"{group.name!r} has observations of shape {shape}"
            )
        if pooling not in POOLINGS:
            raise ValueError(f"TokenEncoder pooling: {pooling!r} is not one of {list(POOLINGS)}")
        activation_class(activation, "encoder activation")
        for name, value in (("hidden_size", hidden_size), ("out_features", out_features), ("num_heads", num_heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TokenEncoder {name}: expected a positive integer, got {value!r}")
        if pooling == "attention" and hidden_size % num_heads:
            raise ValueError(f"TokenEncoder num_heads: {num_heads} does not divide hidden_size {hidden_size}")
        self.num_tokens = shape[0]
        self.hidden_size = int(hidden_size)
        self.out_features = int(out_features)
        self.pooling = pooling
        self.feature_embedding = nn.Embedding(256, hidden_size)
        self.value_embedding = nn.Embedding(256, hidden_size)
        self.row_embedding = nn.Embedding(16, hidden_size)
        self.column_embedding = nn.Embedding(16, hidden_size)
        self.activation = ACTIVATIONS[activation]()
        self.token_layer = nn.Linear(hidden_size, hidden_size)
        if pooling == "attention":
            self.query = nn.Parameter(torch.randn(1, 1, hidden_size) / hidden_size**0.5)
            self.attention = nn.MultiheadAttention(hidden_size, num_heads, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden_size, self.out_features), ACTIVATIONS[activation]())

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Features ``[..., hidden_size]`` of integer token rows ``[..., 3]``."""
        location, feature, value = tokens.unbind(-1)
        summed = (
            self.feature_embedding(feature)
            + self.value_embedding(value)
            + self.row_embedding(location >> 4)
            + self.column_embedding(location & 15)
        )
        return self.activation(self.token_layer(self.activation(summed)))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[:-2]
        tokens = observation.reshape(-1, observation.shape[-2], 3).round().clamp(0, 255).long()
        present = tokens[..., 0] != PADDING_LOCATION  # [B, T]
        if self.pooling == "attention":
            pooled = self._attend(self.embed(tokens), present)
        elif torch._C._functorch.is_batchedtensor(observation):
            # Under torch.vmap (TorchRL's GAE values observations and next observations in one
            # vmapped call) shapes cannot depend on the data: compute every row, mask padding.
            pooled = self._pool_masked(self.embed(tokens), present)
        else:
            # Only the tokens that are there are computed (about half the rows in MettaGrid),
            # then reduced per observation.
            owner = present.nonzero()[:, 0]
            features = self.embed(tokens[present])  # [tokens present, H]
            index = owner.unsqueeze(-1).expand_as(features)
            zeros = features.new_zeros(tokens.shape[0], self.hidden_size)
            reduce = "amax" if self.pooling == "max" else "mean"
            pooled = zeros.scatter_reduce(0, index, features, reduce, include_self=False)
        return self.head(pooled).reshape(*batch, self.out_features)

    def _pool_masked(self, per_token: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        mask = present.unsqueeze(-1)
        if self.pooling == "mean":
            return (per_token * mask).sum(dim=-2) / mask.sum(dim=-2).clamp(min=1)
        pooled = per_token.masked_fill(~mask, float("-inf")).amax(dim=-2)
        return torch.where(mask.any(dim=-2), pooled, torch.zeros_like(pooled))

    def _attend(self, per_token: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        # With every key masked attention gives NaN, so an empty observation attends to its
        # first row and is then zeroed.
        any_token = present.any(dim=-1, keepdim=True)  # [B, 1]
        pad = ~present
        pad[:, 0] &= any_token.squeeze(-1)
        query = self.query.expand(per_token.shape[0], 1, -1)
        pooled, _ = self.attention(query, per_token, per_token, key_padding_mask=pad, need_weights=False)
        pooled = pooled.squeeze(-2)
        return torch.where(any_token, pooled, torch.zeros_like(pooled))
