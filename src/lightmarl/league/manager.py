"""The league manager: builds the players, hands out jobs, records results, snapshots and mutates.

A training loop drives it (`LeagueManager.get_job` or `LeagueManager.step`,
`LeagueManager.finish_job`, `LeagueManager.update_active_player`,
`LeagueManager.snapshot_due_players`), deterministically given the seed. Every method is
thread-safe.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, cast

from lightmarl._imports import import_object
from lightmarl.league.jobs import Job, LaunchCount
from lightmarl.league.payoff import BattleSharedPayoff, SoloSharedPayoff
from lightmarl.league.player import ActivePlayer, BattleActivePlayer, HistoricalPlayer, Player, SoloActivePlayer
from lightmarl.league.roles import MainExploiter, MainPlayer
from lightmarl.ratings import EloRatings, GameResult, OpenSkillModelName, SkillRatings

log = logging.getLogger(__name__)

STATE_VERSION = 1


@dataclass
class LeagueRole:
    """One active player: its role and the trainable binding that acts and learns for it.

    Attributes:
        class_path: import path of an `ActivePlayer` subclass (``MainPlayer``,
            ``MainExploiter``, ``LeagueExploiter``, ``SelfPlayPlayer``, ..., or a bare name
            exported by ``lightmarl.league``).
        binding: id of the binding that plays the player (in ``lightmarl fit``: a trainable
            binding of ``policy_bindings``, whose algorithm and optimizer are the player's); the
            player's id is ``<binding>_default_0``.
        settings: the role's settings (fields of its settings dataclass, e.g. ``one_phase_step``).
    """

    class_path: str = "lightmarl.league.MainPlayer"
    binding: str = "main"
    # A bare dict: jsonargparse leaves its values as written, whereas under dict[str, Any] it would build
    # (call) a {class_path, init_args} value such as settings.meta_solver before the role checks its type.
    settings: dict = field(default_factory=dict)  # type: ignore[type-arg]


def player_id_of(binding: str) -> str:
    """The league id of the active player that ``binding`` plays.

    The ``_default_0`` suffix is the form league ids have always had (once a category and an index
    per role), kept so that metric names, snapshot files and checkpoints stay the same.
    """
    return f"{binding}_default_0"


@dataclass
class PretrainedSpec:
    """A pretrained model that joins the league as a historical player from the start.

    Attributes:
        checkpoint_path: its weights file.
        player_id: its id; default ``pretrained_default_{k}`` (``k``: its index in ``pretrained``).
        parent_id: the active player it counts as a snapshot of; default the first
            `MainPlayer` (else the first active player), so lineage-based branches see it.
    """

    checkpoint_path: str
    player_id: str | None = None
    parent_id: str | None = None


@dataclass
class PayoffSettings:
    """The shared payoff.

    Attributes:
        kind: ``"battle"`` (two-sided games, win rates) or ``"solo"`` (no opponent).
        decay: battle: factor applied to a pair's counts before each new game.
        min_games: battle: (decayed) games below which a win rate reads 0.5.
        buffer_size: solo: recent results kept per player.
    """

    kind: Literal["battle", "solo"] = "battle"
    decay: float = 0.99
    min_games: float = 8.0
    buffer_size: int = 100


@dataclass
class RatingSettings:
    """Ratings kept from battle results (`lightmarl.ratings`).

    Attributes:
        elo_initial: Elo of a new player.
        elo_k: Elo K-factor.
        openskill_model: openskill model of the ``(mu, sigma)`` ratings.
    """

    elo_initial: float = 1000.0
    elo_k: float = 32.0
    openskill_model: OpenSkillModelName = "PlackettLuce"


@dataclass(frozen=True)
class SnapshotEvent:
    """An active player was snapshotted (and perhaps mutated).

    The training loop saves the player's current weights to ``checkpoint_path``, then, when
    ``reset_to`` is set, loads the weights saved there into the player's live binding.
    """

    player_id: str
    historical_id: str
    checkpoint_path: str
    total_agent_step: int
    reset_to: str | None = None


class LeagueManager:
    """Holds the players of a league and the payoff between them, and assigns jobs (AlphaStar, Vinyals et al. 2019).

    Args:
        roles: the active players, one per role, each with a binding of its own (default: one
            `MainPlayer` played by binding ``main``); mappings are read as `LeagueRole`.
        pretrained: pretrained models that start in the league as historical players.
        payoff: payoff settings.
        ratings: rating settings.
        max_active_player_job: jobs one active player may run at once.
        snapshot_dir: folder of the players' checkpoint and snapshot files.
        seed: seed of the league's random generator (every random choice comes from it).
        save_checkpoint_fn: called as ``fn(player, snapshot)`` to save a snapshot's weights.
        load_checkpoint_fn: called as ``fn(player, path)`` to load weights into a mutated player.
    """

    def __init__(
        self,
        roles: Sequence[LeagueRole | Mapping[str, Any]] | None = None,
        pretrained: Sequence[PretrainedSpec | Mapping[str, Any]] = (),
        payoff: PayoffSettings | Mapping[str, Any] | None = None,
        ratings: RatingSettings | Mapping[str, Any] | None = None,
        max_active_player_job: int = 1,
        snapshot_dir: str = "league",
        seed: int = 0,
        save_checkpoint_fn: Callable[[ActivePlayer, HistoricalPlayer], None] | None = None,
        load_checkpoint_fn: Callable[[ActivePlayer, str], None] | None = None,
    ) -> None:
        self.payoff_settings = _as_settings(PayoffSettings, payoff)
        self.rating_settings = _as_settings(RatingSettings, ratings)
        self.max_active_player_job = max_active_player_job
        self.snapshot_dir = snapshot_dir
        self.seed = seed
        self.save_checkpoint_fn = save_checkpoint_fn
        self.load_checkpoint_fn = load_checkpoint_fn

        # Jobs may be handed out and finished from several threads (a worker thread per game, as
        # DI-engine's league launches jobs and snapshots from threads of its own); that use is
        # documented and tested. This lock covers the manager's counters, its RNG and the payoff
        # it owns (which has no lock of its own); reentrant because step() calls get_job under it.
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self.payoff = _make_payoff(self.payoff_settings)
        self.elo = EloRatings(self.rating_settings.elo_initial, self.rating_settings.elo_k)
        self.skill = SkillRatings(self.rating_settings.openskill_model)
        self.active_players: list[ActivePlayer] = []
        self.historical_players: list[HistoricalPlayer] = []
        self._launch_count: dict[str, LaunchCount] = {}
        self._running: dict[int, Job] = {}
        self._next_job_id = 0

        specs = [_as_role(r, i) for i, r in enumerate([LeagueRole()] if roles is None else roles)]
        bindings = [role.binding for role in specs]
        if len(set(bindings)) != len(bindings):
            raise ValueError(f"league roles: each role needs a binding of its own, got {bindings}")
        for role in specs:
            self._add_active(role)
        for k, item in enumerate(pretrained):
            self._add_pretrained(item if isinstance(item, PretrainedSpec) else PretrainedSpec(**item), k)
        self._validate()

    # Construction

    def _add_active(self, role: LeagueRole) -> None:
        cls = role_class(role.class_path)
        player_id = player_id_of(role.binding)
        path = os.path.join(self.snapshot_dir, f"{player_id}.pt")
        player = cls(player_id=player_id, checkpoint_path=path, settings=cls.make_settings(role.settings))
        self.payoff.add_player(player)
        self.active_players.append(player)
        self._launch_count[player_id] = LaunchCount(self.max_active_player_job)
        self._register_rating(player_id, None)

    def _add_pretrained(self, spec: PretrainedSpec, k: int) -> None:
        mains = [p for p in self.active_players if isinstance(p, MainPlayer)]
        default_parent = (mains or self.active_players)[0].player_id if self.active_players else ""
        player = HistoricalPlayer(
            spec.player_id or f"pretrained_default_{k}",
            spec.checkpoint_path,
            0,
            parent_id=default_parent if spec.parent_id is None else spec.parent_id,
        )
        self._add_historical(player)

    def _add_historical(self, player: HistoricalPlayer) -> None:
        self.payoff.add_player(player)
        self.historical_players.append(player)
        parent_rating = (self.elo[player.parent_id], self.skill[player.parent_id]) if player.parent_id else None
        self._register_rating(player.player_id, parent_rating)

    def _register_rating(self, player_id: str, rating: tuple[float, tuple[float, float]] | None) -> None:
        self.elo.add(player_id, None if rating is None else rating[0])
        self.skill.add(player_id, None if rating is None else rating[1])

    def _validate(self) -> None:
        if not self.active_players:
            raise ValueError("the league has no active player: give at least one role")
        kind = self.payoff_settings.kind
        needed = BattleActivePlayer if kind == "battle" else SoloActivePlayer
        for player in self.active_players:
            if not isinstance(player, needed):
                raise ValueError(
                    f"player {player.player_id!r} ({type(player).__name__}) cannot play in a {kind!r} league: "
                    f"its role must subclass {needed.__name__}"
                )
        if any(isinstance(p, MainExploiter) for p in self.active_players) and not any(
            isinstance(p, MainPlayer) for p in self.active_players
        ):
            raise ValueError("roles include a MainExploiter but no MainPlayer for it to exploit")

    # Queries

    @property
    def players(self) -> list[Player]:
        """Every player, active ones first, then historical ones oldest first."""
        return cast(list[Player], self.payoff.players)

    def get_player(self, player_id: str) -> Player:
        for player in self.players:
            if player.player_id == player_id:
                return player
        raise ValueError(f"no player {player_id!r} in the league")

    def _active(self, player_id: str) -> ActivePlayer:
        player = self.get_player(player_id)
        if not isinstance(player, ActivePlayer):
            raise ValueError(f"player {player_id!r} is historical; only active players get jobs and steps")
        return player

    @property
    def running_jobs(self) -> list[Job]:
        """Jobs handed out and not yet finished, oldest first."""
        with self._lock:
            return list(self._running.values())

    # Jobs

    def get_job(self, player_id: str) -> Job | None:
        """A new job for ``player_id``, or None when it already runs ``max_active_player_job`` jobs."""
        with self._lock:
            player = self._active(player_id)
            if not self._launch_count[player_id].acquire():
                return None
            job = player.get_job(self._rng)
            job = replace(job, job_id=self._next_job_id)
            self._next_job_id += 1
            self._running[job.job_id] = job
            return job

    def step(self) -> list[Job]:
        """Fill every free job slot of every active player (in league order); returns the new jobs."""
        jobs: list[Job] = []
        with self._lock:
            for player in self.active_players:
                while (job := self.get_job(player.player_id)) is not None:
                    jobs.append(job)
        return jobs

    def finish_job(self, job: Job | int, results: Sequence[GameResult | str | Any] | GameResult = ()) -> None:
        """Record a finished job's results and free its slot.

        Args:
            job: the job or its id.
            results: battle: one ``"win"``/``"draw"``/``"loss"`` per game, from the launching
                player's side, against each of its opponents; solo: any per-episode values
                (e.g. returns), kept in the solo payoff.
        """
        job_id = job if isinstance(job, int) else job.job_id
        results = [results] if isinstance(results, str) else list(results)
        with self._lock:
            if job_id not in self._running:
                raise ValueError(f"job {job_id} is not running (finished twice, or never handed out)")
            done = self._running[job_id]
            if isinstance(self.payoff, BattleSharedPayoff):
                for opponent in done.opponent_ids:
                    self.payoff.update(done.player_id, opponent, results)
                    for result in results:
                        self.elo.update(done.player_id, opponent, result)
                        self.skill.update_1v1(done.player_id, opponent, result)
            else:
                self.payoff.update(done.player_id, results)
            del self._running[job_id]
            self._launch_count[done.player_id].release()

    def cancel_job(self, job: Job | int) -> None:
        """Free a job's slot without recording any result (e.g. its env copies were torn down)."""
        job_id = job if isinstance(job, int) else job.job_id
        with self._lock:
            done = self._running.pop(job_id, None)
            if done is None:
                raise ValueError(f"job {job_id} is not running")
            self._launch_count[done.player_id].release()

    # Training progress, snapshots, mutation

    def update_active_player(self, player_id: str, agent_steps: int) -> None:
        """Add ``agent_steps`` trained agent steps to ``player_id``'s count."""
        if agent_steps < 0:
            raise ValueError(f"agent_steps must be >= 0, got {agent_steps}")
        with self._lock:
            player = self._active(player_id)
            player.total_agent_step += agent_steps

    def snapshot_due_players(self) -> list[SnapshotEvent]:
        """Snapshot every active player that is trained enough, then mutate it.

        Returns one event per snapshot, in league order; ``save_checkpoint_fn`` and
        ``load_checkpoint_fn`` (when given) have already been called for each.
        """
        events: list[SnapshotEvent] = []
        with self._lock:
            for player in self.active_players:
                if not player.is_trained_enough():
                    continue
                snapshot = player.snapshot()
                if self.save_checkpoint_fn is not None:
                    self.save_checkpoint_fn(player, snapshot)
                self._add_historical(snapshot)
                reset_to = player.mutate(self._rng)
                if reset_to is not None:
                    self._register_rating(player.player_id, None)
                    if self.load_checkpoint_fn is not None:
                        self.load_checkpoint_fn(player, reset_to)
                events.append(
                    SnapshotEvent(
                        player.player_id,
                        snapshot.player_id,
                        snapshot.checkpoint_path,
                        snapshot.total_agent_step,
                        reset_to,
                    )
                )
                log.info("league: snapshot %s of %s (reset to %s)", snapshot.player_id, player.player_id, reset_to)
        return events

    # Checkpointing

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: counters, snapshots, payoff, ratings, running jobs, RNG state.

        Plain Python containers only, so it loads with ``torch.load(weights_only=True)``. Snapshot
        paths inside ``snapshot_dir`` are kept relative to it, so a run directory that moved (or a
        resume from another working directory) still finds its snapshots.
        """
        with self._lock:
            version, internal, gauss = self._rng.getstate()
            historical = [
                {**p.as_dict(), "checkpoint_path": self.state_path(p.checkpoint_path)} for p in self.historical_players
            ]
            return {
                "version": STATE_VERSION,
                "rng": [version, list(internal), gauss],
                "next_job_id": self._next_job_id,
                "active": {p.player_id: p.state_dict() for p in self.active_players},
                "historical": historical,
                "payoff": self.payoff.state_dict(),
                "elo": self.elo.state_dict(),
                "skill": self.skill.state_dict(),
                "running_jobs": [job.as_dict() for job in self._running.values()],
            }

    def state_path(self, path: str) -> str:
        """``path`` as the league state keeps it: relative to ``snapshot_dir`` when it lies inside it (a run
        directory moved as a whole still finds its snapshots), absolute otherwise."""
        folder = os.path.abspath(self.snapshot_dir)
        absolute = os.path.abspath(path)
        return os.path.relpath(absolute, folder) if os.path.commonpath([folder, absolute]) == folder else absolute

    def restored_path(self, path: str) -> str:
        """A path `state_path` kept, as this manager finds it."""
        return path if os.path.isabs(path) else os.path.join(self.snapshot_dir, path)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` into a manager built from the same config.

        Raises:
            ValueError: the state is of another version, another config, or damaged.
        """
        try:
            self._load_state_dict(state)
        except (KeyError, TypeError, IndexError, AttributeError) as err:
            raise ValueError(f"league state: damaged or of another lightmarl ({type(err).__name__}: {err})") from None

    def _load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"league state version {state.get('version')!r} is not {STATE_VERSION}")
        with self._lock:
            ids = [p.player_id for p in self.active_players]
            if sorted(state["active"]) != sorted(ids):
                raise ValueError(
                    f"league state has active players {sorted(state['active'])}, this config builds {sorted(ids)}"
                )
            for player in self.active_players:
                player.load_state_dict(state["active"][player.player_id])
            self.historical_players = [
                HistoricalPlayer(
                    item["player_id"],
                    self.restored_path(item["checkpoint_path"]),
                    item["total_agent_step"],
                    parent_id=item["parent_id"],
                )  # by name: states saved while players had a category still load
                for item in state["historical"]
            ]
            self.payoff.set_players([*self.active_players, *self.historical_players])
            self.payoff.load_state_dict(state["payoff"])
            self.elo.load_state_dict(state["elo"])
            self.skill.load_state_dict(state["skill"])
            self._running = {}
            for count in self._launch_count.values():
                count.used = 0
            for item in state["running_jobs"]:
                job = Job.from_dict(item)
                self._running[job.job_id] = job
                self._launch_count[job.player_id].used += 1
            self._next_job_id = int(state["next_job_id"])
            version, internal, gauss = state["rng"]
            self._rng.setstate((version, tuple(internal), gauss))


def _as_role(role: LeagueRole | Mapping[str, Any], index: int) -> LeagueRole:
    if isinstance(role, LeagueRole):
        return role
    known = {f.name for f in fields(LeagueRole)}
    unknown = sorted(set(role) - known)
    if unknown:
        raise ValueError(f"league roles[{index}]: unknown keys {unknown}; valid keys are {sorted(known)}")
    return LeagueRole(**role)


def _as_settings(cls: Any, value: Any) -> Any:
    if value is None:
        return cls()
    return value if isinstance(value, cls) else cls(**value)


def _make_payoff(settings: PayoffSettings) -> BattleSharedPayoff | SoloSharedPayoff:
    if settings.kind == "battle":
        return BattleSharedPayoff(settings.decay, settings.min_games)
    if settings.kind == "solo":
        return SoloSharedPayoff(settings.buffer_size)
    raise ValueError(f"payoff kind must be 'battle' or 'solo', got {settings.kind!r}")


def role_class(class_path: str) -> type[ActivePlayer]:
    """The `ActivePlayer` subclass a role's ``class_path`` names (a bare name: one of ``lightmarl.league``).

    Raises:
        ValueError: naming the path when it does not import or is not an ``ActivePlayer`` subclass.
    """
    path = class_path if "." in class_path else f"lightmarl.league.{class_path}"
    cls = import_object(path, field="league role class_path")
    if not (isinstance(cls, type) and issubclass(cls, ActivePlayer)):
        raise ValueError(f"league role class_path {class_path!r} is not an ActivePlayer subclass")
    return cls
