"""An encoder that hands a connect-four policy the tactical facts of each move, computed exactly from the rules.

Model-free PPO in the connect-four league did not learn to take its immediate wins or block the
opponent's from the raw board within the budget, not with an MLP, a CNN or the learned
afterstate convolution of :class:`~lightmarl_examples.connect_four.afterstates.DropAfterstateEncoder`
(docs/league.md, "Connect four"). :class:`ThreatFeaturesEncoder` applies the game's rules
instead of learning them: for every column it computes whether the move wins, blocks, plays under
a threat or sets up a double threat (``lightmarl_examples.connect_four.rules``), and the policy learns
how to weigh those facts and everything positional. Hand-crafted features computed by the rules
are the classic device of game-playing RL (Tesauro's TD-Gammon added such features to the raw
board: "Temporal difference learning and TD-Gammon", CACM 1995).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from lightmarl.envs.spec import GroupSpec
from lightmarl_examples.connect_four.rules import (
    CONNECT,
    board_size,
    cells_at,
    landing_rows,
    winning_cells,
    winning_drops_after_each_drop,
)

#: the facts the encoder can compute per column, from the mover's side.
FACTS = ("legal", "win", "block", "under", "lift_own", "double_threat", "their_double_threat")
#: the facts computed by default: all but ``their_double_threat``, which costs as much as the rest together.
DEFAULT_FACTS = FACTS[:-1]
#: the double-threat facts of the mover and of the opponent, in the order of the sides.
_DOUBLE_THREATS = ("double_threat", "their_double_threat")


class ThreatFeaturesEncoder(nn.Module):
    """Exact tactical facts of each column's move (0/1), followed by the flattened board.

    Reads ``[*batch, rows, columns, 2]`` observations, channel 0 the mover's pieces and channel 1
    the opponent's, row 0 at the top (PettingZoo's ``connect_four_v3``). For each column and each
    fact named in ``facts`` it outputs 1 or 0:

    - ``legal``: the column is not full;
    - ``win``: the mover's piece dropped there completes four;
    - ``block``: the opponent's piece dropped there would complete four (the mover must play there);
    - ``under``: the mover's piece there makes the cell above it playable, and that cell completes
      four for the opponent (playing under the opponent's threat);
    - ``lift_own``: the same for the mover's own winning cell above (the opponent can then block it);
    - ``double_threat``: the mover's piece there does not win, and afterwards the mover has two or
      more winning drops (the opponent can block only one);
    - ``their_double_threat``: the same for the opponent's piece there (the mover may have to take
      the column first).

    The features are fact-major (fact ``k``, column ``c`` at ``k * columns + c``), then the board.
    No parameters: the facts are rules, not learned; the trunk after it learns what they are worth.

    Args:
        group: the agent group whose observations it reads (``[rows, columns, 2]``, one action per column).
        facts: which facts to compute, in output order (any of ``FACTS``; default ``DEFAULT_FACTS``).

    Example:
        >>> group = GroupSpec("player", ("player_0", "player_1"), (0, 1), (6, 7, 2), "discrete", num_actions=7)
        >>> ThreatFeaturesEncoder(group)(torch.zeros(5, 2, 6, 7, 2)).shape
        torch.Size([5, 2, 126])
    """

    def __init__(self, group: GroupSpec, facts: Sequence[str] = DEFAULT_FACTS) -> None:
        super().__init__()
        rows, columns = board_size(group, "ThreatFeaturesEncoder")
        if max(rows, columns) < CONNECT:
            raise ValueError(f"ThreatFeaturesEncoder: a {rows}x{columns} board holds no line of {CONNECT}")
        if group.action_kind != "discrete" or group.num_actions != columns:
            raise ValueError(
                f"ThreatFeaturesEncoder: one action per column ({columns}); group {group.name!r} has "
                f"{group.action_kind} actions ({group.num_actions or group.action_shape})"
            )
        facts = list(facts)
        unknown = [f for f in facts if f not in FACTS]
        if unknown or not facts or len(set(facts)) != len(facts):
            raise ValueError(
                f"ThreatFeaturesEncoder: facts must be distinct names from {list(FACTS)}, at least one; got {facts}"
            )
        self.observation_shape = tuple(group.observation_shape)
        self.rows, self.columns = rows, columns
        self.facts = tuple(facts)
        self.out_features = len(self.facts) * columns + rows * columns * 2

    def column_facts(self, own: torch.Tensor, theirs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each requested fact as a ``[N, columns]`` bool tensor, for boards ``own`` / ``theirs`` (``[N, rows, columns]``)."""
        empty = (own + theirs) == 0
        landing = landing_rows(empty)
        # Both sides at once ([N, 2, ...]: the mover, then the opponent): one matrix product per step.
        sides, side_empty, side_landing = torch.stack([own, theirs], 1), empty.unsqueeze(1), landing.unsqueeze(1)
        cells = winning_cells(sides, side_empty)
        at_landing, above_landing = cells_at(cells, side_landing), cells_at(cells, side_landing - 1)
        computed = {
            "legal": landing >= 0,
            "win": at_landing[:, 0],
            "block": at_landing[:, 1],
            "under": above_landing[:, 1],  # a full column's landing - 1 is off the board
            "lift_own": above_landing[:, 0],  # a threat the mover had before this drop
        }
        # Counting a side's winning drops after each of its drops is the costly part: only where asked.
        sides_asked = [k for k, fact in enumerate(_DOUBLE_THREATS) if fact in self.facts]
        if sides_asked:
            counts = winning_drops_after_each_drop(sides[:, sides_asked], side_empty)
            for i, k in enumerate(sides_asked):
                # A drop that wins is a win, not a double threat.
                computed[_DOUBLE_THREATS[k]] = (counts[:, i] >= 2) & ~at_landing[:, k]
        return {fact: computed[fact] for fact in self.facts}

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[: observation.dim() - 3]
        # An explicit row count, not -1: reshape cannot infer it for an empty batch.
        board = observation.reshape(math.prod(batch), *self.observation_shape).to(torch.float32)
        facts = self.column_facts(board[..., 0], board[..., 1])
        features = torch.cat([facts[f].to(board.dtype) for f in self.facts] + [board.flatten(1)], -1)
        return features.reshape(*batch, self.out_features)
