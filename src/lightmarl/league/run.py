"""A league at run time in one training process: seats, opponent slots, seatings, the exchange between processes.

[`LeagueRun`][lightmarl.league.run.LeagueRun] is everything the league does while a population trains, without
Lightning: the training loop (``lightmarl.training.league.LeagueTraining``) subclasses it and supplies the
weights of bindings, an optimizer reset and the exchange between processes
([`Exchange`][lightmarl.league.run.Exchange]). It

- at construction adds ``max_resident`` frozen *opponent slot* bindings (copies of the first
  player's binding spec), so their policies exist from the start; historical players act through
  them with weights loaded from snapshot files;
- during a rollout (the collector's step hook) adds up each env copy's return per seat and,
  where a copy's episode ended, keeps the seat returns and installs the copy's on-deck seating
  (`Matchmaker`) before that copy acts again;
- between iterations records the rollout's finished episodes in the order they ended, counts
  each player's trained agent steps, snapshots and resets players, writes the exact meta-game
  rows of new snapshots where an evaluator is given (`meta_payoffs`), draws the next on-deck
  seatings and returns ``league/<player>/...`` metrics;
- keeps its state (league, seatings, running seat returns) for the checkpoint.

Under DDP the league lives on rank 0: once per rollout, each rank's finished episodes and
agent steps are gathered (one ``all_gather``), rank 0 decides, and the on-deck seatings,
snapshot events and metrics are broadcast (one broadcast), so 1 and N processes follow one
protocol and record the same games in the same order. Snapshot files are read by every rank:
the snapshot directory must be visible to all of them (one machine, or a shared filesystem).
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import numpy as np
import torch

from lightmarl import keys
from lightmarl.envs.spec import EnvSpec
from lightmarl.errors import ConfigError
from lightmarl.league.manager import (
    LeagueManager,
    LeagueRole,
    PayoffSettings,
    PretrainedSpec,
    RatingSettings,
    role_class,
)
from lightmarl.league.matchmaking import Matchmaker, Seating, outcome_from_returns
from lightmarl.league.meta import MetaPayoffs, MetaStrategyPlayer, shown_mixture
from lightmarl.league.payoff import BattleSharedPayoff
from lightmarl.league.player import ActivePlayer, HistoricalPlayer
from lightmarl.league.snapshots import SnapshotStore
from lightmarl.population import PolicyBindingConfig
from lightmarl.population.bindings import as_binding

if TYPE_CHECKING:
    from lightmarl.data.collector import RolloutCollector
    from lightmarl.data.rollout import RolloutStep
    from lightmarl.population import BindingTable

T = TypeVar("T")

SLOT_PREFIX = "league_opponent_"


class Exchange(Protocol):
    """The collectives the league needs between training processes (every rank calls each, in the same order)."""

    def rank(self) -> int:
        """This process's rank (0 in one process)."""

    def world_size(self) -> int:
        """The number of training processes."""

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor``, stacked in rank order on the CPU: ``[ranks, *tensor.shape]``."""

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value`` on every rank."""


class OneProcess:
    """The [`Exchange`][lightmarl.league.run.Exchange] of a league in one process: nothing travels."""

    def rank(self) -> int:
        return 0

    def world_size(self) -> int:
        return 1

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().unsqueeze(0).cpu()

    def broadcast(self, value: T) -> T:
        return value


@dataclass
class LeagueSettings:
    """A league of players over a two-seat game (AlphaStar), or of solo players (``payoff.kind: solo``; see ``docs/league.md``).

    Attributes:
        roles: the active players, one per entry, each bound to its own trainable binding.
        seats: the env's agents of each of the two seats (e.g. ``[[player_0], [player_1]]``);
            default: the first half of the agents and the second half. Every agent sits in one
            seat; all of them belong to one agent group. Each env copy alternates the player's
            seat from one job to the next; results are counted per seat. A solo league has one
            seat of every agent (the default): the player controls the whole team.
        max_resident: opponent slots: historical players whose weights are in memory at once
            (frozen bindings ``league_opponent_<k>``, swapped in from snapshot files). A league
            of hundreds of snapshots holds this many. A solo league has no opponent slots.
        snapshot_dir: folder of the snapshot files (default: ``<trainer.default_root_dir>/league``).
        outcome: import path of ``fn(own_return, opponent_return) -> "win" | "draw" | "loss"``,
            the result of an episode from the player's side; the default compares the seats'
            episode returns in the env's own rewards.
        payoff: the shared payoff (decay, minimum games).
        ratings: Elo / openskill settings.
        pretrained: pretrained models that join as historical players from the start (weights
            files of the players' policy, e.g. saved snapshots of another run).
        seed: seed of the league's choices (default: the run's ``seed_everything``).
        max_redraws: new draws for a job whose snapshot finds every opponent slot busy; after
            them the env copy plays one unrecorded episode against the player itself.
        heatmap: write ``<log_dir>/league/payoff_epoch<n>.png`` at each epoch end.
        meta_game: ``games``: a meta-strategy player's meta-game holds the league's win rates
            (`lightmarl.league.meta`); ``exact``: each new snapshot's row holds its exact expected
            returns against the earlier snapshots, written as the snapshot is taken (OpenSpiel
            two-player zero-sum games only: in poker a win rate ignores the chips won, and the
            Nash meta-solver needs the chips).
    """

    roles: list[LeagueRole] = field(default_factory=lambda: [LeagueRole()])
    seats: list[list[str]] | None = None
    max_resident: int = 4
    snapshot_dir: str | None = None
    outcome: str = f"{outcome_from_returns.__module__}.{outcome_from_returns.__name__}"
    payoff: PayoffSettings = field(default_factory=PayoffSettings)
    ratings: RatingSettings = field(default_factory=RatingSettings)
    pretrained: list[PretrainedSpec] = field(default_factory=list)
    seed: int | None = None
    max_redraws: int = 8
    heatmap: bool = True
    meta_game: Literal["games", "exact"] = "games"


class LeagueRun(ABC):
    """The league's run-time side in one process; the training loop supplies weights, optimizers and the exchange.

    Args:
        config: the recipe's ``league:`` section.
        env_spec: the env the league plays.
        policy_bindings: the recipe's bindings; the players' bindings must be trainable ones
            of the same policy class and kwargs (snapshots load into every opponent slot).
    """

    def __init__(
        self, config: LeagueSettings, env_spec: EnvSpec, policy_bindings: list[PolicyBindingConfig] | None
    ) -> None:
        self.config = config
        if not config.roles:
            raise ValueError("league.roles: give at least one role")
        if config.max_resident < 1:
            raise ValueError(f"league.max_resident: expected an integer >= 1, got {config.max_resident!r}")
        if config.meta_game not in ("games", "exact"):
            raise ValueError(f"league.meta_game: expected 'games' or 'exact', got {config.meta_game!r}")
        #: a solo league (``payoff.kind: solo``): players without opponents, results are episode returns.
        self.solo = config.payoff.kind == "solo"
        bindings = [as_binding(b) for b in policy_bindings or []]
        self.by_id = {b.id: b for b in bindings}
        self.player_binding_ids = [role.binding for role in config.roles]
        for i, role in enumerate(config.roles):
            try:  # the role's class and settings, before any env exists (the manager is built in setup)
                role_class(role.class_path).make_settings(dict(role.settings))
            except (TypeError, ValueError) as err:
                raise ValueError(f"league.roles[{i}] (binding {role.binding!r}): {err}") from None
            binding = self.by_id.get(role.binding)
            if binding is None or not binding.trainable:
                raise ValueError(
                    f"league.roles: binding {role.binding!r} is not a trainable binding of policy_bindings "
                    f"(trainable: {[b.id for b in bindings if b.trainable]})"
                )
        if len(set(self.player_binding_ids)) != len(self.player_binding_ids):
            raise ValueError(f"league.roles: each role needs a binding of its own, got {self.player_binding_ids}")
        template = self.by_id[self.player_binding_ids[0]]
        for binding_id in self.player_binding_ids[1:]:
            other = self.by_id[binding_id]
            if (other.class_path, other.policy_kwargs) != (template.class_path, template.policy_kwargs):
                raise ValueError(
                    f"league.roles: binding {binding_id!r} differs from {template.id!r} in class_path or "
                    "policy_kwargs; every player's snapshots load into the same opponent slots"
                )
        self.seats = check_seats(config.seats, env_spec, self.solo)
        self.group = env_spec.group_of(self.seats[0][0]).name
        agents = env_spec.groups[self.group].agents
        # Seat of each agent of the group, as a [agents, seats] one-hot: rewards @ it = seat returns.
        self.seat_matrix = torch.zeros(len(agents), len(self.seats), dtype=torch.float64)
        for seat, names in enumerate(self.seats):
            for name in names:
                self.seat_matrix[agents.index(name), seat] = 1.0
        self.agents = list(env_spec.possible_agents)
        # A solo league has no opponents to hold: its snapshots are only written (and copied by PBT).
        self.slot_ids = [] if self.solo else [f"{SLOT_PREFIX}{k}" for k in range(config.max_resident)]
        taken = [s for s in self.slot_ids if s in self.by_id]
        if taken:
            raise ValueError(f"policy_bindings: ids {taken} are reserved for the league's opponent slots")
        slots = [dataclasses.replace(template, id=slot, trainable=False, policy_uri=None) for slot in self.slot_ids]
        #: the population: the recipe's bindings and the league's own (opponent slots, and what subclasses add).
        self.policy_bindings: list[Any] = [*bindings, *slots]
        #: every agent -> the first player's binding: the map before the league seats copies, and in evaluation.
        self.eval_map = [self.player_binding_ids[0]] * len(self.agents)
        self.store = SnapshotStore(max_resident=config.max_resident)
        self.matchmaker: Matchmaker | None = None
        self.collector: RolloutCollector | None = None
        #: ``fn(snapshot, earlier snapshots) -> exact payoffs``: set with ``meta_game: exact`` (by the training loop).
        self.meta_payoffs: MetaPayoffs | None = None
        self.exchange: Exchange = OneProcess()
        self._returns = torch.zeros(0, len(self.seats), dtype=torch.float64)
        self._rollout_ends: list[torch.Tensor] = []  # per step of the rollout: [copies, 1 + seats] (ended, returns)
        self._lane_steps: dict[int, int] = {}  # steps each lane took in this rollout
        self._lanes: dict[int, slice] = {}  # each lane's env copies
        self._ends = torch.zeros(0, dtype=torch.int64)  # episode ends of each of this process's copies this rollout
        self._iteration_results: dict[str, list[Any]] = {}
        #: player id -> weight loads after its snapshots (resets, or a PBT copy of another player).
        self._resets: dict[str, int] = {}

    # -- what the training loop supplies --------------------------------------------------
    @property
    @abstractmethod
    def table(self) -> BindingTable:
        """The run's binding table (the league installs its agent binding maps there)."""

    @property
    @abstractmethod
    def num_envs(self) -> int:
        """Env copies this process steps."""

    @abstractmethod
    def get_weights(self, binding: str) -> dict[str, torch.Tensor]:
        """A binding's policy weights."""

    @abstractmethod
    def set_weights(self, binding: str, weights: Mapping[str, torch.Tensor]) -> None:
        """Load weights into a binding's policy (``ValueError`` where they do not fit)."""

    @abstractmethod
    def describe(self, binding: str) -> dict[str, Any]:
        """What a snapshot file of ``binding`` carries besides its weights (it opens alone)."""

    @abstractmethod
    def restart(self, binding: str) -> None:
        """A fresh start for a trainable binding whose weights were replaced: optimizer state, algorithm state."""

    def reserve(self, table: BindingTable) -> None:
        """Give every player and slot binding a policy from the start (they enter the map later)."""
        table.reserve({b: self.group for b in [*self.player_binding_ids, *self.slot_ids]})

    # -- set-up ---------------------------------------------------------------------------
    def build(self, exchange: Exchange, snapshot_dir: str, seed: int) -> None:
        """Build the league for this run (before a checkpoint is restored).

        Args:
            exchange: the collectives between training processes.
            snapshot_dir: the snapshot folder where the recipe names none.
            seed: the league's seed where the recipe names none.
        """
        self.exchange = exchange
        folder = self.config.snapshot_dir or snapshot_dir
        copies = self.num_envs * exchange.world_size()
        manager = LeagueManager(
            roles=self.config.roles,
            pretrained=self.config.pretrained,
            payoff=self.config.payoff,
            ratings=self.config.ratings,
            # Every copy of a player's jobs runs at once (its current one and the one on deck):
            # copy g launches for player g mod players.
            max_active_player_job=2 * -(-copies // len(self.config.roles)),
            snapshot_dir=folder,
            seed=self.config.seed if self.config.seed is not None else seed,
            save_checkpoint_fn=self._save_snapshot,
            load_checkpoint_fn=self._reset_player,
        )
        player_bindings = {p.player_id: b for p, b in zip(manager.active_players, self.player_binding_ids)}
        self.matchmaker = Matchmaker(
            manager,
            player_bindings,
            self.slot_ids,
            copies,
            outcome=self.config.outcome,
            max_redraws=self.config.max_redraws,
        )
        self._returns = torch.zeros(self.num_envs, len(self.seats), dtype=torch.float64)
        self._ends = torch.zeros(self.num_envs, dtype=torch.int64)
        for player in manager.historical_players:  # pretrained opponents: a bad file fails before the first step
            template = self.slot_ids[0] if self.slot_ids else self.player_binding_ids[0]
            self._set_weights_check(template, player.checkpoint_path, f"league.pretrained ({player.player_id!r})")

    def _set_weights_check(self, binding: str, path: str, field: str) -> None:
        weights = self.get_weights(binding)
        try:
            self.set_weights(binding, self.store.load(path))
        except (OSError, ValueError) as err:
            raise ConfigError(f"{field}: {err}") from None
        finally:
            self.set_weights(binding, weights)

    @property
    def manager(self) -> LeagueManager:
        assert self.matchmaker is not None, "the league is built in setup('fit')"
        return self.matchmaker.manager

    def binding_of(self, player_id: str) -> str:
        assert self.matchmaker is not None
        return self.matchmaker.player_bindings[player_id]

    def start(self, collector: RolloutCollector) -> None:
        """At fit start (after a restore): save initial weights, seat every copy, install the maps."""
        assert self.matchmaker is not None
        self.collector = collector
        rank0 = self.exchange.rank() == 0
        if rank0:
            for player in self.manager.active_players:
                if not os.path.exists(player.initial_checkpoint_path):
                    self._write_snapshot(player.initial_checkpoint_path, player.player_id, player.player_id)
        # Every copy's current seating and the one on deck (a resumed run has them from its checkpoint).
        fresh = (self.matchmaker.start(), self.matchmaker.fill_on_deck()) if rank0 else ([], [])
        current, on_deck = self.exchange.broadcast(fresh)
        self._apply(current)
        self._apply(on_deck, on_deck=True)
        self._install_map()
        collector.keep_recurrent_states()

    # -- during a rollout -----------------------------------------------------------------
    def on_step(self, step: RolloutStep) -> None:
        """The collector's step hook: seat returns; a copy whose episode ended starts its on-deck seating.

        Nothing is exchanged between processes here: the ended episodes wait for
        `after_iteration`.
        """
        nxt = step.next[self.group]
        rewards = nxt.get(keys.ENV_REWARD, nxt[keys.REWARD])
        self._returns[step.envs] += rewards.to(torch.float64) @ self.seat_matrix
        t = self._lane_steps.get(step.lane, 0)
        self._lane_steps[step.lane] = t + 1
        self._lanes[step.lane] = step.envs
        if t == len(self._rollout_ends):
            self._rollout_ends.append(torch.zeros(self._returns.shape[0], 1 + len(self.seats), dtype=torch.float64))
        ended = step.ended.cpu()
        if not bool(ended.any()):
            return
        row = self._rollout_ends[t]
        row[step.envs, 0] = ended.to(torch.float64)
        row[step.envs, 1:] = self._returns[step.envs]
        self._returns[step.envs] *= 1.0 - ended.to(torch.float64).unsqueeze(-1)  # a new episode starts from 0
        first = self._ends[step.envs] == 0
        self._ends[step.envs] += ended.to(torch.int64)
        if bool((ended & first).any()):  # these copies start their on-deck seating now
            self._install_map()

    def _apply(self, seatings: list[Seating], on_deck: bool = False) -> None:
        """Load snapshots into slots and mirror the seatings, current or on deck (every rank)."""
        assert self.matchmaker is not None
        for seating in seatings:
            if seating.load is not None:
                self._load_snapshot(seating.opponent_binding, seating.load)
            if on_deck:
                self.matchmaker.on_deck[seating.copy] = seating
            else:
                self.matchmaker.seatings[seating.copy] = seating

    def _install_map(self) -> None:
        assert self.matchmaker is not None
        first = self.exchange.rank() * self.num_envs
        per_env: dict[int, list[str]] = {}
        for i in range(self.num_envs):
            seating = self.matchmaker.playing_after(first + i, int(self._ends[i]))
            seat_of_player = self.seats[seating.seat]
            per_env[i] = [
                seating.player_binding if agent in seat_of_player else seating.opponent_binding for agent in self.agents
            ]
        self.table.set_agent_binding_map({"default": self.eval_map, "per_env": per_env})

    def meta_strategy_player(self, binding: str) -> MetaStrategyPlayer | None:
        """The player with a meta-strategy ([`MetaStrategyPlayer`][lightmarl.league.meta.MetaStrategyPlayer]) that
        ``binding`` trains, or ``None`` where its player has none (rank 0's view)."""
        player = next((p for p in self.manager.active_players if self.binding_of(p.player_id) == binding), None)
        return player if isinstance(player, MetaStrategyPlayer) else None

    def shown_policy(self, binding: str) -> list[tuple[str, float]] | None:
        """What the league shows as the policy of the player trained by ``binding`` (rank 0's view).

        A player with a meta-strategy ([`MetaStrategyPlayer`][lightmarl.league.meta.MetaStrategyPlayer]) shows its
        mixture: ``(snapshot file, weight)`` per snapshot. ``None`` for other roles and before a
        first snapshot: the player's live binding is its policy.

        Raises:
            ValueError: ``binding`` trains no player of the league.
        """
        if binding not in self.player_binding_ids:
            raise ValueError(
                f"league: binding {binding!r} trains no player; players' bindings: {self.player_binding_ids}"
            )
        player = next(p for p in self.manager.active_players if self.binding_of(p.player_id) == binding)
        mixture = shown_mixture(player)
        if mixture is None:
            return None
        members, weights = mixture
        return [(m.checkpoint_path, float(w)) for m, w in zip(members, weights)]

    # -- evaluation -----------------------------------------------------------------------
    def evaluation_map(self, on: bool) -> None:
        """Switch to the evaluation map (every agent -> the first player) and back to the seatings."""
        if self.collector is None:  # `validate` / `test`: the table holds the evaluation map already
            return
        if on:
            self.table.set_agent_binding_map(self.eval_map)
        else:
            self._install_map()
            self.collector.keep_recurrent_states()

    # -- between iterations ---------------------------------------------------------------
    def after_iteration(self, experience: Any) -> dict[str, float]:
        """Record the rollout's episodes, count agent steps, snapshot / reset due players, draw the next
        on-deck seatings; returns ``league/...`` metrics (every rank: one all-gather and one broadcast).
        """
        assert self.matchmaker is not None
        rows = experience.get(self.group)
        valid = rows.get(keys.VALID)
        binding = rows.get(keys.BINDING_ID)
        steps = torch.stack([(valid & (binding == self.table.index[b])).sum() for b in self.player_binding_ids])
        num_envs, width = self._returns.shape[0], 1 + len(self.seats)
        ends = torch.stack(self._rollout_ends) if self._rollout_ends else torch.zeros(0, num_envs, width)
        gathered = self.exchange.all_gather(
            torch.cat([steps.to(torch.float64).cpu(), ends.to(torch.float64).reshape(-1)])
        )  # [ranks, players + steps * copies * (1 + seats)]
        players = len(self.player_binding_ids)
        steps = gathered[:, :players].sum(0)
        ends = gathered[:, players:].reshape(gathered.shape[0], -1, num_envs, width)  # [ranks, steps, copies, ...]
        # In the order the episodes ended: step, lane, rank, copy (as one process steps the copies).
        lane_of = {i: lane for lane, envs in self._lanes.items() for i in range(envs.start, envs.stop)}
        where = sorted((ends[..., 0] > 0).nonzero().tolist(), key=lambda r: (r[1], lane_of[r[2]], r[0], r[2]))
        ended = [(rank * num_envs + i, ends[rank, t, i, 1:].tolist()) for rank, t, i in where]
        events: list[tuple[str, str | None]] = []
        metrics: dict[str, float] = {}
        on_deck: list[Seating] = []
        rank0 = self.exchange.rank() == 0
        if rank0:
            for seating, result in self.matchmaker.rollout_ended(ended):
                if result is not None:
                    self._iteration_results.setdefault(seating.player_id, []).append(result)
            for player, count in zip(self.manager.active_players, steps.tolist()):
                self.manager.update_active_player(player.player_id, int(count))
            events = [(e.player_id, e.reset_to) for e in self.manager.snapshot_due_players()]
            for player_id, reset_to in events:
                self._resets[player_id] = self._resets.get(player_id, 0) + (reset_to is not None)
            if self.meta_payoffs is not None and events:  # new snapshots' exact rows, before they are drawn
                for active in self.manager.active_players:
                    if isinstance(active, MetaStrategyPlayer):
                        active.fill_meta_game(self.meta_payoffs)
            on_deck = self.matchmaker.fill_on_deck()  # new snapshots are candidates at once
            metrics = self.metrics()
        events, metrics, on_deck = self.exchange.broadcast((events, metrics, on_deck))
        if not rank0:
            self.matchmaker.advance(sorted({copy for copy, _ in ended}))
            for player_id, reset_to in events:
                if reset_to is not None:
                    self._load_live(player_id, reset_to)
        self._apply(on_deck, on_deck=True)
        self._rollout_ends, self._lane_steps = [], {}
        self._ends.zero_()
        return metrics

    def _write_snapshot(self, path: str, binding_player: str, player_id: str) -> None:
        binding = self.binding_of(binding_player)
        # Self-describing: the file opens alone (policy_uri, load_population), not only inside this league.
        self.store.save(path, self.get_weights(binding), {**self.describe(binding), "player": player_id})

    def _save_snapshot(self, player: ActivePlayer, snapshot: HistoricalPlayer) -> None:
        self._write_snapshot(snapshot.checkpoint_path, player.player_id, snapshot.player_id)

    def _reset_player(self, player: ActivePlayer, path: str) -> None:
        self._load_live(player.player_id, path)

    def _load_live(self, player_id: str, path: str) -> None:
        """Load weights into a player's live binding and start it afresh (optimizer and algorithm state)."""
        binding = self.binding_of(player_id)
        self._load_snapshot(binding, path)
        self.restart(binding)

    def _load_snapshot(self, binding: str, path: str) -> None:
        """Load a snapshot file into a binding; a missing, corrupt or misfitting file is one line naming it."""
        try:
            self.set_weights(binding, self.store.load(path))
        except (OSError, ValueError) as err:
            raise ConfigError(f"league: {err}") from None

    def metrics(self) -> dict[str, float]:
        """``league/<player>/...`` per active player and the league's size (rank 0's view)."""
        assert self.matchmaker is not None
        manager = self.manager
        logs: dict[str, float] = {"league/historical_players": float(len(manager.historical_players))}
        for player in manager.active_players:
            pid = player.player_id
            results = self._iteration_results.get(pid, [])
            prefix = f"league/{pid}"
            logs[f"{prefix}/historical_players"] = float(
                sum(1 for h in manager.historical_players if h.parent_id == pid)
            )
            logs[f"{prefix}/agent_steps"] = float(player.total_agent_step)
            logs[f"{prefix}/resets"] = float(self._resets.get(pid, 0))
            for branch, count in self.matchmaker.jobs_by_branch[pid].items():
                logs[f"{prefix}/jobs/{branch}"] = float(count)
            if self.solo:
                recent = [float(r) for r in manager.payoff.results(pid)]  # type: ignore[union-attr]
                if results:
                    logs[f"{prefix}/episode_return"] = sum(results) / len(results)
                if recent:
                    logs[f"{prefix}/recent_return"] = sum(recent) / len(recent)
                continue
            if results:
                logs[f"{prefix}/win_rate"] = (results.count("win") + 0.5 * results.count("draw")) / len(results)
            logs[f"{prefix}/elo"] = float(manager.elo[pid])
            logs[f"{prefix}/openskill_ordinal"] = float(manager.skill.ordinal(pid))
            counts = self.matchmaker.seat_results[pid]
            logs[f"{prefix}/games"] = float(sum(sum(c.values()) for c in counts))
            for seat, rate in enumerate(self.matchmaker.win_rates_by_seat(pid)):
                if rate == rate:  # not NaN: the seat has played
                    logs[f"{prefix}/win_rate_seat{seat}"] = rate
        self._iteration_results = {}
        return logs

    def payoff_table(self, max_players: int = 12) -> tuple[list[str], np.ndarray, np.ndarray] | None:
        """``(players, score, games)`` for a payoff heatmap: the active players and the newest snapshots.

        ``games`` are the decayed counts, rounded; ``score`` is NaN for a pair below half a
        (decayed) game. ``None`` for a solo league or before the league is built.
        """
        if self.matchmaker is None or self.solo:
            return None
        payoff = self.manager.payoff
        assert isinstance(payoff, BattleSharedPayoff)
        return heatmap_table(payoff, [p.player_id for p in self.manager.players], max_players)

    # -- checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        assert self.matchmaker is not None
        return {
            "matchmaker": self.matchmaker.state_dict(),
            "returns": self._returns.tolist(),
            "resets": dict(self._resets),
            # What the league shows as each meta-strategy player's policy, for exports and
            # load_population (read back as the artifact's mixtures, never by load_state_dict).
            "mixtures": self.shown_mixtures(),
            # The frozen opponent slots among the bindings: internal, so exports and load_population
            # leave them out (their weights are whichever snapshot was last loaded; the snapshots are listed).
            "slots": list(self.slot_ids),
        }

    def shown_mixtures(self) -> dict[str, dict[str, float]]:
        """Each meta-strategy player's shown mixture: its binding -> {snapshot id: weight}."""
        mixtures = {}
        for player in self.manager.active_players:
            mixture = shown_mixture(player)
            if mixture is not None:
                members, weights = mixture
                binding = self.binding_of(player.player_id)
                mixtures[binding] = {m.player_id: float(w) for m, w in zip(members, weights)}
        return mixtures

    def rank_state_dict(self) -> dict[str, Any]:
        """This process's own part (under DDP each rank has its copies' running seat returns)."""
        return {"returns": self._returns.clone()}

    def load_rank_state_dict(self, state: dict[str, Any]) -> None:
        if state["returns"].shape == self._returns.shape:
            self._returns = state["returns"].clone()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        assert self.matchmaker is not None
        self.matchmaker.load_state_dict(state["matchmaker"])
        self._resets = {str(k): int(v) for k, v in state.get("resets", {}).items()}
        returns = torch.tensor(state["returns"], dtype=torch.float64)
        if returns.shape == self._returns.shape:
            self._returns = returns


def check_seats(seats: list[list[str]] | None, env_spec: EnvSpec, solo: bool) -> list[list[str]]:
    """The seats of ``league.seats`` checked against the env (default: its agents halved, or one seat when solo).

    Raises:
        ValueError: naming ``league.seats`` and the env's agents.
    """
    agents = list(env_spec.possible_agents)
    if solo:
        seats = seats or [agents]
        if len(seats) != 1 or sorted(seats[0]) != sorted(agents):
            raise ValueError(f"league.seats: a solo league has one seat holding every agent {agents}, got {seats}")
    if seats is None:
        if len(agents) < 2 or len(agents) % 2:
            raise ValueError(f"league.seats: give the agents of each seat; the env's agents are {agents}")
        seats = [agents[: len(agents) // 2], agents[len(agents) // 2 :]]
    seated = [a for seat in seats for a in seat]
    if len(seats) != (1 if solo else 2) or not all(seats) or sorted(seated) != sorted(agents):
        raise ValueError(
            f"league.seats: expected two non-empty lists that seat each of the env's agents {agents} once, got {seats}"
        )
    groups = {env_spec.group_of(a).name for a in seated}
    if len(groups) != 1:
        raise ValueError(
            f"league.seats: the seats' agents belong to groups {sorted(groups)}; seats swap between "
            "players, so every agent must be in one group (same spaces)"
        )
    return [list(seat) for seat in seats]


def heatmap_table(
    payoff: BattleSharedPayoff, players: list[str], max_players: int = 12
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(shown players, score, games)`` of the (decayed) payoff between ``players``: the active ones and the newest snapshots.

    ``games`` are the decayed counts, rounded; a pair below half a (decayed) game scores NaN (unplayed).
    """
    shown = players[-max_players:]
    if len(players) > max_players:  # active players come first: keep a few of them beside the newest snapshots
        active = players[: max_players // 3]
        shown = active + players[-(max_players - len(active)) :]
    score, decayed = payoff.table(shown)
    games = np.rint(decayed).astype(np.int64)
    score[games == 0] = np.nan
    return shown, score, games
