"""Skill ratings from game results: Elo for 1v1 and openskill for teams and free-for-all games.

One module shared by the league (opponent statistics, snapshot ratings) and by evaluation
(head-to-head reports), so both rank players the same way. Torch-free: plain floats in, plain
floats out, and the small tables save and load as plain dicts.

Examples:
    >>> elo = EloRatings()
    >>> elo.update("a", "b", "win")
    >>> round(elo["a"] - elo["b"], 1)
    32.0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from openskill.models import (
    BradleyTerryFull,
    BradleyTerryPart,
    PlackettLuce,
    ThurstoneMostellerFull,
    ThurstoneMostellerPart,
)

GameResult = Literal["win", "draw", "loss"]
"""Result of one game from the point of view of the first (home) player."""

OpenSkillModelName = Literal[
    "PlackettLuce", "BradleyTerryFull", "BradleyTerryPart", "ThurstoneMostellerFull", "ThurstoneMostellerPart"
]

_SCORES: dict[str, float] = {"win": 1.0, "draw": 0.5, "loss": 0.0}
_MODELS = {
    "PlackettLuce": PlackettLuce,
    "BradleyTerryFull": BradleyTerryFull,
    "BradleyTerryPart": BradleyTerryPart,
    "ThurstoneMostellerFull": ThurstoneMostellerFull,
    "ThurstoneMostellerPart": ThurstoneMostellerPart,
}


def score(result: GameResult | str | float) -> float:
    """The home player's score of one game: 1 for a win, 0.5 for a draw, 0 for a loss.

    A float in ``[0, 1]`` passes through, so callers may report fractional scores.
    """
    if isinstance(result, str):
        if result not in _SCORES:
            raise ValueError(f"game result {result!r} is not one of {sorted(_SCORES)}")
        return _SCORES[result]
    value = float(result)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"game score {result!r} must lie in [0, 1] (1 win, 0.5 draw, 0 loss)")
    return value


def elo_expected(rating_a: float, rating_b: float, scale: float = 400.0) -> float:
    """Expected score of a player rated ``rating_a`` against one rated ``rating_b`` (logistic Elo)."""
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / scale))


def elo_update(
    rating_a: float, rating_b: float, result: GameResult | str | float, k: float = 32.0, scale: float = 400.0
) -> tuple[float, float]:
    """New ``(rating_a, rating_b)`` after one game whose ``result`` is seen from ``a``'s side.

    Zero-sum: whatever ``a`` gains, ``b`` loses.
    """
    delta = k * (score(result) - elo_expected(rating_a, rating_b, scale))
    return rating_a + delta, rating_b - delta


class EloRatings:
    """A table of Elo ratings, one per player id, updated game by game.

    Args:
        initial: rating of a player seen for the first time.
        k: step size of one update (the K-factor).
        scale: rating difference at which the stronger player is expected to score 10:1.
    """

    def __init__(self, initial: float = 1000.0, k: float = 32.0, scale: float = 400.0) -> None:
        if k <= 0 or scale <= 0:
            raise ValueError(f"EloRatings needs k > 0 and scale > 0, got k={k}, scale={scale}")
        self.initial = float(initial)
        self.k = float(k)
        self.scale = float(scale)
        self._ratings: dict[str, float] = {}

    def __getitem__(self, player_id: str) -> float:
        return self._ratings.get(player_id, self.initial)

    def __contains__(self, player_id: object) -> bool:
        return player_id in self._ratings

    def __len__(self) -> int:
        return len(self._ratings)

    def add(self, player_id: str, rating: float | None = None) -> None:
        """Register ``player_id`` at ``rating`` (default: ``initial``); an existing entry is overwritten."""
        self._ratings[player_id] = self.initial if rating is None else float(rating)

    def update(self, home: str, away: str, result: GameResult | str | float) -> None:
        """Record one game between ``home`` and ``away``; ``result`` is ``home``'s."""
        if home == away:
            return  # a game against oneself carries no information about relative strength
        self._ratings[home], self._ratings[away] = elo_update(self[home], self[away], result, self.k, self.scale)

    def expected(self, home: str, away: str) -> float:
        """Expected score of ``home`` against ``away`` under the current ratings."""
        return elo_expected(self[home], self[away], self.scale)

    def as_dict(self) -> dict[str, float]:
        """A copy of the table, highest rating first."""
        return dict(sorted(self._ratings.items(), key=lambda item: -item[1]))

    def state_dict(self) -> dict[str, Any]:
        return {"ratings": dict(self._ratings)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._ratings = {str(key): float(value) for key, value in state["ratings"].items()}


def elo_from_results(
    games: Iterable[tuple[str, str, GameResult | str | float]], initial: float = 1000.0, k: float = 32.0
) -> dict[str, float]:
    """Elo ratings after applying ``(home, away, result)`` games in order."""
    table = EloRatings(initial=initial, k=k)
    for home, away, result in games:
        table.update(home, away, result)
    return table.as_dict()


def openskill_model(name: OpenSkillModelName | str = "PlackettLuce", **kwargs: Any) -> Any:
    """An openskill model by name; ``kwargs`` go to its constructor (``mu``, ``sigma``, ``beta``, ``tau``...)."""
    if name not in _MODELS:
        raise ValueError(f"openskill model {name!r} is not one of {sorted(_MODELS)}")
    return _MODELS[name](**kwargs)


def rate_teams(
    teams: Sequence[Sequence[tuple[float, float]]],
    ranks: Sequence[float] | None = None,
    scores: Sequence[float] | None = None,
    model: Any = None,
) -> list[list[tuple[float, float]]]:
    """Updated ``(mu, sigma)`` of every member of every team after one game (openskill, Weng & Lin 2011).

    Args:
        teams: per team, the ``(mu, sigma)`` of each member; a 1v1 game is two teams of one.
        ranks: finishing place per team, lower is better; equal ranks are a draw.
        scores: points per team, higher is better (give ``ranks`` or ``scores``, not both).
        model: an openskill model (see [`openskill_model`][lightmarl.ratings.openskill_model]); default Plackett-Luce.
    """
    if (ranks is None) == (scores is None):
        raise ValueError("rate_teams needs exactly one of ranks= or scores=")
    if len(teams) < 2 or any(len(team) == 0 for team in teams):
        raise ValueError(f"rate_teams needs at least two non-empty teams, got team sizes {[len(t) for t in teams]}")
    model = openskill_model() if model is None else model
    rated = model.rate(
        [[model.rating(mu=mu, sigma=sigma) for mu, sigma in team] for team in teams],
        ranks=None if ranks is None else list(ranks),
        scores=None if scores is None else list(scores),
    )
    return [[(member.mu, member.sigma) for member in team] for team in rated]


def ordinal(mu: float, sigma: float, z: float = 3.0) -> float:
    """A conservative skill estimate, ``mu - z * sigma``, for ranking openskill ratings."""
    return mu - z * sigma


class SkillRatings:
    """A table of openskill ``(mu, sigma)`` ratings, one per player id.

    Args:
        model: openskill model name (`OpenSkillModelName`).
        mu: prior mean of a new player.
        sigma: prior standard deviation of a new player.
    """

    def __init__(self, model: OpenSkillModelName = "PlackettLuce", mu: float = 25.0, sigma: float = 25.0 / 3.0) -> None:
        self.model = openskill_model(model, mu=mu, sigma=sigma)
        self.mu = float(mu)
        self.sigma = float(sigma)
        self._ratings: dict[str, tuple[float, float]] = {}

    def __getitem__(self, player_id: str) -> tuple[float, float]:
        return self._ratings.get(player_id, (self.mu, self.sigma))

    def __contains__(self, player_id: object) -> bool:
        return player_id in self._ratings

    def add(self, player_id: str, rating: tuple[float, float] | None = None) -> None:
        """Register ``player_id`` at ``rating`` (default: the prior); an existing entry is overwritten."""
        mu, sigma = (self.mu, self.sigma) if rating is None else rating
        self._ratings[player_id] = (float(mu), float(sigma))

    def update(self, teams: Sequence[Sequence[str]], ranks: Sequence[float]) -> None:
        """Record one game between ``teams`` (player ids per team) that finished at ``ranks``."""
        if len({player for team in teams for player in team}) < sum(len(team) for team in teams):
            return  # a player on two sides (self-play) says nothing about relative strength
        rated = rate_teams([[self[p] for p in team] for team in teams], ranks=ranks, model=self.model)
        for team, new in zip(teams, rated):
            for player_id, rating in zip(team, new):
                self._ratings[player_id] = rating

    def update_1v1(self, home: str, away: str, result: GameResult | str | float) -> None:
        """Record one 1v1 game; ``result`` is ``home``'s."""
        home_score = score(result)
        self.update([[home], [away]], ranks=[1.0 - home_score, home_score])

    def ordinal(self, player_id: str, z: float = 3.0) -> float:
        """Conservative skill of ``player_id`` (see [`ordinal`][lightmarl.ratings.ordinal])."""
        return ordinal(*self[player_id], z=z)

    def state_dict(self) -> dict[str, Any]:
        return {"ratings": {key: list(value) for key, value in self._ratings.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._ratings = {str(key): (float(mu), float(sigma)) for key, (mu, sigma) in state["ratings"].items()}
