"""League training inside ``lightmarl fit``: the recipe's ``league:`` section and the Lightning glue of its run.

[`LeagueConfig`][lightmarl.training.league.LeagueConfig] is the recipe section;
[`LeagueTraining`][lightmarl.training.league.LeagueTraining] is what
[`MARLModule`][lightmarl.training.module.MARLModule] calls at its hooks. The league itself (seats,
opponent slots, seatings, the rank-0 protocol between processes, metrics, its state) is
[`LeagueRun`][lightmarl.league.run.LeagueRun]; this module supplies what it needs of the run:
the bindings' weights, an optimizer reset, the Lightning strategy as its exchange between
processes, and the parts that need more than the league: average networks (distilled by
`lightmarl.training.average_network`), the exact meta-game of OpenSpiel games
(``meta_game: exact``, `lightmarl.evaluation.exploitability`) and the payoff heatmap PNG.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.utilities import rank_zero_info

from lightmarl.envs.spec import EnvSpec
from lightmarl.errors import ConfigError
from lightmarl.evaluation.plots import plot_score_heatmap
from lightmarl.league.run import SLOT_PREFIX, LeagueRun, LeagueSettings
from lightmarl.population import PolicyBindingConfig
from lightmarl.training import collectives
from lightmarl.training.average_network import AverageNetworkConfig, distill_mixture
from lightmarl.training.exploitability import SnapshotTables, exact_meta_payoffs

if TYPE_CHECKING:
    from lightmarl.algorithms.marl_trainer import MARLTrainer
    from lightmarl.envs.config import EnvConfig
    from lightmarl.population import BindingTable

__all__ = ["CHECKPOINT_KEY", "SLOT_PREFIX", "LeagueConfig", "LeagueHost", "LeagueTraining", "StrategyExchange"]

T = TypeVar("T")

#: checkpoint entry of the league's state.
CHECKPOINT_KEY = "lightmarl_league"


class LeagueHost(Protocol):
    """What the league needs of the [`MARLModule`][lightmarl.training.module.MARLModule] that runs it."""

    env_config: EnvConfig
    table: BindingTable

    @property
    def trainer(self) -> Any: ...

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


class StrategyExchange:
    """The league's [`Exchange`][lightmarl.league.run.Exchange] through the run's Lightning strategy (`collectives`)."""

    def __init__(self, strategy: Strategy | None) -> None:
        self.strategy = strategy

    def rank(self) -> int:
        return collectives.rank(self.strategy)

    def world_size(self) -> int:
        return collectives.world_size(self.strategy)

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return collectives.all_gather(self.strategy, tensor)

    def broadcast(self, value: T) -> T:
        return collectives.broadcast(self.strategy, value)


@dataclass
class LeagueConfig(LeagueSettings):
    """A league of players over a two-seat game (AlphaStar), or of solo players (``payoff.kind: solo``; see ``docs/league.md``).

    The fields of [`LeagueSettings`][lightmarl.league.run.LeagueSettings], and:

    Attributes:
        average_networks: the shown policy of a player as one network
            (`lightmarl.training.average_network`): a frozen binding ``<player>_average``
            into which the player's shown mixture is distilled every ``every_n_iterations``
            iterations and after the last; checkpoints and exports carry it like any binding.
    """

    average_networks: list[AverageNetworkConfig] = field(default_factory=list)


class LeagueTraining(LeagueRun):
    """The league of one training process, run by a [`MARLModule`][lightmarl.training.module.MARLModule].

    Takes `LeagueRun`'s arguments, with the recipe's whole ``league:`` section as ``config``.
    """

    def __init__(self, config: LeagueConfig, env_spec: EnvSpec, policy_bindings: list[PolicyBindingConfig] | None):
        super().__init__(config, env_spec, policy_bindings)
        self.config: LeagueConfig = config
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
            if average.binding_id in self.by_id or average.binding_id in self.slot_ids:
                raise ValueError(
                    f"league.average_networks: binding id {average.binding_id!r} is taken; name another (binding: ...)"
                )
            self.averages[average.player] = average
        self.policy_bindings += [
            dataclasses.replace(self.by_id[a.player], id=a.binding_id, trainable=False, policy_uri=None)
            for a in self.averages.values()
        ]
        #: average network binding -> the members (snapshot file -> policy) it was last distilled from
        self._member_policies: dict[str, Any] = {}
        #: ``meta_game: exact``: the snapshots' OpenSpiel tabular policies (built in setup)
        self.exact_tables: SnapshotTables | None = None
        self.module: LeagueHost | None = None

    # -- what the league needs of the run -------------------------------------------------
    def _host(self) -> LeagueHost:
        assert self.module is not None, "the league is built in setup('fit')"
        return self.module

    @property
    def table(self) -> BindingTable:
        return self._host().table

    @property
    def num_envs(self) -> int:
        return self._host().env_config.num_envs

    def get_weights(self, binding: str) -> dict[str, torch.Tensor]:
        return self._host().get_weights(binding)

    def set_weights(self, binding: str, weights: Mapping[str, torch.Tensor]) -> None:
        self._host().set_weights(binding, dict(weights))

    def describe(self, binding: str) -> dict[str, Any]:
        return self._host().snapshot_description(binding)

    def restart(self, binding: str) -> None:
        host = self._host()
        optimizer = host.named_optimizers().get(binding)
        if optimizer is not None:
            getattr(optimizer, "optimizer", optimizer).state.clear()
        assert host.marl_trainer is not None
        host.marl_trainer.unit_trainers[binding].restart()

    def population(
        self, agent_binding_map: Any, policy_mapping_fn: str | None
    ) -> tuple[list[PolicyBindingConfig], Any]:
        """The bindings of the run's population (players, opponent slots, average networks) and the agent binding
        map the league starts from, in place of a recipe's own (``ValueError`` where the recipe sets one)."""
        if agent_binding_map is not None or policy_mapping_fn is not None:
            raise ValueError("model.agent_binding_map / policy_mapping_fn: a league seats the agents; leave them unset")
        return self.policy_bindings, self.eval_map

    def reserve(self, table: BindingTable) -> None:
        """Give every player, slot and average network binding a policy from the start (they enter the map later)."""
        super().reserve(table)
        table.reserve({a.binding_id: self.group for a in self.averages.values()})

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
        if self.config.meta_game == "exact":
            try:
                self.exact_tables = SnapshotTables.of(
                    module.env_config, module.policies[self.player_binding_ids[0]], self.store.load
                )
            except ValueError as err:  # not an OpenSpiel two-player zero-sum game
                raise ConfigError(f"league.meta_game: exact needs an OpenSpiel game: {err}") from None
            self.meta_payoffs = exact_meta_payoffs(self.exact_tables)
        self.build(StrategyExchange(trainer.strategy), os.path.join(trainer.default_root_dir, "league"), module.seed)

    # -- between iterations ---------------------------------------------------------------
    def after_iteration(self, experience: Any) -> dict[str, float]:
        """The league's iteration (`LeagueRun.after_iteration`), then the average networks that are due."""
        metrics = super().after_iteration(experience)
        host = self._host()
        for player_binding, average in self.averages.items():
            if host.iterations % average.every_n_iterations == 0 or host.iterations >= host.total_iterations:
                metrics.update(self.distill_average(player_binding))
        return metrics

    def distill_average(self, player: str) -> dict[str, float]:
        """Distil the shown policy of ``player`` (a binding) into its average network; ``league/<binding>/average_*`` metrics.

        Before the player's first snapshot (or for a role without a mixture) the shown policy is the
        live binding: its weights are copied.
        """
        host = self._host()
        average = self.averages[player]
        policies = host.policies
        shown = self.shown_policy(player)
        prefix = f"league/{player}"
        if shown is None:
            host.set_weights(average.binding_id, host.get_weights(player))
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
                host.env_config,
                self.seats,
                average,
                host.rollout_steps,
                seed=host.iterations,
            )
        finally:
            student.requires_grad_(False)
        return {
            f"{prefix}/average_kl": found["kl"],
            f"{prefix}/average_kl_before": found["kl_before"],
            f"{prefix}/average_members": float(len(shown)),
        }

    # -- epoch ends -----------------------------------------------------------------------
    def on_epoch_end(self, log_dir: str, epoch: int) -> str | None:
        """Rank 0 writes the payoff heatmap; returns its path (``None`` on other ranks or with ``heatmap: false``)."""
        if self.exchange.rank() != 0 or not self.config.heatmap:
            return None
        table = self.payoff_table()
        if table is None:
            return None
        shown, score, games = table
        path = os.path.join(log_dir, "league", f"payoff_epoch{epoch}.png")
        written = str(plot_score_heatmap(shown, score, games, path, title="league payoff (decayed)"))
        rank_zero_info(f"lightmarl: league payoff heatmap {written}")
        return written
