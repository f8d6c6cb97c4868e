"""League players: historical (frozen snapshots) and active (trained) members of a league.

A player is the unit the league assigns jobs to. Active players learn; after one phase of
training they are *snapshotted* into a frozen [`HistoricalPlayer`][lightmarl.league.player.HistoricalPlayer] and may *mutate* (for
example reset their weights). Roles subclass [`ActivePlayer`][lightmarl.league.player.ActivePlayer] and choose opponents in
`ActivePlayer._get_job_opponents`; see `lightmarl.league.roles` for AlphaStar's
(Vinyals et al. 2019).

A player holds no weights: ``checkpoint_path`` names where its weights are (or will be) saved,
and the training loop moves weights between bindings and files ([`SnapshotStore`][lightmarl.league.snapshots.SnapshotStore]).
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from lightmarl.league.jobs import Job
from lightmarl.league.payoff import BattleSharedPayoff, SharedPayoff, SoloSharedPayoff
from lightmarl.league.pfsp import PFSPWeighting, pfsp


class Player:
    """A member of the league.

    Args:
        player_id: unique name in the league (and, once the league runs in ``lightmarl fit``,
            the binding id that plays it).
        checkpoint_path: file that holds (or will hold) this player's policy weights.
        total_agent_step: agent steps trained so far (for a snapshot: its parent's at snapshot time).

    The shared payoff is attached when the player joins a league (``payoff.add_player``).
    """

    def __init__(self, player_id: str, checkpoint_path: str = "", total_agent_step: int = 0) -> None:
        if not isinstance(player_id, str) or not player_id:
            raise ValueError(f"player_id must be a non-empty string, got {player_id!r}")
        self._player_id = player_id
        self._checkpoint_path = checkpoint_path
        self._total_agent_step = int(total_agent_step)
        self._payoff: SharedPayoff | None = None

    @property
    def player_id(self) -> str:
        return self._player_id

    @property
    def checkpoint_path(self) -> str:
        return self._checkpoint_path

    @property
    def total_agent_step(self) -> int:
        return self._total_agent_step

    @total_agent_step.setter
    def total_agent_step(self, step: int) -> None:
        self._total_agent_step = int(step)

    @property
    def payoff(self) -> SharedPayoff:
        if self._payoff is None:
            raise RuntimeError(f"player {self._player_id!r} has not joined a league (no payoff attached)")
        return self._payoff

    @payoff.setter
    def payoff(self, payoff: SharedPayoff) -> None:
        self._payoff = payoff

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._player_id!r}, step={self._total_agent_step})"


class HistoricalPlayer(Player):
    """A frozen player: a snapshot of an active player, or a pretrained model added at league start.

    Args:
        player_id: see [`Player`][lightmarl.league.player.Player].
        checkpoint_path: the snapshot file; never rewritten.
        total_agent_step: the parent's agent steps when the snapshot was taken.
        parent_id: the active player it was snapshotted from ("" when it has none).
    """

    def __init__(
        self,
        player_id: str,
        checkpoint_path: str = "",
        total_agent_step: int = 0,
        parent_id: str = "",
    ) -> None:
        super().__init__(player_id, checkpoint_path, total_agent_step)
        self._parent_id = parent_id

    @property
    def parent_id(self) -> str:
        return self._parent_id

    def as_dict(self) -> dict[str, Any]:
        """Plain-Python form (saved in the league state)."""
        return {
            "player_id": self.player_id,
            "checkpoint_path": self.checkpoint_path,
            "total_agent_step": self.total_agent_step,
            "parent_id": self.parent_id,
        }


@dataclass
class ActivePlayerSettings:
    """When an active player is snapshotted.

    Attributes:
        one_phase_step: agent steps of training between two snapshots (at least).
    """

    one_phase_step: int = 100_000

    def __post_init__(self) -> None:
        if self.one_phase_step < 1:
            raise ValueError(f"one_phase_step must be >= 1, got {self.one_phase_step}")


class ActivePlayer(Player):
    """A player that learns, gets jobs, and is periodically snapshotted and mutated.

    Subclasses set ``settings_class`` to their settings dataclass and implement
    `_get_job_opponents`. The ``__init__`` keywords are the config schema: a role can be
    named by ``class_path`` in YAML with its ``settings`` as ``init_args``.

    Args:
        player_id: see [`Player`][lightmarl.league.player.Player].
        checkpoint_path: see [`Player`][lightmarl.league.player.Player]; snapshots are saved beside it.
        total_agent_step: see [`Player`][lightmarl.league.player.Player].
        settings: the role's settings (``settings_class``); default: its defaults.
    """

    settings_class: ClassVar[type[ActivePlayerSettings]] = ActivePlayerSettings

    def __init__(
        self,
        player_id: str,
        checkpoint_path: str = "",
        total_agent_step: int = 0,
        settings: ActivePlayerSettings | None = None,
    ) -> None:
        super().__init__(player_id, checkpoint_path or f"{player_id}.pt", total_agent_step)
        settings = self.settings_class() if settings is None else settings
        if not isinstance(settings, self.settings_class):
            raise TypeError(
                f"{type(self).__name__} {player_id!r} needs settings of type {self.settings_class.__name__}, "
                f"got {type(settings).__name__}"
            )
        self.settings = settings
        self.last_enough_step = 0
        self.snapshot_count = 0

    @classmethod
    def make_settings(cls, settings: ActivePlayerSettings | Mapping[str, Any] | None) -> ActivePlayerSettings:
        """Build ``settings_class`` from a recipe mapping."""
        if settings is None or isinstance(settings, ActivePlayerSettings):
            return settings if settings is not None else cls.settings_class()
        values = dict(settings)
        known = {f.name for f in fields(cls.settings_class)}
        unknown = sorted(set(values) - known)
        if unknown:
            # Before the constructor: its TypeError names one key and not what would be valid.
            raise TypeError(f"settings of {cls.__name__}: unknown keys {unknown}; valid keys are {sorted(known)}")
        try:
            return cls.settings_class(**values)
        except TypeError as error:
            raise TypeError(f"settings of {cls.__name__}: {error}") from error

    @property
    def initial_checkpoint_path(self) -> str:
        """Where the player's initial weights are kept for roles that reset ([`mutate`][lightmarl.league.player.ActivePlayer.mutate])."""
        stem, ext = os.path.splitext(self.checkpoint_path)
        return f"{stem}_init{ext or '.pt'}"

    def is_trained_enough(self) -> bool:
        """Whether at least ``one_phase_step`` agent steps passed since the last snapshot."""
        return self.total_agent_step - self.last_enough_step >= self.settings.one_phase_step

    def snapshot(self) -> HistoricalPlayer:
        """Freeze the player as it is now; the caller saves its weights to the snapshot's ``checkpoint_path``."""
        step = self.total_agent_step
        stem, ext = os.path.splitext(self.checkpoint_path)
        self.last_enough_step = step
        self.snapshot_count += 1
        return HistoricalPlayer(
            f"{self.player_id}_{step}", f"{stem}_{step}{ext or '.pt'}", step, parent_id=self.player_id
        )

    def mutate(self, rng: random.Random) -> str | None:
        """Change the player after a snapshot; returns a checkpoint path to load into it, or None to go on.

        Args:
            rng: the league's random generator (every random choice comes from it).
        """
        return None

    def get_job(self, rng: random.Random) -> Job:
        """The next job: its opponents, chosen by the role, and the rule that chose them."""
        opponents, branch = self._get_job_opponents(rng)
        return Job(player_id=self.player_id, opponent_ids=tuple(p.player_id for p in opponents), branch=branch)

    def _get_job_opponents(self, rng: random.Random) -> tuple[list[Player], str]:
        """The opponents of the next job and the name of the rule that chose them."""
        raise NotImplementedError(f"{type(self).__name__} must implement _get_job_opponents")

    def state_dict(self) -> dict[str, Any]:
        """The player's counters (its role and settings come from the config)."""
        return {
            "total_agent_step": self.total_agent_step,
            "last_enough_step": self.last_enough_step,
            "snapshot_count": self.snapshot_count,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.total_agent_step = int(state["total_agent_step"])
        self.last_enough_step = int(state["last_enough_step"])
        self.snapshot_count = int(state["snapshot_count"])

    # Helpers for roles: the league's players as the shared payoff sees them.

    def _historical(self, parents: Sequence[str] | None = None) -> list[HistoricalPlayer]:
        """Historical players, oldest first; only those snapshotted from ``parents`` when given."""
        return [
            p
            for p in self.payoff.players
            if isinstance(p, HistoricalPlayer) and (parents is None or p.parent_id in parents)
        ]

    def _pick(self, rng: random.Random, candidates: Sequence[Player], weighting: PFSPWeighting | None) -> Player:
        """One of ``candidates``: uniformly, or by PFSP on this player's win rates against them."""
        if weighting is None:
            return candidates[rng.randrange(len(candidates))]
        probabilities = pfsp(self._win_rates(candidates), weighting)
        return candidates[rng.choices(range(len(candidates)), weights=probabilities.tolist())[0]]

    def _win_rates(self, opponents: Sequence[Player]) -> list[float]:
        """This player's win rates against ``opponents`` from the shared battle payoff."""
        payoff = self.payoff
        if not isinstance(payoff, BattleSharedPayoff):
            raise TypeError(f"{type(self).__name__} needs a battle payoff, got {type(payoff).__name__}")
        return payoff.win_rates(self, opponents).tolist()


class SoloActivePlayer(ActivePlayer):
    """An active player of a solo environment (no opponent): its jobs name no opponent."""

    def _get_job_opponents(self, rng: random.Random) -> tuple[list[Player], str]:
        return [], "solo"


@dataclass
class PopulationBasedSettings(ActivePlayerSettings):
    """Settings of [`PopulationBasedPlayer`][lightmarl.league.player.PopulationBasedPlayer].

    Attributes:
        bottom_fraction: a player whose mean recent result ranks in this bottom share of the
            solo players (at least the last one) copies the best player at its next snapshot.
        min_results: recent results every compared player needs before any copy happens.
    """

    bottom_fraction: float = 0.25
    min_results: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_probability("bottom_fraction", self.bottom_fraction)
        if self.min_results < 1:
            raise ValueError(f"min_results must be >= 1, got {self.min_results}")


class PopulationBasedPlayer(SoloActivePlayer):
    """A solo player that copies the best player's weights when it falls behind (PBT's exploit step).

    Jaderberg et al. 2017, "Population Based Training of Neural Networks": at each of its
    snapshots the player compares the mean of every solo player's recent results (episode
    returns, from the solo payoff); if it ranks in the bottom ``bottom_fraction``, [`mutate`][lightmarl.league.player.ActivePlayer.mutate]
    returns the newest snapshot of the best player, which the training loop loads into this
    player's binding (its optimizer state restarts; its own algorithm and hyper-parameters stay,
    so the copy goes on learning its own way).
    """

    settings_class = PopulationBasedSettings
    settings: PopulationBasedSettings

    def __init__(self, player_id: str, settings: PopulationBasedSettings | None = None, **kwargs: Any) -> None:
        """Args as [`ActivePlayer`][lightmarl.league.player.ActivePlayer]; ``settings`` typed here so that ``class_path`` configs can name its fields."""
        super().__init__(player_id, settings=settings, **kwargs)

    def mutate(self, rng: random.Random) -> str | None:
        payoff = self.payoff
        if not isinstance(payoff, SoloSharedPayoff):
            raise TypeError(f"{type(self).__name__} needs a solo payoff, got {type(payoff).__name__}")
        players = [p for p in payoff.players if isinstance(p, SoloActivePlayer)]
        results = {p.player_id: [float(r) for r in payoff.results(p.player_id)] for p in players}
        if len(players) < 2 or any(len(r) < self.settings.min_results for r in results.values()):
            return None
        ranked = sorted(players, key=lambda p: float(np.mean(results[p.player_id])))  # worst first
        bottom = max(1, int(len(ranked) * self.settings.bottom_fraction))
        best = ranked[-1]
        if self not in ranked[:bottom] or best is self:
            return None
        snapshots = [h for h in payoff.players if isinstance(h, HistoricalPlayer) and h.parent_id == best.player_id]
        return max(snapshots, key=lambda h: h.total_agent_step).checkpoint_path if snapshots else None


class BattleActivePlayer(ActivePlayer):
    """An active player of a two-sided game: every job names one opponent.

    Subclasses implement `_get_job_opponents` returning ``([opponent], branch)``.
    """


@dataclass
class SelfPlaySettings(ActivePlayerSettings):
    """Settings of [`SelfPlayPlayer`][lightmarl.league.player.SelfPlayPlayer].

    Attributes:
        pfsp_prob: probability of playing a PFSP-chosen snapshot of itself instead of itself.
        pfsp_weighting: PFSP weighting over its snapshots.
    """

    pfsp_prob: float = 0.5
    pfsp_weighting: PFSPWeighting = "squared"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_probability("pfsp_prob", self.pfsp_prob)


class SelfPlayPlayer(BattleActivePlayer):
    """Self-play plus prioritized fictitious self-play against its own snapshots."""

    settings_class = SelfPlaySettings
    settings: SelfPlaySettings

    def __init__(self, player_id: str, settings: SelfPlaySettings | None = None, **kwargs: Any) -> None:
        """Args as [`ActivePlayer`][lightmarl.league.player.ActivePlayer]; ``settings`` typed here so that ``class_path`` configs can name its fields."""
        super().__init__(player_id, settings=settings, **kwargs)

    def is_trained_enough(self) -> bool:
        """As every active player, except that with ``pfsp_prob: 0`` and no other active player in the
        league no snapshot is due: nothing would ever play it (naive self-play writes none)."""
        if self.settings.pfsp_prob == 0 and not any(
            isinstance(p, ActivePlayer) and p is not self for p in self.payoff.players
        ):
            return False
        return super().is_trained_enough()

    def _get_job_opponents(self, rng: random.Random) -> tuple[list[Player], str]:
        own = self._historical([self.player_id])
        if own and rng.random() < self.settings.pfsp_prob:
            return [self._pick(rng, own, self.settings.pfsp_weighting)], "pfsp"
        return [self], "self_play"


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
