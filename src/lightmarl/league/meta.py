"""Meta-strategies: a player's mixture over its snapshots, as opponent and as the policy it shows.

Fictitious play (Brown 1951; fictitious self-play, Heinrich et al. 2015) and PSRO (Lanctot et
al. 2017, "A Unified Game-Theoretic Approach to Multiagent Reinforcement Learning") train a
best response against a *mixture* of the strategies found so far and report the mixture, not
the latest best response, as the answer: in games such as poker the latest best response is
exploitable however long it trains, while the mixture approaches a Nash equilibrium.

[`MetaStrategyPlayer`][lightmarl.league.meta.MetaStrategyPlayer] is that loop in the league: at each episode of each env copy it
plays one of its own snapshots, drawn with the weights of its *meta-solver*, chosen by
``class_path``:

* [`UniformMetaSolver`][lightmarl.league.meta.UniformMetaSolver]: every snapshot alike (fictitious play);
* [`LinearMetaSolver`][lightmarl.league.meta.LinearMetaSolver]: snapshot ``k`` of ``n`` weighs ``k`` (linear averaging: later,
  stronger snapshots count more, as linear CFR and CFR+ weigh their iterates);
* [`NashMetaSolver`][lightmarl.league.meta.NashMetaSolver]: the Nash equilibrium of the empirical payoff matrix between the
  snapshots (PSRO's meta-game, solved as a linear program with SciPy's ``linprog``);
* [`PFSPMetaSolver`][lightmarl.league.meta.PFSPMetaSolver]: prioritized fictitious self-play weights of the player's win rates
  against the snapshots (AlphaStar).

Its [`MetaStrategyPlayer.mixture`][lightmarl.league.meta.MetaStrategyPlayer.mixture] (the snapshots and their weights) is what the league shows
as the player's policy: exploitability is measured on it
([`OpenSpielExploitability`][lightmarl.training.exploitability.OpenSpielExploitability] with ``policy: league``).

The meta-game between snapshots is a zero-sum matrix, ``payoff[i][j]`` what snapshot ``i`` gains
against ``j`` (``payoff + payoff.T == 0``). From the league's games: when the player is
snapshotted, its current win rates against its earlier snapshots (the league's decayed payoff),
less one half, become the new snapshot's row (a snapshot *is* the player at that moment), and the
column is their mirror. Win rates count wins, draws and losses, not the size of a win: in games
where the amount won matters (poker's chips) that is a coarse view of the meta-game, and an
evaluator that knows the game may replace each new row by exact expected returns
([`MetaStrategyPlayer.fill_meta_game`][lightmarl.league.meta.MetaStrategyPlayer.fill_meta_game]; in ``lightmarl fit`` the
recipe's ``league.meta_game: exact`` does it for OpenSpiel games as each snapshot is taken).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightmarl._imports import import_object
from lightmarl.league.pfsp import PFSPWeighting, pfsp
from lightmarl.league.player import (
    ActivePlayerSettings,
    BattleActivePlayer,
    HistoricalPlayer,
    Player,
    _check_probability,
)

#: ``fn(snapshot, earlier snapshots) -> what snapshot gains against each earlier one``: an exact
#: meta-game row (`MetaStrategyPlayer.fill_meta_game`).
MetaPayoffs = Callable[[HistoricalPlayer, Sequence[HistoricalPlayer]], Sequence[float]]


class MetaSolver(ABC):
    """Turns what the league knows of a player's snapshots into weights over them.

    Subclasses implement [`weights`][lightmarl.league.meta.MetaSolver.weights]; a solver whose weights depend only on the matrix (not
    on the player's current win rates) sets ``uses_win_rates = False`` so that the player may
    reuse them until the next snapshot.
    """

    uses_win_rates = True

    @abstractmethod
    def weights(self, payoff: np.ndarray, win_rates: np.ndarray) -> np.ndarray:
        """Probabilities over the ``n`` snapshots.

        Args:
            payoff: ``[n, n]`` the zero-sum meta-game, ``payoff[i, j]`` what snapshot ``i`` gains
                against ``j`` (``payoff + payoff.T == 0``).
            win_rates: ``[n]`` the live player's current win rates against each snapshot.
        """


class UniformMetaSolver(MetaSolver):
    """Every snapshot alike: the average of the best responses so far (fictitious play)."""

    uses_win_rates = False

    def weights(self, payoff: np.ndarray, win_rates: np.ndarray) -> np.ndarray:
        return np.full(len(payoff), 1.0 / len(payoff))


class LinearMetaSolver(MetaSolver):
    """Snapshot ``k`` (1 the oldest taking part) weighs ``k``: the average of the snapshots with the
    later ones counting more.

    An average of learning iterates converges faster when it forgets the early, weak ones
    (linear CFR / CFR+ weigh iteration ``t`` by ``t``); on Leduc poker the linear average of a
    self-play player's snapshots is less exploitable than the uniform one at the same frames
    (``docs/league.md``, "Poker").
    """

    uses_win_rates = False

    def weights(self, payoff: np.ndarray, win_rates: np.ndarray) -> np.ndarray:
        ranks = np.arange(1, len(payoff) + 1, dtype=np.float64)
        return ranks / ranks.sum()


class NashMetaSolver(MetaSolver):
    """The Nash equilibrium of the symmetric zero-sum meta-game ``payoff`` (PSRO).

    Solved as the linear program ``max v`` s.t. ``x @ payoff >= v`` column-wise, ``x`` a
    probability vector, with SciPy's HiGHS solver (``scipy.optimize.linprog``).
    """

    uses_win_rates = False

    def weights(self, payoff: np.ndarray, win_rates: np.ndarray) -> np.ndarray:
        return nash_of_symmetric(np.asarray(payoff, dtype=np.float64))


class PFSPMetaSolver(MetaSolver):
    """PFSP weights of the player's current win rates against its snapshots (AlphaStar).

    Args:
        weighting: ``squared`` (the default: hardest opponents), ``variance``, ``linear`` or
            ``linear_capped``.
    """

    def __init__(self, weighting: PFSPWeighting = "squared") -> None:
        pfsp([0.5], weighting)  # a bad name fails here, naming the choices
        self.weighting = weighting

    def weights(self, payoff: np.ndarray, win_rates: np.ndarray) -> np.ndarray:
        return pfsp(win_rates, self.weighting)


def nash_of_symmetric(payoff: np.ndarray) -> np.ndarray:
    """A maximin (Nash) strategy of the row player in the zero-sum game ``payoff`` (``[n, m]``, row's payoff)."""
    from scipy.optimize import linprog

    n, m = payoff.shape
    # Variables (x_1..x_n, v): minimize -v subject to v - x @ payoff[:, j] <= 0, sum(x) = 1, x >= 0.
    c = np.zeros(n + 1)
    c[-1] = -1.0
    a_ub = np.hstack([-payoff.T, np.ones((m, 1))])
    a_eq = np.hstack([np.ones((1, n)), np.zeros((1, 1))])
    bounds = [(0.0, None)] * n + [(None, None)]
    result = linprog(c, A_ub=a_ub, b_ub=np.zeros(m), A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if not result.success or result.x is None:  # pragma: no cover - a finite matrix game has a solution
        raise RuntimeError(f"NashMetaSolver: linprog failed on a {n}x{m} game: {result.message}")
    x = np.clip(np.asarray(result.x)[:n], 0.0, None)
    return x / x.sum()


def build_meta_solver(spec: MetaSolver | Mapping[str, Any] | str, field_name: str = "meta_solver") -> MetaSolver:
    """A [`MetaSolver`][lightmarl.league.meta.MetaSolver] from a recipe value: an instance, ``{class_path, init_args}``, or a class path."""
    if isinstance(spec, MetaSolver):
        return spec
    if isinstance(spec, str):
        spec = {"class_path": spec}
    if not isinstance(spec, Mapping) or "class_path" not in spec or set(spec) - {"class_path", "init_args"}:
        raise ValueError(
            f"{field_name}: expected {{class_path: lightmarl.league.meta.NashMetaSolver, init_args: {{...}}}}, got {spec!r}"
        )
    path = str(spec["class_path"])
    cls = import_object(path if "." in path else f"lightmarl.league.meta.{path}", field=f"{field_name}.class_path")
    if not (isinstance(cls, type) and issubclass(cls, MetaSolver)):
        raise ValueError(f"{field_name}.class_path: {path!r} is not a lightmarl.league.meta.MetaSolver subclass")
    try:
        return cls(**dict(spec.get("init_args") or {}))
    except TypeError as err:
        raise ValueError(f"{field_name}.init_args: {err}") from None


@dataclass
class MetaStrategySettings(ActivePlayerSettings):
    """Settings of [`MetaStrategyPlayer`][lightmarl.league.meta.MetaStrategyPlayer].

    Attributes:
        meta_solver: the weights over the player's snapshots, by ``class_path``
            (``lightmarl.league.meta.UniformMetaSolver``, the default; ``NashMetaSolver``;
            ``PFSPMetaSolver`` with ``init_args: {weighting: squared}``).
        self_play_prob: probability of playing its current self instead of a snapshot (0:
            fictitious play / PSRO proper; the first phase, before any snapshot, is self-play).
        window: only the newest ``window`` snapshots take part (``None``: all of them).
        reset_prob: probability of restarting the live player from its initial weights after a
            snapshot (1: PSRO's fresh best response per iteration, which no earlier phase has
            made over-confident; 0: it goes on from where it is).
    """

    meta_solver: Any = field(default_factory=lambda: {"class_path": "lightmarl.league.meta.UniformMetaSolver"})
    self_play_prob: float = 0.0
    window: int | None = None
    reset_prob: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_probability("self_play_prob", self.self_play_prob)
        _check_probability("reset_prob", self.reset_prob)
        if self.window is not None and (
            isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1
        ):
            raise ValueError(f"window must be a positive integer or null, got {self.window!r}")
        self.meta_solver = build_meta_solver(self.meta_solver, "settings.meta_solver")


class MetaStrategyPlayer(BattleActivePlayer):
    """Trains against a meta-strategy over its own snapshots and shows that mixture as its policy.

    Settings: [`MetaStrategySettings`][lightmarl.league.meta.MetaStrategySettings].
    """

    settings_class = MetaStrategySettings
    settings: MetaStrategySettings

    def __init__(self, player_id: str, settings: MetaStrategySettings | None = None, **kwargs: Any) -> None:
        """Args as [`ActivePlayer`][lightmarl.league.player.ActivePlayer]."""
        super().__init__(player_id, settings=settings, **kwargs)
        #: the zero-sum meta-game between this player's snapshots, in snapshot order (plain lists).
        self.meta_matrix: list[list[float]] = []
        #: per snapshot, whether its row holds exact payoffs ([`set_meta_payoffs`][lightmarl.league.meta.MetaStrategyPlayer.set_meta_payoffs]), not win rates.
        self.meta_exact: list[bool] = []
        self._cached: tuple[int, np.ndarray] | None = None

    def snapshot(self) -> HistoricalPlayer:
        """Snapshot as every player does, and add the new snapshot's row to the meta-game matrix."""
        own = self.snapshots()
        rates = self._win_rates(own) if own else []
        for row, rate in zip(self.meta_matrix, rates):
            row.append(0.5 - rate)
        self.meta_matrix.append([rate - 0.5 for rate in rates] + [0.0])
        self.meta_exact.append(False)
        self._cached = None
        return super().snapshot()

    def snapshots(self) -> list[HistoricalPlayer]:
        """Every snapshot of this player, oldest first (the meta-game matrix's order)."""
        return self._historical([self.player_id])

    def set_meta_payoffs(self, index: int, payoffs: Sequence[float]) -> None:
        """Replace snapshot ``index``'s row of the meta-game (and its column, mirrored) by
        ``payoffs`` against the snapshots before it: exact expected returns from an evaluator
        that knows the game, in place of the win rates of the league's games."""
        if not 0 <= index < len(self.meta_matrix) or len(payoffs) != index:
            raise ValueError(
                f"set_meta_payoffs: snapshot {index} of {len(self.meta_matrix)} takes {index} payoffs, got {len(payoffs)}"
            )
        for j, value in enumerate(payoffs):
            self.meta_matrix[index][j] = float(value)
            self.meta_matrix[j][index] = -float(value)
        self.meta_exact[index] = True
        self._cached = None

    def fill_meta_game(self, payoffs: MetaPayoffs) -> int:
        """Set every snapshot row that still holds win rates to ``payoffs(snapshot, earlier snapshots)``
        (exact expected returns from an evaluator that knows the game); returns how many rows it set."""
        snapshots = self.snapshots()
        written = 0
        for index, exact in enumerate(self.meta_exact[: len(snapshots)]):
            if not exact:
                self.set_meta_payoffs(index, payoffs(snapshots[index], snapshots[:index]))
                written += 1
        return written

    def members(self) -> list[HistoricalPlayer]:
        """The snapshots that take part in the mixture (the newest ``window``), oldest first."""
        own = self.snapshots()
        return own[-self.settings.window :] if self.settings.window else own

    def mixture(self) -> tuple[list[HistoricalPlayer], np.ndarray]:
        """The snapshots and their meta-strategy weights (empty before the first snapshot)."""
        members = self.members()
        if not members:
            return [], np.zeros(0)
        solver = self.settings.meta_solver
        n = len(members)
        if not solver.uses_win_rates and self._cached is not None and self._cached[0] == len(self.meta_matrix):
            return members, self._cached[1]
        total = len(self.snapshots())
        full = np.asarray(self.meta_matrix, dtype=np.float64)
        if full.shape != (total, total):
            # Snapshots this player did not record (e.g. a resumed league of another role): no data, a draw.
            full = np.zeros((total, total))
        payoff = full[-n:, -n:]
        weights = np.asarray(solver.weights(payoff, self._win_rates(members)), dtype=np.float64)
        if weights.shape != (n,) or not np.isfinite(weights).all() or (weights < 0).any() or weights.sum() <= 0:
            raise RuntimeError(f"{type(solver).__name__} returned weights {weights!r} for {n} snapshots")
        weights = weights / weights.sum()
        if not solver.uses_win_rates:
            self._cached = (len(self.meta_matrix), weights)
        return members, weights

    def mutate(self, rng: random.Random) -> str | None:
        return self.initial_checkpoint_path if rng.random() < self.settings.reset_prob else None

    def _get_job_opponents(self, rng: random.Random) -> tuple[list[Player], str]:
        members, weights = self.mixture()
        if not members or rng.random() < self.settings.self_play_prob:
            return [self], "self_play"
        return [members[rng.choices(range(len(members)), weights=weights.tolist())[0]]], "meta_strategy"

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "meta_matrix": [list(row) for row in self.meta_matrix],
            "meta_exact": list(self.meta_exact),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.meta_matrix = [[float(x) for x in row] for row in state.get("meta_matrix", [])]
        self.meta_exact = [bool(x) for x in state.get("meta_exact", [False] * len(self.meta_matrix))]
        self._cached = None


def shown_mixture(player: Any) -> tuple[list[HistoricalPlayer], np.ndarray] | None:
    """What a league player shows as its policy: its meta-strategy's snapshots and weights, or
    ``None`` for roles without one (their live binding is their policy) and before a first snapshot."""
    mixture = getattr(player, "mixture", None)
    if mixture is None:
        return None
    members, weights = mixture()
    return (members, weights) if members else None


__all__: Sequence[str] = [
    "LinearMetaSolver",
    "MetaPayoffs",
    "MetaSolver",
    "MetaStrategyPlayer",
    "MetaStrategySettings",
    "NashMetaSolver",
    "PFSPMetaSolver",
    "UniformMetaSolver",
    "build_meta_solver",
    "nash_of_symmetric",
    "shown_mixture",
]
