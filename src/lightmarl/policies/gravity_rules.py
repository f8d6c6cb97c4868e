"""The rules of connect four on batched boards: where a dropped piece lands and which drops complete four.

One place for the game's rules, shared by the scripted heuristic
(:class:`~lightmarl.policies.scripted.ConnectFourHeuristicPolicy`), the rule-feature encoder
(:class:`~lightmarl.policies.threats.ThreatFeaturesEncoder`) and the mistake counter
(``benchmarks/connect_four_mistakes.py``). Boards are ``[B, rows, columns]`` with row 0 at the
top (PettingZoo's ``connect_four_v3``): a piece dropped in a column lands on the column's lowest
empty cell. Pieces and empty cells are given as 0/1 (or bool) tensors of that shape.
"""

from __future__ import annotations

import functools

import torch

#: pieces in a row that win.
CONNECT = 4
#: the directions a line can run in: along a row, down a column, and both diagonals.
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


@functools.lru_cache(maxsize=8)
def line_matrix(rows: int, columns: int) -> torch.Tensor:
    """``[lines, rows * columns]``: row ``l`` is 1 on the four cells of line ``l`` (69 lines on a 6x7 board).

    Every rule below is a product with it: a board's ``[B, rows * columns]`` cells times its
    transpose count each line's pieces, and a ``[B, lines]`` mask times it marks the lines' cells.
    (Products of such small matrices run far faster on a CPU than 4x4 convolutions over a padded board.)
    """
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
    return line_matrix(board.shape[-2], board.shape[-1]).to(board.device)


def _line_sums(cells: torch.Tensor) -> torch.Tensor:
    """``[B, lines]``: how many of ``cells`` (``[B, rows, columns]``, 0/1) lie on each line of four."""
    return cells.flatten(-2).to(torch.float32) @ _lines(cells).T


def has_four(pieces: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: ``pieces`` (``[B, rows, columns]``, 0/1) hold four in a row somewhere."""
    return (_line_sums(pieces) >= CONNECT).any(-1)


def landing_rows(empty: torch.Tensor) -> torch.Tensor:
    """``[B, columns]``: the row a piece dropped in each column lands on (its lowest empty cell; -1: full).

    ``empty`` is ``[B, rows, columns]``, true (or 1) on empty cells of a board that obeys gravity.
    """
    rows = torch.arange(empty.shape[-2], device=empty.device).view(1, -1, 1)
    return torch.where(empty.bool(), rows, -1).amax(1)


def winning_cells(pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``[B, rows, columns]`` bool: the empty cells where one more of ``pieces`` completes four in a row.

    Whether the cell can be played now is not asked (see :func:`cells_at`): a winning cell above
    the landing row is a threat that waits for the column to fill up to it. A line counts when
    three of its cells hold ``pieces`` and the fourth is empty; such lines mark their four cells,
    and of those only the empty one is kept.
    """
    empty = empty.bool()
    open_lines = (_line_sums(pieces) == CONNECT - 1) & (_line_sums(empty) == 1)
    on_open_line = (open_lines.to(torch.float32) @ _lines(pieces)).view(empty.shape) > 0
    return on_open_line & empty


def cells_at(cells: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``[B, columns]`` bool: ``cells[b, rows[b, c], c]``, false where ``rows`` is off the board (< 0)."""
    on_board = rows >= 0
    picked = cells.gather(1, rows.clamp(min=0).unsqueeze(1)).squeeze(1)
    return picked.bool() & on_board


def winning_drops(pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``[B, columns]`` bool: dropping one more of ``pieces`` into the column completes four (a full column: false)."""
    return cells_at(winning_cells(pieces, empty), landing_rows(empty))


def winning_drops_after_each_drop(pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``[B, columns]``: how many winning drops ``pieces``' owner has after one more of its pieces in each column.

    Counted on the board after that drop (the column's next cell up becomes playable); a full
    column counts 0. Two or more is a double threat, unless the drop itself already won. The
    afterstates are not built: a drop on cell ``p`` keeps every winning cell but ``p`` itself,
    and adds the other empty cell of each line through ``p`` that held two of the pieces and two
    empty cells.
    """
    lines = _lines(pieces)
    empty = empty.bool()
    batch, columns = empty.shape[0], empty.shape[-1]
    column = torch.arange(columns, device=empty.device)
    landing = landing_rows(empty)
    cell = landing.clamp(min=0) * columns + column  # [B, columns]: each column's landing cell
    two_and_two = (_line_sums(pieces) == CONNECT - 2) & (_line_sums(empty) == 2)  # [B, lines]
    opened = lines.T.bool()[cell] & two_and_two.unsqueeze(1)  # [B, columns, lines]: lines the drop makes open
    flat_empty = empty.flatten(1).unsqueeze(1)
    before = winning_cells(pieces, empty).flatten(1).unsqueeze(1)
    # One 2-d product (a 3-d one runs as a batch of small ones, several times slower).
    opened_cells = (opened.flatten(0, 1).to(torch.float32) @ lines).view(batch, columns, lines.shape[1]) > 0
    after = (before | opened_cells) & flat_empty  # [B, columns, cells]
    after = after.scatter(2, cell.unsqueeze(-1), False)  # the cell just filled
    # After a drop in column c, every column lands where it did, except c: one row higher.
    landing_after = landing.unsqueeze(1) - torch.eye(columns, dtype=landing.dtype, device=landing.device)
    wins = after.gather(2, landing_after.clamp(min=0) * columns + column) & (landing_after >= 0)
    return torch.where(landing >= 0, wins.sum(-1), 0)
