"""The rules of connect four on batched boards: where a dropped piece lands and which drops complete four.

One place for the game's rules, shared by the scripted heuristic
(:class:`~lightmarl.policies.scripted.ConnectFourHeuristicPolicy`), the rule-feature encoder
(:class:`~lightmarl.policies.threats.ThreatFeaturesEncoder`) and the mistake counter
(``benchmarks/connect_four_mistakes.py``). Boards are ``[B, rows, columns]`` with row 0 at the
top (PettingZoo's ``connect_four_v3``): a piece dropped in a column lands on the column's lowest
empty cell. Pieces and empty cells are given as 0/1 (or bool) tensors of that shape.
"""

from __future__ import annotations

import torch
from torch.nn import functional

#: pieces in a row that win.
CONNECT = 4


def line_kernels(dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
    """``[4, 1, 4, 4]``: kernels that sum a horizontal, a vertical and both diagonal lines of four."""
    kernels = torch.zeros(4, 1, CONNECT, CONNECT, dtype=dtype, device=device)
    kernels[0, 0, 0, :] = 1
    kernels[1, 0, :, 0] = 1
    kernels[2, 0] = torch.eye(CONNECT, dtype=dtype, device=device)
    kernels[3, 0] = torch.eye(CONNECT, dtype=dtype, device=device).flip(-1)
    return kernels


def _line_sums(cells: torch.Tensor) -> torch.Tensor:
    """``[B, 4, rows + 3, columns + 3]``: how many of ``cells`` lie on each line of four, per direction.

    The board is padded by 3 on every side so that every line of four on it is one window of
    every kernel (a horizontal line sits in the kernel's top row, whatever row it is on); windows
    that reach off the board count the cells off it as 0.
    """
    pad = CONNECT - 1
    cells = cells.to(torch.float32).unsqueeze(1)
    return functional.conv2d(functional.pad(cells, (pad, pad, pad, pad)), line_kernels(device=cells.device))


def has_four(pieces: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: ``pieces`` (``[B, rows, columns]``, 0/1) hold four in a row somewhere."""
    return (_line_sums(pieces) >= CONNECT).flatten(1).any(-1)


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
    three of its cells hold ``pieces`` and the fourth is empty; the line's sums are spread back
    onto its four cells (the transposed convolution), and of those only the empty one is kept.
    """
    empty = empty.bool()
    pad = CONNECT - 1
    open_lines = (_line_sums(pieces) == CONNECT - 1) & (_line_sums(empty) == 1)
    kernels = line_kernels(device=pieces.device)
    on_open_line = functional.conv_transpose2d(open_lines.to(torch.float32), kernels, padding=pad).squeeze(1)
    return (on_open_line > 0) & empty


def cells_at(cells: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``[B, columns]`` bool: ``cells[b, rows[b, c], c]``, false where ``rows`` is off the board (< 0)."""
    on_board = rows >= 0
    picked = cells.gather(1, rows.clamp(min=0).unsqueeze(1)).squeeze(1)
    return picked.bool() & on_board


def winning_drops(pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``[B, columns]`` bool: dropping one more of ``pieces`` into the column completes four (a full column: false)."""
    return cells_at(winning_cells(pieces, empty), landing_rows(empty))


def drop_each_column(pieces: torch.Tensor, empty: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The boards after one more of ``pieces`` is dropped in each column: pieces and empty cells, ``[B, columns, rows, columns]``.

    A full column's afterstate is the board unchanged.
    """
    columns = empty.shape[-1]
    landing = landing_rows(empty)  # [B, columns]
    rows = torch.arange(empty.shape[-2], device=empty.device).view(1, 1, -1, 1)
    column = torch.arange(columns, device=empty.device)
    # placed[b, c] is 1 on the cell where a piece dropped in column c lands.
    placed = (rows == landing.view(*landing.shape, 1, 1)) & (column.view(1, 1, 1, -1) == column.view(1, -1, 1, 1))
    after_pieces = pieces.bool().unsqueeze(1) | placed
    after_empty = empty.bool().unsqueeze(1) & ~placed
    return after_pieces, after_empty
