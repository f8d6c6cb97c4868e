"""Prioritized fictitious self-play (PFSP): turn win rates into opponent sampling probabilities.

AlphaStar (Vinyals et al. 2019) samples an opponent ``B`` for player ``A`` with probability
proportional to ``f(P[A beats B])``: ``squared`` focuses on the opponents ``A`` still loses to,
``variance`` on those near 50%, ``linear`` in between, ``linear_capped`` (league exploiters) caps
the weight of opponents ``A`` rarely beats.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

import numpy as np

PFSPWeighting = Literal["squared", "variance", "linear", "linear_capped"]

T = TypeVar("T")


def squared(win_rates: np.ndarray) -> np.ndarray:
    """``(1 - x)^2``: hardest opponents first."""
    return (1.0 - win_rates) ** 2


def variance(win_rates: np.ndarray) -> np.ndarray:
    """``x (1 - x)``: opponents of about equal strength first."""
    return win_rates * (1.0 - win_rates)


def linear(win_rates: np.ndarray) -> np.ndarray:
    """``1 - x``."""
    return 1.0 - win_rates


def linear_capped(win_rates: np.ndarray) -> np.ndarray:
    """``min(0.5, 1 - x)``: every opponent beaten less than half the time weighs the same."""
    return np.minimum(0.5, 1.0 - win_rates)


WEIGHTINGS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "squared": squared,
    "variance": variance,
    "linear": linear,
    "linear_capped": linear_capped,
}


def pfsp(win_rates: Sequence[float] | np.ndarray, weighting: PFSPWeighting | str = "squared") -> np.ndarray:
    """Sampling probabilities over opponents from the player's win rates against them.

    Args:
        win_rates: the player's win rate against each candidate, in ``[0, 1]``.
        weighting: one of `PFSPWeighting`.

    Returns:
        Probabilities that sum to 1; uniform when every weight is zero (for example ``squared``
        against opponents that are all beaten every time).
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"PFSP weighting {weighting!r} is not one of {sorted(WEIGHTINGS)}")
    rates = np.asarray(win_rates, dtype=np.float64)
    if rates.ndim != 1 or rates.size == 0:
        raise ValueError(f"PFSP needs a non-empty 1-D array of win rates, got shape {rates.shape}")
    if np.any((rates < 0.0) | (rates > 1.0)):
        raise ValueError(f"win rates must lie in [0, 1], got {rates.tolist()}")
    weights = WEIGHTINGS[weighting](rates)
    total = weights.sum()
    if total < 1e-10:
        return np.full_like(rates, 1.0 / rates.size)
    return weights / total


def remove_monotonic_suffix(win_rates: Sequence[float], players: Sequence[T]) -> tuple[list[float], list[T]]:
    """Drop the trailing snapshots against which the win rate only falls (AlphaStar's forgetting check).

    Snapshots are ordered oldest first. A player naturally wins less often against its more
    recent selves, so a win rate that only falls towards the newest snapshot is expected; the
    snapshots up to the last rise (an older snapshot beaten *less* often than a newer one) are
    the ones that can reveal forgetting. With no rise at all nothing is left.
    """
    rates = list(win_rates)
    for i in range(len(rates) - 1, 0, -1):
        if rates[i - 1] < rates[i]:
            return rates[: i + 1], list(players[: i + 1])
    return [], []
