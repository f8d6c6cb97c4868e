"""A depth-limited alpha-beta (negamax) connect-four opponent with randomized openings."""

from __future__ import annotations

import functools

import torch

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import ScriptedPolicy
from lightmarl_examples.connect_four.rules import board_size, line_matrix

#: the value of a won position (plus the plies left, so that a sooner win scores higher and a later loss less low).
WIN = 1_000_000


@functools.lru_cache(maxsize=4)
def _line_masks(rows: int, columns: int) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Every line of four as a bit mask over cells ``row * columns + column``, and the lines through each cell.

    The lines are those of :func:`~lightmarl_examples.connect_four.rules.line_matrix`, the rules'
    one definition of four in a row.
    """
    masks = tuple(sum(1 << cell for cell in line.nonzero().view(-1).tolist()) for line in line_matrix(rows, columns))
    through = tuple(tuple(m for m in masks if m >> cell & 1) for cell in range(rows * columns))
    return masks, through


class ConnectFourSearchPolicy(ScriptedPolicy):
    """PettingZoo ``connect_four_v3``: depth-limited alpha-beta search, after a few random opening moves.

    An evaluation opponent that sees further than
    :class:`~lightmarl_examples.connect_four.ConnectFourHeuristicPolicy`: it searches ``depth``
    plies (its move, the reply, ...) with negamax and alpha-beta pruning, scores a four in a row
    found in the search as won or lost (sooner wins and later losses preferred), and scores the
    positions at the horizon from the mover's side by

    - ``three`` for each line of four holding three of its pieces and an empty cell (an open
      three), ``two`` for each with two pieces and two empty cells, minus the same for the
      opponent's lines;
    - ``center`` for each of its pieces in the middle column, minus the same for the opponent.

    With ``depth`` 1 it takes an immediate win but does not see the reply; with 2 it also blocks
    an immediate win of the opponent and never plays under one (lifting the opponent onto a
    winning cell); with 3 it also makes double threats. Among the moves of the best value it picks
    one uniformly at random.

    **Randomized openings.** Its first ``opening_moves`` moves of each game (counted from its own
    pieces on the board, so the policy keeps no state between calls) are uniformly random legal
    columns, so that games against a deterministic player differ. Openings and ties are drawn
    from the policy's own generator, in every exploration mode: a seeded opponent plays the same
    games against the same player.

    Observation layout (``connect_four_v3``, from the acting player's view): ``[6 rows (top
    first), 7 columns, 2]``, channel 0 its own pieces, channel 1 the opponent's; a piece dropped
    in a column lands on its lowest empty cell. Boards are searched one at a time in Python (bit
    masks): about 2.6 / 12 / 33 ms per move at depth 2 / 3 / 4 on positions of random games (one
    busy CPU core, load about 10).

    Args:
        group: the agent group this policy acts for (connect four's players).
        depth: plies searched, at least 1.
        opening_moves: how many of its own first moves are uniformly random (0: none).
        seed: seed of the policy's own generator (``None``: torch's global RNG).
        three: value of an open three.
        two: value of an open two.
        center: value of a piece in the middle column.
    """

    def __init__(
        self,
        group: GroupSpec,
        depth: int = 4,
        opening_moves: int = 2,
        seed: int | None = None,
        three: int = 50,
        two: int = 5,
        center: int = 3,
    ) -> None:
        if group.action_kind != "discrete":
            raise ValueError(
                f"ConnectFourSearchPolicy needs discrete actions (one per column); group {group.name!r} has "
                f"{group.action_kind} actions"
            )
        self.rows, self.columns = board_size(group, "ConnectFourSearchPolicy")
        if group.num_actions != self.columns:
            raise ValueError(
                f"ConnectFourSearchPolicy needs one action per column ({self.columns}); group {group.name!r} has "
                f"{group.num_actions} actions"
            )
        for name, value in (("depth", depth), ("opening_moves", opening_moves)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"ConnectFourSearchPolicy {name}: expected an integer, got {value!r}")
        if depth < 1:
            raise ValueError(f"ConnectFourSearchPolicy depth: expected at least 1 ply, got {depth}")
        if opening_moves < 0:
            raise ValueError(f"ConnectFourSearchPolicy opening_moves: expected 0 or more, got {opening_moves}")
        super().__init__(group)
        self.depth = depth
        self.opening_moves = opening_moves
        self.three, self.two, self.center = three, two, center
        self._lines, self._through = _line_masks(self.rows, self.columns)
        middle = self.columns // 2
        self._center_mask = sum(1 << (row * self.columns + middle) for row in range(self.rows))
        # Middle columns first: alpha-beta prunes most when the best moves come early.
        self._order = sorted(range(self.columns), key=lambda c: abs(c - middle))
        self.own_random_stream(seed)

    def act(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor:
        batch = observation.shape[:-3]
        boards = observation.reshape(-1, self.rows, self.columns, 2).detach().to("cpu", torch.bool)
        masks = None if action_mask is None else action_mask.reshape(-1, self.columns).detach().cpu().bool()
        weights = 1 << torch.arange(self.rows * self.columns, dtype=torch.int64)
        own_bits = (boards[..., 0].flatten(1).long() * weights).sum(-1).tolist()
        their_bits = (boards[..., 1].flatten(1).long() * weights).sum(-1).tolist()
        choices = []
        for i, (own, theirs) in enumerate(zip(own_bits, their_bits, strict=True)):
            heights = self._landing_rows(own | theirs)
            legal = [c for c in range(self.columns) if heights[c] >= 0 and (masks is None or bool(masks[i, c]))]
            if not legal:  # an absent row (the agent is not to move): any column
                choices.append(0)
            elif own.bit_count() < self.opening_moves:
                choices.append(self._uniform(legal))
            else:
                choices.append(self._uniform(self.best_moves(own, theirs, legal)))
        return torch.tensor(choices, dtype=torch.int64).view(batch).to(observation.device)

    def best_moves(self, own: int, theirs: int, legal: list[int] | None = None) -> list[int]:
        """The columns of ``legal`` (default: every open column) with the best searched value for the mover.

        ``own`` / ``theirs``: the mover's and the opponent's pieces as bit masks (cell ``row *
        columns + column``, row 0 at the top).
        """
        heights = self._landing_rows(own | theirs)
        legal = [c for c in self._order if heights[c] >= 0 and (legal is None or c in legal)]
        values: dict[int, int] = {}
        best = -2 * WIN
        for column in legal:
            # A window just below the best so far: a move worth less fails low (and is no tie);
            # a move worth as much or more comes back exact, so that ties are found.
            values[column] = self._child_value(own, theirs, heights, column, self.depth, best - 1, 2 * WIN)
            best = max(best, values[column])
        return sorted(c for c in legal if values[c] == best)

    def _child_value(
        self, own: int, theirs: int, heights: list[int], column: int, depth: int, alpha: int, beta: int
    ) -> int:
        """The mover's value of dropping in ``column`` and searching ``depth - 1`` further plies."""
        cell = heights[column] * self.columns + column
        placed = own | 1 << cell
        if any(placed & line == line for line in self._through[cell]):
            return WIN + depth
        if depth == 1:
            return self._evaluate(placed, theirs)
        heights[column] -= 1
        try:
            return -self._negamax(theirs, placed, heights, depth - 1, -beta, -alpha)
        finally:
            heights[column] += 1

    def _negamax(self, own: int, theirs: int, heights: list[int], depth: int, alpha: int, beta: int) -> int:
        best = None
        for column in self._order:
            if heights[column] < 0:
                continue
            value = self._child_value(own, theirs, heights, column, depth, alpha, beta)
            best = value if best is None else max(best, value)
            alpha = max(alpha, value)
            if alpha >= beta:
                break
        return 0 if best is None else best  # a full board: a draw

    def _evaluate(self, own: int, theirs: int) -> int:
        """The position's value for the player whose pieces are ``own`` (the one who just moved)."""
        score = self.center * ((own & self._center_mask).bit_count() - (theirs & self._center_mask).bit_count())
        for line in self._lines:
            mine, other = (own & line).bit_count(), (theirs & line).bit_count()
            if other == 0:
                score += self.three if mine == 3 else self.two if mine == 2 else 0
            elif mine == 0:
                score -= self.three if other == 3 else self.two if other == 2 else 0
        return score

    def _landing_rows(self, pieces: int) -> list[int]:
        """Per column the row a dropped piece lands on (-1: full)."""
        heights = []
        for column in range(self.columns):
            row = self.rows - 1
            while row >= 0 and pieces >> (row * self.columns + column) & 1:
                row -= 1
            heights.append(row)
        return heights

    def _uniform(self, options: list[int]) -> int:
        return options[int(torch.randint(len(options), (1,), generator=self.generator))]
