"""League training inside ``lightmarl fit``: the recipe's ``league:`` section and its run-time side.

[`LeagueConfig`][lightmarl.training.league.LeagueConfig] is the recipe section; `LeagueTraining` is what
[`MARLModule`][lightmarl.training.module.MARLModule] calls at its hooks:

- at construction it adds ``max_resident`` frozen *opponent slot* bindings (copies of the first
  player's binding spec) and reserves them in the binding table, so their policies exist from
  the start; historical players act through them with weights loaded from snapshot files;
- during a rollout (the collector's step hook) it adds up each env copy's return per seat and,
  where a copy's episode ended, keeps the seat returns and installs the copy's on-deck seating
  (`Matchmaker`) before that copy acts again;
- between iterations it records the rollout's finished episodes in the order they ended, counts
  each player's trained agent steps, snapshots and resets players (resetting their optimizer
  state too), draws the next on-deck seatings and logs ``league/<player>/...`` metrics;
- at epoch ends rank 0 writes a payoff heatmap PNG next to the logs;
- its state (league, seatings, slots) goes into the Lightning checkpoint.

Under DDP the league lives on rank 0: once per rollout, each rank's finished episodes and
agent steps are gathered (one ``all_gather`` through the Lightning strategy), rank 0 decides,
and the on-deck seatings, snapshot events and metrics are broadcast (one broadcast), so 1 and N
processes follow one protocol and record the same games in the same order. Snapshot files are
read by every rank: the snapshot directory must be visible to all of them (one machine, or a
shared filesystem).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.utilities import rank_zero_info

from lightmarl import keys
from lightmarl.data.rollout import RolloutStep
from lightmarl.envs.spec import EnvSpec
from lightmarl.errors import ConfigError
from lightmarl.evaluation.plots import plot_score_heatmap
from lightmarl.league import LeagueManager, LeagueRole, PayoffSettings, PretrainedSpec, RatingSettings, SnapshotStore
from lightmarl.league.manager import role_class
from lightmarl.league.matchmaking import Matchmaker, Seating, outcome_from_returns
from lightmarl.league.meta import MetaStrategyPlayer, shown_mixture
from lightmarl.league.payoff import BattleSharedPayoff
from lightmarl.league.player import ActivePlayer, HistoricalPlayer
from lightmarl.population import PolicyBindingConfig
from lightmarl.population.bindings import as_binding
from lightmarl.training import collectives
from lightmarl.training.average_network import AverageNetworkConfig, distill_mixture

if TYPE_CHECKING:
    from lightmarl.algorithms.marl_trainer import MARLTrainer
    from lightmarl.data.collector import RolloutCollector
    from lightmarl.envs.config import EnvConfig
    from lightmarl.population import BindingTable


class LeagueHost(Protocol):
    """What the league needs of the [`MARLModule`][lightmarl.training.module.MARLModule] that runs it."""

    env_config: EnvConfig
    table: BindingTable

    @property
    def trainer(self) -> Any: ...

    @property
    def device(self) -> torch.device: ...

    seed: int

    @property
    def policies(self) -> Any: ...

    iterations: int
    rollout_steps: int

    @property
    def total_iterations(self) -> int: ...

    def get_weights(self, binding_id: str) -> dict[str, torch.Tensor]: ...

    def snapshot_description(self, binding_id: str) -> dict[str, Any]: ...

    def set_weights(self, binding_id: str, weights: dict[str, torch.Tensor]) -> None: ...

    def named_optimizers(self) -> dict[str, torch.optim.Optimizer]: ...

    @property
    def marl_trainer(self) -> MARLTrainer | None: ...


#: checkpoint entry of the league's state.
CHECKPOINT_KEY = "lightmarl_league"
SLOT_PREFIX = "league_opponent_"


@dataclass
class LeagueConfig:
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
        average_networks: the shown policy of a player as one network
            (`lightmarl.training.average_network`): a frozen binding ``<player>_average``
            into which the player's shown mixture is distilled every ``every_n_iterations``
            iterations and after the last; checkpoints and exports carry it like any binding.
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
    average_networks: list[AverageNetworkConfig] = field(default_factory=list)


class LeagueTraining:
    """The league's run-time side in one process.

    Args:
        config: the recipe's ``league:`` section.
        env_spec: the env the league plays.
        policy_bindings: the recipe's bindings; the players' bindings must be trainable ones
            of the same policy class and kwargs (snapshots load into every opponent slot).
    """

    def __init__(self, config: LeagueConfig, env_spec: EnvSpec, policy_bindings: list[PolicyBindingConfig] | None):
        self.config = config
        if not config.roles:
            raise ValueError("league.roles: give at least one role")
        if config.max_resident < 1:
            raise ValueError(f"league.max_resident: expected an integer >= 1, got {config.max_resident!r}")
        #: a solo league (``payoff.kind: solo``): players without opponents, results are episode returns.
        self.solo = config.payoff.kind == "solo"
        bindings = [as_binding(b) for b in policy_bindings or []]
        by_id = {b.id: b for b in bindings}
        self.player_binding_ids = [role.binding for role in config.roles]
        for i, role in enumerate(config.roles):
            try:  # the role's class and settings, before any env exists (the manager is built in setup)
                role_class(role.class_path).make_settings(dict(role.settings))
            except (TypeError, ValueError) as err:
                raise ValueError(f"league.roles[{i}] (binding {role.binding!r}): {err}") from None
            binding = by_id.get(role.binding)
            if binding is None or not binding.trainable:
                raise ValueError(
                    f"league.roles: binding {role.binding!r} is not a trainable binding of policy_bindings "
                    f"(trainable: {[b.id for b in bindings if b.trainable]})"
                )
        if len(set(self.player_binding_ids)) != len(self.player_binding_ids):
            raise ValueError(f"league.roles: each role needs a binding of its own, got {self.player_binding_ids}")
        template = by_id[self.player_binding_ids[0]]
        for binding_id in self.player_binding_ids[1:]:
            other = by_id[binding_id]
            if (other.class_path, other.policy_kwargs) != (template.class_path, template.policy_kwargs):
                raise ValueError(
                    f"league.roles: binding {binding_id!r} differs from {template.id!r} in class_path or "
                    "policy_kwargs; every player's snapshots load into the same opponent slots"
                )
        self.seats = self._check_seats(config.seats, env_spec, self.solo)
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
        taken = [s for s in self.slot_ids if s in by_id]
        if taken:
            raise ValueError(f"policy_bindings: ids {taken} are reserved for the league's opponent slots")
        slots = [
            dataclasses.replace(template, id=slot, trainable=False, policy_uri=None, class_path=template.class_path)
            for slot in self.slot_ids
        ]
        #: player binding -> its average network's config (``league.average_networks``)
        self.averages: dict[str, AverageNetworkConfig] = {}
        for average in config.average_networks:
            if average.player not in self.player_binding_ids:
                raise ValueError(
                    f"league.average_networks: player {average.player!r} is not a player's binding; "
                    f"players' bindings: {self.player_binding_ids}"
                )
            if average.player in self.averages:
                raise ValueError(f"league.average_networks: player {average.player!r} has two average networks")
            if average.binding_id in by_id or average.binding_id in self.slot_ids:
                raise ValueError(
                    f"league.average_networks: binding id {average.binding_id!r} is taken; name another (binding: ...)"
                )
            self.averages[average.player] = average
        averages = [
            dataclasses.replace(by_id[a.player], id=a.binding_id, trainable=False, policy_uri=None)
            for a in self.averages.values()
        ]
        #: average network binding -> the members (snapshot file -> policy) it was last distilled from
        self._member_policies: dict[str, Any] = {}
        self.policy_bindings: list[Any] = [*bindings, *slots, *averages]
        #: every agent -> the first player's binding: the map before the league seats copies, and in evaluation.
        self.eval_map = [self.player_binding_ids[0]] * len(self.agents)
        self.store = SnapshotStore(max_resident=config.max_resident)
        self.matchmaker: Matchmaker | None = None
        self.module: LeagueHost | None = None
        self.collector: RolloutCollector | None = None
        self._returns = torch.zeros(0, len(self.seats), dtype=torch.float64)
        self._rollout_ends: list[torch.Tensor] = []  # per step of the rollout: [copies, 1 + seats] (ended, returns)
        self._lane_steps: dict[int, int] = {}  # steps each lane took in this rollout
        self._lanes: dict[int, slice] = {}  # each lane's env copies
        self._ends = torch.zeros(0, dtype=torch.int64)  # episode ends of each of this process's copies this rollout
        self._iteration_results: dict[str, list[Any]] = {}
        #: player id -> weight loads after its snapshots (resets, or a PBT copy of another player).
        self._resets: dict[str, int] = {}

    @staticmethod
    def _check_seats(seats: list[list[str]] | None, env_spec: EnvSpec, solo: bool) -> list[list[str]]:
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
                f"league.seats: expected two non-empty lists that seat each of the env's agents {agents} once, "
                f"got {seats}"
            )
        groups = {env_spec.group_of(a).name for a in seated}
        if len(groups) != 1:
            raise ValueError(
                f"league.seats: the seats' agents belong to groups {sorted(groups)}; seats swap between "
                "players, so every agent must be in one group (same spaces)"
            )
        return [list(seat) for seat in seats]

    def reserve(self, table: BindingTable) -> None:
        """Give every player and slot binding a policy from the start (they enter the map later)."""
        averages = [a.binding_id for a in self.averages.values()]
        table.reserve({b: self.group for b in [*self.player_binding_ids, *self.slot_ids, *averages]})

    def average_binding(self, binding: str) -> str | None:
        """The binding of ``binding``'s average network (``league.average_networks``), or ``None``."""
        average = self.averages.get(binding)
        return average.binding_id if average is not None else None

    # -- set-up ---------------------------------------------------------------------------
    def setup(self, module: LeagueHost) -> None:
        """Build the league for this run (``setup('fit')``: before a checkpoint is restored)."""
        if self.matchmaker is not None:
            return
        self.module = module
        trainer = module.trainer
        if self.averages and trainer.world_size > 1:
            raise ConfigError(
                f"league.average_networks: distillation runs in one process; this run has {trainer.world_size} "
                "(train with one process, or leave average_networks out)"
            )
        folder = self.config.snapshot_dir or os.path.join(trainer.default_root_dir, "league")
        seed = self.config.seed if self.config.seed is not None else module.seed
        manager = LeagueManager(
            roles=self.config.roles,
            pretrained=self.config.pretrained,
            payoff=self.config.payoff,
            ratings=self.config.ratings,
            # Every copy of a player's jobs runs at once (its current one and the one on deck):
            # copy g launches for player g mod players.
            max_active_player_job=2 * -(-module.env_config.num_envs * trainer.world_size // len(self.config.roles)),
            snapshot_dir=folder,
            seed=seed,
            save_checkpoint_fn=self._save_snapshot,
            load_checkpoint_fn=self._reset_player,
        )
        player_bindings = {p.player_id: b for p, b in zip(manager.active_players, self.player_binding_ids)}
        self.matchmaker = Matchmaker(
            manager,
            player_bindings,
            self.slot_ids,
            module.env_config.num_envs * trainer.world_size,
            outcome=self.config.outcome,
            max_redraws=self.config.max_redraws,
        )
        self._returns = torch.zeros(module.env_config.num_envs, len(self.seats), dtype=torch.float64)
        self._ends = torch.zeros(module.env_config.num_envs, dtype=torch.int64)
        for player in manager.historical_players:  # pretrained opponents: a bad file fails before the first step
            template = self.slot_ids[0] if self.slot_ids else self.player_binding_ids[0]
            self._set_weights_check(template, player.checkpoint_path, f"league.pretrained ({player.player_id!r})")

    def _set_weights_check(self, binding: str, path: str, field: str) -> None:
        assert self.module is not None
        weights = self.module.get_weights(binding)
        try:
            self.module.set_weights(binding, self.store.load(path))
        except (OSError, ValueError) as err:
            raise ConfigError(f"{field}: {err}") from None
        finally:
            self.module.set_weights(binding, weights)

    def _strategy(self) -> Strategy | None:
        """The run's Lightning strategy: every exchange between processes goes through it."""
        return None if self.module is None else self.module.trainer.strategy

    def _rank(self) -> int:
        return collectives.rank(self._strategy())

    @property
    def manager(self) -> LeagueManager:
        assert self.matchmaker is not None, "the league is built in setup('fit')"
        return self.matchmaker.manager

    def binding_of(self, player_id: str) -> str:
        assert self.matchmaker is not None
        return self.matchmaker.player_bindings[player_id]

    def start(self, collector: RolloutCollector) -> None:
        """At fit start (after a restore): save initial weights, seat every copy, install the maps."""
        assert self.matchmaker is not None and self.module is not None
        self.collector = collector
        if self._rank() == 0:
            for player in self.manager.active_players:
                if not os.path.exists(player.initial_checkpoint_path):
                    binding = self.binding_of(player.player_id)
                    self.store.save(
                        player.initial_checkpoint_path,
                        self.module.get_weights(binding),
                        {**self.module.snapshot_description(binding), "player": player.player_id},
                    )
        # Every copy's current seating and the one on deck (a resumed run has them from its checkpoint).
        fresh = (self.matchmaker.start(), self.matchmaker.fill_on_deck()) if self._rank() == 0 else ([], [])
        current, on_deck = collectives.broadcast(self._strategy(), fresh)
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
        assert self.matchmaker is not None and self.module is not None
        for seating in seatings:
            if seating.load is not None:
                self._set_weights(seating.opponent_binding, seating.load)
            if on_deck:
                self.matchmaker.on_deck[seating.copy] = seating
            else:
                self.matchmaker.seatings[seating.copy] = seating

    def _install_map(self) -> None:
        assert self.matchmaker is not None and self.module is not None
        num_envs = self.module.env_config.num_envs
        first = self._rank() * num_envs
        per_env: dict[int, list[str]] = {}
        for i in range(num_envs):
            seating = self.matchmaker.playing_after(first + i, int(self._ends[i]))
            seat_of_player = self.seats[seating.seat]
            per_env[i] = [
                seating.player_binding if agent in seat_of_player else seating.opponent_binding for agent in self.agents
            ]
        self.module.table.set_agent_binding_map({"default": self.eval_map, "per_env": per_env})

    def meta_strategy_player(self, binding: str) -> Any:
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
            self.module.table.set_agent_binding_map(self.eval_map)  # type: ignore[union-attr]
        else:
            self._install_map()
            self.collector.keep_recurrent_states()

    # -- between iterations ---------------------------------------------------------------
    def after_iteration(self, experience: Any) -> dict[str, float]:
        """Record the rollout's episodes, count agent steps, snapshot / reset due players, draw the next
        on-deck seatings; returns ``league/...`` metrics (every rank: one all-gather and one broadcast).
        """
        assert self.matchmaker is not None and self.module is not None
        table = self.module.table
        rows = experience.get(self.group)
        valid = rows.get(keys.VALID)
        binding = rows.get(keys.BINDING_ID)
        steps = torch.stack([(valid & (binding == table.index[b])).sum() for b in self.player_binding_ids])
        num_envs, width = self._returns.shape[0], 1 + len(self.seats)
        ends = torch.stack(self._rollout_ends) if self._rollout_ends else torch.zeros(0, num_envs, width)
        gathered = collectives.all_gather(
            self._strategy(), torch.cat([steps.to(torch.float64).cpu(), ends.to(torch.float64).reshape(-1)])
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
        if self._rank() == 0:
            for seating, result in self.matchmaker.rollout_ended(ended):
                if result is not None:
                    self._iteration_results.setdefault(seating.player_id, []).append(result)
            for player, count in zip(self.manager.active_players, steps.tolist()):
                self.manager.update_active_player(player.player_id, int(count))
            events = [(e.player_id, e.reset_to) for e in self.manager.snapshot_due_players()]
            for player_id, reset_to in events:
                self._resets[player_id] = self._resets.get(player_id, 0) + (reset_to is not None)
            on_deck = self.matchmaker.fill_on_deck()  # new snapshots are candidates at once
            metrics = self.metrics()
        events, metrics, on_deck = collectives.broadcast(self._strategy(), (events, metrics, on_deck))
        if self._rank() != 0:
            self.matchmaker.advance(sorted({copy for copy, _ in ended}))
            for player_id, reset_to in events:
                if reset_to is not None:
                    self._load_live(player_id, reset_to)
        self._apply(on_deck, on_deck=True)
        self._rollout_ends, self._lane_steps = [], {}
        self._ends.zero_()
        iteration = self.module.iterations
        for player_binding, average in self.averages.items():
            if iteration % average.every_n_iterations == 0 or iteration >= self.module.total_iterations:
                metrics.update(self.distill_average(player_binding))
        return metrics

    def distill_average(self, player: str) -> dict[str, float]:
        """Distil the shown policy of ``player`` (a binding) into its average network; ``league/<binding>/average_*`` metrics.

        Before the player's first snapshot (or for a role without a mixture) the shown policy is the
        live binding: its weights are copied.
        """
        assert self.module is not None
        average = self.averages[player]
        policies = self.module.policies
        shown = self.shown_policy(player)
        prefix = f"league/{player}"
        if shown is None:
            self.module.set_weights(average.binding_id, self.module.get_weights(player))
            return {f"{prefix}/average_members": 1.0}
        members = []
        for path, _ in shown:
            if path not in self._member_policies:
                member = copy.deepcopy(policies[player]).eval().requires_grad_(False)
                member.load_state_dict(self.store.load(path))
                self._member_policies[path] = member
            members.append(self._member_policies[path])
        student = policies[average.binding_id]
        student.requires_grad_(True)
        try:
            found = distill_mixture(
                student,
                members,
                [w for _, w in shown],
                self.module.env_config,
                self.seats,
                average,
                self.module.rollout_steps,
                seed=self.module.iterations,
            )
        finally:
            student.requires_grad_(False)
        return {
            f"{prefix}/average_kl": found["kl"],
            f"{prefix}/average_kl_before": found["kl_before"],
            f"{prefix}/average_members": float(len(shown)),
        }

    def _save_snapshot(self, player: ActivePlayer, snapshot: HistoricalPlayer) -> None:
        assert self.module is not None
        binding = self.binding_of(player.player_id)
        # Self-describing: the file opens alone (policy_uri, load_population), not only inside this league.
        description = {**self.module.snapshot_description(binding), "player": snapshot.player_id}
        self.store.save(snapshot.checkpoint_path, self.module.get_weights(binding), description)

    def _reset_player(self, player: ActivePlayer, path: str) -> None:
        self._load_live(player.player_id, path)

    def _load_live(self, player_id: str, path: str) -> None:
        """Load weights into a player's live binding and forget its optimizer's state (a fresh start)."""
        assert self.module is not None
        binding = self.binding_of(player_id)
        self._set_weights(binding, path)
        optimizer = self.module.named_optimizers().get(binding)
        if optimizer is not None:
            getattr(optimizer, "optimizer", optimizer).state.clear()
        assert self.module.marl_trainer is not None
        self.module.marl_trainer.unit_trainers[binding].restart()

    def _set_weights(self, binding: str, path: str) -> None:
        """Load a snapshot file into a binding; a missing, corrupt or misfitting file is one line naming it."""
        assert self.module is not None
        try:
            self.module.set_weights(binding, self.store.load(path))
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

    # -- epoch ends -----------------------------------------------------------------------
    def on_epoch_end(self, log_dir: str, epoch: int) -> str | None:
        """Rank 0 writes the payoff heatmap; returns its path (``None`` on other ranks or with ``heatmap: false``)."""
        if self._rank() != 0 or not self.config.heatmap or self.matchmaker is None or self.solo:
            return None
        path = os.path.join(log_dir, "league", f"payoff_epoch{epoch}.png")
        payoff = self.manager.payoff
        assert isinstance(payoff, BattleSharedPayoff)
        written = write_payoff_heatmap(payoff, [p.player_id for p in self.manager.players], path)
        rank_zero_info(f"lightmarl: league payoff heatmap {written}")
        return written

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


def write_payoff_heatmap(payoff: BattleSharedPayoff, players: list[str], path: str, max_players: int = 12) -> str:
    """A PNG of the (decayed) payoff between ``players``: the active ones and the newest snapshots.

    Drawn by `plot_score_heatmap`; games are the decayed
    counts, rounded. Returns the path.
    """
    shown = players[-max_players:]
    if len(players) > max_players:  # active players come first: keep a few of them beside the newest snapshots
        active = players[: max_players // 3]
        shown = active + players[-(max_players - len(active)) :]
    score, decayed = payoff.table(shown)
    games = np.rint(decayed).astype(np.int64)
    score[games == 0] = np.nan  # a pair below half a (decayed) game shows as unplayed
    return str(plot_score_heatmap(shown, score, games, path, title="league payoff (decayed)"))
