"""The rules of connect four on batched boards: where a dropped piece lands and which drops complete four.

One place for the game's rules, shared by the scripted heuristic
(:class:`~lightmarl_examples.connect_four.ConnectFourHeuristicPolicy`), the rule-feature encoder
(:class:`~lightmarl_examples.connect_four.threats.ThreatFeaturesEncoder`) and the mistake counter
(``benchmarks/connect_four_mistakes.py``). Boards are ``[..., rows, columns]`` (any leading batch
dims) with row 0 at the top (PettingZoo's ``connect_four_v3``): a piece dropped in a column lands
on the column's lowest empty cell. Pieces and empty cells are given as 0/1 (or bool) tensors of
that shape; ``empty`` may broadcast against ``pieces`` (one board's empty cells for both sides).
"""

from __future__ import annotations

import functools

import torch

from lightmarl.envs.spec import GroupSpec

#: pieces in a row that win.
CONNECT = 4
#: the directions a line can run in: along a row, down a column, and both diagonals.
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def board_size(group: GroupSpec, reader: str) -> tuple[int, int]:
    """``(rows, columns)`` of ``group``'s board observations ``[rows, columns, 2]``; ``reader`` names who
    reads them in the error a bad shape raises."""
    shape = tuple(group.observation_shape)
    if len(shape) != 3 or shape[-1] != 2:
        raise ValueError(
            f"{reader} reads boards [rows, columns, 2] (own pieces, opponent's pieces); group "
            f"{group.name!r} has observations of shape {shape}"
        )
    return shape[0], shape[1]


@functools.lru_cache(maxsize=8)
def line_matrix(rows: int, columns: int, device: torch.device | None = None) -> torch.Tensor:
    """``[lines, rows * columns]``: row ``l`` is 1 on the four cells of line ``l`` (69 lines on a 6x7 board).

    Cached per board size and device (``None``: the CPU), so boards on a GPU do not copy it there
    at every call.

    Every rule below is a product with it: a board's ``[B, rows * columns]`` cells times its
    transpose count each line's pieces, and a ``[B, lines]`` mask times it marks the lines' cells.
    (Products of such small matrices run far faster on a CPU than 4x4 convolutions over a padded board.)
    """
    if device is not None and device != torch.device("cpu"):
        return line_matrix(rows, columns).to(device)
    lines = []
    for row in range(rows):
        for column in range(columns):
            for d_row, d_column in _DIRECTIONS:
                cells = [(row + k * d_row, column + k * d_column) for k in range(CONNECT)]
                if all(0 <= r < rows and 0 <= c < columns for r, c in cells):
                    line = torch.zeros(rows * columns)
                    line[[r * columns + c for r, c in cells]] = 1
                    lines.append(line)
    return torch.stack(lines) if lines else torch.zeros(0, rows * columns)


def _lines(board: torch.Tensor) -> torch.Tensor:
    """The line matrix of ``board``'s shape (``[..., rows, columns]``), on its device, float32."""
    return line_matrix(board.shape[-2], board.shape[-1], board.device)


def _products(rows: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """``rows`` (``[..., k]``, any dtype) times ``matrix`` (``[k, m]``) as one 2-d product: ``[..., m]``.

    (Batched 3-d products of these small matrices run several times slower on a CPU.)
    """
    flat = rows.reshape(-1, rows.shape[-1]).to(torch.float32) @ matrix
    return flat.view(*rows.shape[:-1], matrix.shape[1])


def _line_sums(cells: torch.Tensor) -> torch.Tensor:
    """``[..., lines]``: how many of ``cells`` (``[..., rows, columns]``, 0/1) lie on each line of four."""
    return _products(cells.flatten(-2), _lines(cells).T)


def has_four(pieces: torch.Tensor) -> torch.Tensor:
    """``[...]`` bool: ``pieces`` (``[..., rows, columns]``, 0/1) hold four in a row somewhere."""
    return (_line_sums(pieces) >= CONNECT).any(-1)


def landing_rows(empty: torch.Tensor) -> torch.Tensor:
    """``[..., columns]``: the row a piece dropped in each column lands on (its lowest empty cell; -1: full).

    ``empty`` is ``[..., rows, columns]``, true (or 1) on empty cells of a board that obeys gravity.
    """
    rows = torch.arange(empty.shape[-2], device=empty.device).view(-1, 1)
    return torch.where(empty.bool(), rows, -1).amax(-2)


def _cells_of_lines(lines_on: torch.Tensor, empty: torch.Tensor, lines: torch.Tensor) -> torch.Tensor:
    """``[..., rows, columns]`` bool: the empty cells on any line where ``lines_on`` (``[..., lines]``) is true."""
    on_line = _products(lines_on, lines) > 0
    return on_line.view(*lines_on.shape[:-1], *empty.shape[-2:]) & empty


def winning_cells(pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``[..., rows, columns]`` bool: the empty cells where one more of ``pieces`` completes four in a row.

    Whether the cell can be played now is not asked (see :func:`cells_at`): a winning cell above
    the landing row is a threat that waits for the column to fill up to it. A line counts when
    three of its cells hold ``pieces`` and the fourth is empty; such lines mark their four cells,
    and of those only the empty one is kept.
    """
    empty = empty.bool()
    open_lines = (_line_sums(pieces) == CONNECT - 1) & (_line_sums(empty) == 1)
    return _cells_of_lines(open_lines, empty, _lines(pieces))


def cells_at(cells: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``[..., columns]`` bool: ``cells[..., rows[..., c], c]``, false where ``rows`` is off the board (< 0)."""
    rows = rows.expand(*cells.shape[:-2], rows.shape[-1])  # gather does not broadcast
    picked = cells.gather(-2, rows.clamp(min=0).unsqueeze(-2)).squeeze(-2)
    return picked.bool() & (rows >= 0)


def winning_drops(pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``[..., columns]`` bool: dropping one more of ``pieces`` into the column completes four (a full column: false)."""
    return cells_at(winning_cells(pieces, empty), landing_rows(empty))


def winning_drops_after_each_drop(pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``[..., columns]``: how many winning drops ``pieces``' owner has after one more of its pieces in each column.

    Counted on the board after that drop (the column's next cell up becomes playable); a full
    column counts 0. Two or more is a double threat, unless the drop itself already won. The
    afterstates are not built: a drop on cell ``p`` keeps every winning cell but ``p`` itself,
    and adds the other empty cell of each line through ``p`` that held two of the pieces and two
    empty cells.
    """
    lines = _lines(pieces)
    empty = empty.bool()
    columns = empty.shape[-1]
    column = torch.arange(columns, device=empty.device)
    landing = landing_rows(empty).expand(*pieces.shape[:-2], columns)
    cell = landing.clamp(min=0) * columns + column  # [..., columns]: each column's landing cell
    piece_sums, empty_sums = _line_sums(pieces), _line_sums(empty)
    before = _cells_of_lines((piece_sums == CONNECT - 1) & (empty_sums == 1), empty, lines)
    two_and_two = (piece_sums == CONNECT - 2) & (empty_sums == 2)  # [..., lines]
    opened = lines.T.bool()[cell] & two_and_two.unsqueeze(-2)  # [..., columns, lines]: lines the drop makes open
    after = _cells_of_lines(opened, empty.unsqueeze(-3), lines) | before.unsqueeze(-3)  # [..., columns, rows, columns]
    after = after.flatten(-2).scatter(-1, cell.unsqueeze(-1), False)  # the cell just filled
    # After a drop in column c, every column lands where it did, except c: one row higher.
    landing_after = landing.unsqueeze(-2) - torch.eye(columns, dtype=landing.dtype, device=landing.device)
    wins = after.gather(-1, landing_after.clamp(min=0) * columns + column) & (landing_after >= 0)
    return torch.where(landing >= 0, wins.sum(-1), 0)
