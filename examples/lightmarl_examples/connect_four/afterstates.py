"""An encoder for gravity board games that looks at the board after each possible drop (afterstates).

Model-free PPO on connect four learns its tactics slowly: a 256-256 MLP or a plain CNN main
player, after 614k frames of league self-play, still missed about half of its immediate wins and
blocks (docs/league.md). Those tactics are facts about the board *after* a move, which the rules
determine: a piece dropped in a column lands on the column's lowest empty cell. Scoring moves by
their afterstates is an old device of game-playing RL (Sutton & Barto, "Reinforcement Learning:
An Introduction", 2nd ed., section 6.8). :class:`DropAfterstateEncoder` applies the drop rule and
nothing else: what is good in an afterstate is learned.
"""

from __future__ import annotations

import torch
from torch import nn

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.encoders import ACTIVATIONS, activation_class
from lightmarl_examples.connect_four.rules import board_size


class DropAfterstateEncoder(nn.Module):
    """Features of the board after a piece of either player is dropped in each column, plus the board itself.

    Reads ``[*batch, rows, columns, 2]`` observations, channel 0 the mover's pieces and channel 1
    the opponent's, row 0 at the top (PettingZoo's ``connect_four_v3``). For each column it builds
    two afterstates: the mover's piece dropped there, and the opponent's (what the opponent would
    get by playing there next: the threat a block removes). Each afterstate is seen from the
    dropping player's side (its pieces in channel 0) and passes through one shared convolution
    (``kernel_size`` x ``kernel_size``, no padding: a 4x4 window holds every line of four), then
    a max over positions. The features are the ``2 * columns * channels`` afterstate features
    followed by the flattened board. A full column's afterstates are the board unchanged (its
    action is masked anyway).

    Args:
        group: the agent group whose observations it reads (``[rows, columns, 2]``).
        channels: convolution channels (features per afterstate).
        kernel_size: side of the convolution's window.
        activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.

    Example:
        >>> group = GroupSpec("player", ("player_0", "player_1"), (0, 1), (6, 7, 2), "discrete", num_actions=7)
        >>> DropAfterstateEncoder(group, channels=8)(torch.zeros(5, 2, 6, 7, 2)).shape
        torch.Size([5, 2, 196])
    """

    column_one_hot: torch.Tensor
    cell_images: torch.Tensor

    def __init__(self, group: GroupSpec, channels: int = 32, kernel_size: int = 4, activation: str = "relu") -> None:
        super().__init__()
        rows, columns = board_size(group, "DropAfterstateEncoder")
        if not 1 <= kernel_size <= min(rows, columns):
            raise ValueError(
                f"DropAfterstateEncoder: kernel_size {kernel_size} does not fit a {rows}x{columns} board "
                f"(1..{min(rows, columns)})"
            )
        if group.action_kind != "discrete" or group.num_actions != columns:
            raise ValueError(
                f"DropAfterstateEncoder: one action per column ({columns}); group {group.name!r} has "
                f"{group.action_kind} actions ({group.num_actions or group.action_shape})"
            )
        activation_class(activation, "encoder activation")
        self.observation_shape = tuple(group.observation_shape)
        self.rows, self.columns, self.channels = rows, columns, int(channels)
        self.conv = nn.Conv2d(2, self.channels, kernel_size)
        self.activation = ACTIVATIONS[activation]()
        self.out_features = 2 * columns * self.channels + rows * columns * 2
        self.register_buffer("column_one_hot", torch.eye(columns).view(1, columns, 1, columns), persistent=False)
        # One image per cell with a single piece in it: their convolutions are what a drop adds.
        self.register_buffer("cell_images", torch.eye(rows * columns).view(-1, 1, rows, columns), persistent=False)

    def landing_cells(self, empty: torch.Tensor) -> torch.Tensor:
        """``[N, rows, columns]``: 1 on each column's lowest empty cell (where a dropped piece lands)."""
        # A cell is a landing cell when it is empty and the cell below it is not (or it is the bottom row).
        below_filled = torch.ones_like(empty)
        below_filled[:, :-1] = 1 - empty[:, 1:]
        return empty * below_filled

    def afterstates(self, own: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
        """``[N, 2, columns, 2, rows, columns]``: per dropper (mover, opponent) and column, the board from the dropper's side.

        The reference the features are defined by (``forward`` computes the same features without
        building these boards).
        """
        landing = self.landing_cells(1 - own - theirs).unsqueeze(1) * self.column_one_hot  # [N, columns, rows, columns]
        own_boards, their_boards = own.unsqueeze(1), theirs.unsqueeze(1)
        mover_drops = torch.stack([(own_boards + landing).expand_as(landing), their_boards.expand_as(landing)], 2)
        opponent_drops = torch.stack([(their_boards + landing).expand_as(landing), own_boards.expand_as(landing)], 2)
        return torch.stack([mover_drops, opponent_drops], 1)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[: observation.dim() - 3]
        board = observation.reshape(-1, *self.observation_shape).to(self.cell_images.dtype)
        own, theirs = board[..., 0], board[..., 1]
        # The convolution is linear: conv(board + piece) = conv(board) + conv(piece alone). So each
        # afterstate costs a lookup, not a convolution: one conv of the board per dropper's side,
        # plus the precomputed response to a single piece on the column's landing cell.
        sides = torch.stack([torch.stack([own, theirs], 1), torch.stack([theirs, own], 1)], 1)  # [N, 2, 2, rows, cols]
        before = self.conv(sides.flatten(0, 1)).unflatten(0, (board.shape[0], 2))  # [N, 2, C, h, w]
        piece = nn.functional.conv2d(self.cell_images, self.conv.weight[:, :1])  # [cells, C, h, w]
        piece = torch.cat([piece, torch.zeros_like(piece[:1])])  # a full column adds nothing
        landing = self.landing_cells(1 - own - theirs)  # [N, rows, cols]
        row = landing.argmax(1)  # the landing row of each column (any row of a full column)
        column = torch.arange(self.columns, device=board.device)
        cell = torch.where(landing.amax(1) > 0, row * self.columns + column, self.rows * self.columns)  # [N, cols]
        after = before.unsqueeze(2) + piece[cell].unsqueeze(1)  # [N, 2, cols, C, h, w]
        features = self.activation(after).amax((-2, -1)).flatten(1)
        return torch.cat([features, board.flatten(1)], -1).reshape(*batch, self.out_features)
