"""Payoff: the shared record of past results that the league assigns future jobs from.

``BattleSharedPayoff`` keeps, for every ordered pair of players, exponentially decayed counts of
wins, draws, losses and games, as in AlphaStar (Vinyals et al. 2019, "Grandmaster level in
StarCraft II using multi-agent reinforcement learning"). ``SoloSharedPayoff`` keeps each player's
recent job results where there is no opponent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from lightmarl.ratings import GameResult


class Player(Protocol):
    """What the payoff needs of a league player ([`lightmarl.league.Player`][lightmarl.league.player.Player]); a protocol, so
    that this module stays below ``player.py``, which builds on it."""

    @property
    def player_id(self) -> str: ...

    @property
    def payoff(self) -> Any: ...

    @payoff.setter
    def payoff(self, payoff: Any) -> None: ...


_MIRROR: dict[str, str] = {"win": "loss", "draw": "draw", "loss": "win"}
_COUNT_KEY: dict[str, str] = {"win": "wins", "draw": "draws", "loss": "losses"}


class BattleRecordDict(dict):
    """Decayed counts of one player's games against one opponent: ``wins``, ``draws``, ``losses``, ``games``.

    Multiplying by a float returns a decayed copy (``record * 0.99``); the counts are floats once
    decayed.
    """

    data_keys = ("wins", "draws", "losses", "games")

    def __init__(self, wins: float = 0.0, draws: float = 0.0, losses: float = 0.0, games: float = 0.0) -> None:
        super().__init__(wins=wins, draws=draws, losses=losses, games=games)

    def __mul__(self, decay: float) -> BattleRecordDict:
        return BattleRecordDict(**{key: self[key] * decay for key in self.data_keys})

    __rmul__ = __mul__

    def win_rate(self, min_games: float = 0.0) -> float:
        """``(wins + draws / 2) / games``, or 0.5 (no evidence either way) below ``min_games`` games."""
        games = self["games"]
        if games <= 0 or games < min_games:
            return 0.5
        return (self["wins"] + 0.5 * self["draws"]) / games


class SharedPayoff:
    """Players shared by all roles, common to the battle and solo payoffs.

    Not locked itself: every update from several threads goes through
    [`LeagueManager`][lightmarl.league.manager.LeagueManager], whose lock covers the payoff too.
    """

    def __init__(self) -> None:
        self._players: list[Player] = []

    @property
    def players(self) -> list[Player]:
        """A snapshot of the league's players, in the order they joined."""
        return list(self._players)

    def add_player(self, player: Player) -> None:
        """Add ``player`` to the league; its ``payoff`` becomes this one."""
        if any(p.player_id == player.player_id for p in self._players):
            raise ValueError(f"player id {player.player_id!r} is already in the league")
        self._players.append(player)
        player.payoff = self

    def set_players(self, players: Iterable[Player]) -> None:
        """Replace the player list (used when a league is restored from a state dict)."""
        self._players = []
        for player in players:
            self.add_player(player)


class BattleSharedPayoff(SharedPayoff):
    """Win rates between any two players of a two-sided game, with decay.

    Every game updates both directed records, so ``win_rate(a, b) + win_rate(b, a) == 1``: a win
    for one side is a loss for the other, and a draw is half a win for *each* side (never a loss
    for both). Games of a player against itself are not recorded; its win rate against itself is
    0.5.

    Args:
        decay: factor applied to a pair's counts before each new game between them; 1.0 keeps
            everything, 0.99 (AlphaStar) weighs the last ~100 games.
        min_games: below this many (decayed) games a win rate reads 0.5.
    """

    def __init__(self, decay: float = 0.99, min_games: float = 8.0) -> None:
        super().__init__()
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"payoff decay must lie in (0, 1], got {decay}")
        if min_games < 0:
            raise ValueError(f"payoff min_games must be >= 0, got {min_games}")
        self.decay = float(decay)
        self.min_games = float(min_games)
        self._data: dict[tuple[str, str], BattleRecordDict] = {}

    def record(self, home: str, away: str) -> BattleRecordDict:
        """A copy of ``home``'s record against ``away``."""
        return BattleRecordDict(**self._data.get((home, away), BattleRecordDict()))

    def win_rate(self, home: str, away: str) -> float:
        """``home``'s (decayed) win rate against ``away``; draws count half."""
        if home == away:
            return 0.5
        return self._data.get((home, away), BattleRecordDict()).win_rate(self.min_games)

    def win_rates(self, home: str | Player, away: Sequence[str | Player]) -> np.ndarray:
        """``home``'s win rate against each of ``away`` (shape ``[len(away)]``)."""
        home_id = _player_id(home)
        return np.array([self.win_rate(home_id, _player_id(a)) for a in away], dtype=np.float64)

    def table(self, players: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(score, games)`` between ``players``, row against column, each ``[n, n]``.

        ``games`` are the decayed counts; ``score`` is the row player's decayed mean score (draws
        half; ``min_games`` not applied), NaN where the two never played.
        """
        size = len(players)
        score = np.full((size, size), np.nan)
        games = np.zeros((size, size))
        for i, home in enumerate(players):
            for j, away in enumerate(players):
                record = self._data.get((home, away))
                if record is not None and record["games"] > 0:
                    games[i, j] = record["games"]
                    score[i, j] = (record["wins"] + 0.5 * record["draws"]) / (
                        record["wins"] + record["draws"] + record["losses"]
                    )
        return score, games

    def __getitem__(self, pair: tuple[str | Player, str | Player]) -> float:
        home, away = pair
        return self.win_rate(_player_id(home), _player_id(away))

    def update(self, home: str, away: str, results: GameResult | str | Iterable[GameResult | str]) -> None:
        """Record games between ``home`` and ``away``; each result is ``home``'s ("win", "draw", "loss")."""
        results = [results] if isinstance(results, str) else list(results)
        for result in results:
            if result not in _MIRROR:
                raise ValueError(f"game result {result!r} is not one of {sorted(_MIRROR)}")
        known = {p.player_id for p in self._players}
        for player_id in (home, away):
            if player_id not in known:
                raise ValueError(f"payoff update names player {player_id!r}, which is not in the league")
        if home == away:
            return
        for result in results:
            for key, seen in (((home, away), result), ((away, home), _MIRROR[result])):
                record = self._data.get(key, BattleRecordDict()) * self.decay
                record["games"] += 1
                record[_COUNT_KEY[seen]] += 1
                self._data[key] = record

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python state: every directed record as ``[home, away, wins, draws, losses, games]``."""
        records = [[h, a, *(float(r[k]) for k in BattleRecordDict.data_keys)] for (h, a), r in self._data.items()]
        return {"decay": self.decay, "min_games": self.min_games, "records": records}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.decay = float(state["decay"])
        self.min_games = float(state["min_games"])
        self._data = {}
        for home, away, *counts in state["records"]:
            self._data[(str(home), str(away))] = BattleRecordDict(*(float(c) for c in counts))


class SoloSharedPayoff(SharedPayoff):
    """Each player's most recent job results (for example episode returns) where there is no opponent.

    Args:
        buffer_size: how many recent results each player keeps.
    """

    def __init__(self, buffer_size: int = 100) -> None:
        super().__init__()
        if buffer_size < 1:
            raise ValueError(f"solo payoff buffer_size must be >= 1, got {buffer_size}")
        self.buffer_size = int(buffer_size)
        self._data: dict[str, deque[Any]] = {}

    def update(self, player_id: str, results: Iterable[Any]) -> None:
        """Append ``results`` (plain numbers or dicts) to ``player_id``'s recent history."""
        if all(p.player_id != player_id for p in self._players):
            raise ValueError(f"payoff update names player {player_id!r}, which is not in the league")
        self._data.setdefault(player_id, deque(maxlen=self.buffer_size)).extend(results)

    def results(self, player_id: str) -> list[Any]:
        """``player_id``'s recent results, oldest first."""
        return list(self._data.get(player_id, ()))

    def state_dict(self) -> dict[str, Any]:
        return {"buffer_size": self.buffer_size, "results": {k: list(v) for k, v in self._data.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.buffer_size = int(state["buffer_size"])
        self._data = {str(p): deque(results, maxlen=self.buffer_size) for p, results in state["results"].items()}


def _player_id(player: str | Player) -> str:
    return player if isinstance(player, str) else player.player_id
