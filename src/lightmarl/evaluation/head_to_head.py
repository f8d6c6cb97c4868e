"""Head-to-head results between bindings: the payoff (win-rate) matrix and ratings.

Input is a list of games ``(home, away, result)`` with ``result`` seen from ``home``'s side
(``"win"`` / ``"draw"`` / ``"loss"`` or a score in ``[0, 1]``), as [`lightmarl.ratings`][lightmarl.ratings]
takes them. Play every pair with seats swapped (``a`` at home against ``b`` and ``b`` at home
against ``a``), or a first-move advantage shows up as a difference in strength. Ratings come
from [`lightmarl.ratings`][lightmarl.ratings], the module the league uses too.

Examples:
    >>> games = [("a", "b", "win"), ("b", "a", "draw")]
    >>> result = summarize_games(games)
    >>> result.payoff.score_of("a", "b"), result.payoff.score_of("b", "a")
    (0.75, 0.25)
    >>> result.elo["a"] > result.elo["b"]
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightmarl.ratings import EloRatings, GameResult, SkillRatings, score

Game = tuple[str, str, GameResult | str | float]
"""One game: ``(home, away, result)``, ``result`` from ``home``'s side."""


@dataclass(frozen=True)
class PayoffMatrix:
    """Who beats whom: per ordered pair of players, games, wins, draws, losses and mean score.

    Row ``i``, column ``j`` is seen from player ``i`` against player ``j``, whichever seat each
    took; a draw scores half a win. With every game counted from both sides,
    ``score + score.T == 1`` wherever the two played.

    Attributes:
        players: player ids, the order of rows and columns.
        games: games played between ``i`` and ``j``.
        wins: games ``i`` won against ``j``.
        draws: games ``i`` drew with ``j``.
        losses: games ``i`` lost to ``j``.
        score_sum: sum of ``i``'s scores against ``j`` (1 win, 0.5 draw, 0 loss, or the given score).
    """

    players: list[str]
    games: np.ndarray
    wins: np.ndarray
    draws: np.ndarray
    losses: np.ndarray
    score_sum: np.ndarray

    @property
    def score(self) -> np.ndarray:
        """Mean score of row player against column player (its win rate, draws counted half); NaN where unplayed."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.games > 0, self.score_sum / np.maximum(self.games, 1), np.nan)

    def score_of(self, player: str, opponent: str) -> float:
        """Mean score of ``player`` against ``opponent`` (NaN if they never played)."""
        return float(self.score[self.players.index(player), self.players.index(opponent)])

    def to_dict(self) -> dict[str, Any]:
        score = self.score
        return {
            "players": list(self.players),
            "games": self.games.tolist(),
            "wins": self.wins.tolist(),
            "draws": self.draws.tolist(),
            "losses": self.losses.tolist(),
            "score": [[None if np.isnan(value) else float(value) for value in row] for row in score],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PayoffMatrix:
        """Inverse of `to_dict`."""
        games = np.asarray(data["games"], dtype=np.int64)
        score = np.asarray([[np.nan if v is None else v for v in row] for row in data["score"]], dtype=np.float64)
        return cls(
            players=list(data["players"]),
            games=games,
            wins=np.asarray(data["wins"], dtype=np.int64),
            draws=np.asarray(data["draws"], dtype=np.int64),
            losses=np.asarray(data["losses"], dtype=np.int64),
            score_sum=np.nan_to_num(score) * games,
        )


def payoff_matrix(games: Iterable[Game], players: Sequence[str] | None = None) -> PayoffMatrix:
    """Count ``games`` into a [`PayoffMatrix`][lightmarl.evaluation.head_to_head.PayoffMatrix].

    Args:
        games: ``(home, away, result)`` per game.
        players: row / column order; default: order of first appearance. A player in a game
            but not in this list is an error.
    """
    games = list(games)
    order = list(players) if players is not None else list(dict.fromkeys(p for game in games for p in game[:2]))
    unknown = sorted({p for game in games for p in game[:2]} - set(order))
    if unknown:
        raise ValueError(f"payoff_matrix: players {unknown} played games but are not in players={order}")
    index = {player: i for i, player in enumerate(order)}
    size = len(order)
    counts = {name: np.zeros((size, size), dtype=np.int64) for name in ("games", "wins", "draws", "losses")}
    score_sum = np.zeros((size, size), dtype=np.float64)
    for home, away, result in games:
        home_score = score(result)
        # Each game counts once from each side, so the matrix is antisymmetric by construction.
        for me, them, mine in ((home, away, home_score), (away, home, 1.0 - home_score)):
            i, j = index[me], index[them]
            counts["games"][i, j] += 1
            score_sum[i, j] += mine
            if mine in (0.0, 0.5, 1.0):
                counts[{1.0: "wins", 0.5: "draws", 0.0: "losses"}[mine]][i, j] += 1
    return PayoffMatrix(players=order, score_sum=score_sum, **counts)


@dataclass(frozen=True)
class HeadToHead:
    """A head-to-head scenario's payoff matrix and ratings.

    Attributes:
        payoff: the payoff matrix.
        elo: player -> Elo rating after applying the games in order (sequential Elo depends on
            the order; ratings of a long, shuffled list are stable).
        openskill: player -> ``(mu, sigma)`` of an openskill Plackett-Luce rating.
    """

    payoff: PayoffMatrix
    elo: dict[str, float]
    openskill: dict[str, tuple[float, float]]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.payoff.to_dict(),
            "elo": dict(self.elo),
            "openskill": {
                player: {"mu": mu, "sigma": sigma, "ordinal": mu - 3.0 * sigma}
                for player, (mu, sigma) in self.openskill.items()
            },
        }


def summarize_games(
    games: Iterable[Game], players: Sequence[str] | None = None, elo_initial: float = 1000.0, elo_k: float = 32.0
) -> HeadToHead:
    """Payoff matrix, Elo and openskill ratings of ``games`` (see [`payoff_matrix`][lightmarl.evaluation.head_to_head.payoff_matrix]).

    Args:
        games: ``(home, away, result)`` per game, in the order they were played.
        players: row / column order of the payoff matrix.
        elo_initial: Elo rating of every player before the first game.
        elo_k: Elo K-factor.
    """
    games = list(games)
    payoff = payoff_matrix(games, players)
    elo = EloRatings(initial=elo_initial, k=elo_k)
    skill = SkillRatings()
    for home, away, result in games:
        elo.update(home, away, result)
        skill.update_1v1(home, away, result)
    return HeadToHead(
        payoff=payoff,
        elo={player: elo[player] for player in payoff.players},
        openskill={player: skill[player] for player in payoff.players},
    )
