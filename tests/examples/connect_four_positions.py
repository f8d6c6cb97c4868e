"""Connect-four boards for the rule and encoder tests: hand-drawn ones and positions of random PettingZoo games."""

from __future__ import annotations

import random

import torch
from pettingzoo.classic import connect_four_v3


def board(*rows: str) -> torch.Tensor:
    """``[6, 7, 2]`` from its bottom rows, top row first: ``x`` the mover's pieces, ``o`` the opponent's."""
    full = ["......."] * (6 - len(rows)) + list(rows)
    own = torch.tensor([[c == "x" for c in row] for row in full], dtype=torch.float32)
    theirs = torch.tensor([[c == "o" for c in row] for row in full], dtype=torch.float32)
    return torch.stack([own, theirs], -1)


def play_moves(moves: list[int], seed: int = 0):
    """A fresh ``connect_four_v3`` env with ``moves`` (columns, ``player_0`` first) played."""
    env = connect_four_v3.env()
    env.reset(seed=seed)
    for column in moves:
        env.step(column)
    return env


def random_game_positions(games: int, seed: int = 0):
    """Yield ``(moves, observation)`` before every move of ``games`` random legal games of ``connect_four_v3``.

    ``moves`` are the columns played so far (:func:`play_moves` rebuilds the env there: a wrapped
    PettingZoo env cannot be deep-copied); ``observation`` is the mover's ``[6, 7, 2]`` board.
    """
    rng = random.Random(seed)
    for _ in range(games):
        env = play_moves([])
        moves: list[int] = []
        while not (any(env.terminations.values()) or any(env.truncations.values())):
            seen = env.observe(env.agent_selection)
            yield list(moves), torch.as_tensor(seen["observation"], dtype=torch.float32)
            moves.append(rng.choice([c for c in range(7) if seen["action_mask"][c]]))
            env.step(moves[-1])
