"""The LightningModule that runs a population: collect, learn, evaluate."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, cast

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from lightmarl.algorithms import PPO, Algorithm, IndependentMARLTrainer, MARLTrainer
from lightmarl.algorithms.marl_trainer import MARLTrainerFactory
from lightmarl.data.collector import RolloutCollector, StepHook
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
from lightmarl.envs.transforms import (
    load_transforms_state_dict,
    transformed_spec,
    transforms_state_dict,
)
from lightmarl.errors import ConfigError
from lightmarl.evaluation.scenarios import EvaluationConfig
from lightmarl.evaluation.validation import check_validation, play_validation
from lightmarl.policies.base import Policy
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.registry import CHECKPOINT_KEY, PolicyRegistry
from lightmarl.policies.shared_modules import SharedModules
from lightmarl.population import BindingTable, PerEnvAgentBindingMap, PolicyBindingConfig
from lightmarl.population.shared import SharedModuleConfig
from lightmarl.training.budget import FrameBudget
from lightmarl.training.league import CHECKPOINT_KEY as LEAGUE_CHECKPOINT_KEY
from lightmarl.training.league import LeagueConfig, LeagueTraining
from lightmarl.training.resume import CHECKPOINT_KEY as RESUME_CHECKPOINT_KEY
from lightmarl.training.resume import RunResume, seed_rank_streams
from lightmarl.training.rollouts import tick_loader
from lightmarl.training.stepper import LightningStepper, assert_ranks_in_sync
from lightmarl.training.storage import check_run_directories, use_atomic_checkpoints
from lightmarl.trust import recipe_class_paths


class MARLModule(LightningModule):
    """A population of bindings acting in vectorized PettingZoo envs, trained with manual optimization.

    Each training batch is one rollout of ``env.num_envs x rollout_steps`` env steps per
    process; ``training_step`` hands it to the MARLTrainer, whose UnitTrainers (one per
    trainable binding) take their own optimizer steps. ``validate`` / ``test`` play
    evaluation episodes and report metrics per binding.

    Args:
        env: the env and how many copies each process steps: a PettingZoo env (``env_fn``, no
            ``class_path``) or another [`EnvConfig`][lightmarl.envs.config.EnvConfig] by ``class_path``
            (e.g. ``lightmarl.envs.vmas.VmasEnvConfig``), with optional ``transforms``.
        policy_bindings: the population (default: one trainable ``main`` binding with
            ``lightmarl.policies.MLPActorCritic``).
        agent_binding_map: binding id per agent (default: every agent -> the first binding), or
            ``{default: [...], per_env: {env_index: [...]}}`` to override it in some env copies.
        policy_mapping_fn: import path of ``fn(agent_name) -> binding_id``, instead of
            ``agent_binding_map``.
        loss_profiles: profile name -> losses that may use its rows (default: one profile
            ``default`` allowing every loss).
        algorithm: learning algorithm of every trainable binding (default: ``PPO()``).
        algorithms: per-binding overrides of ``algorithm`` (binding id -> algorithm), e.g. two
            co-trained bindings with different learning rates or update schedules.
        rollout_steps: env steps per env copy per training batch.
        max_frames: training budget in env steps summed over env copies and processes.
        iterations_per_epoch: training batches per Lightning epoch (checkpoints and
            validation run at epoch ends).
        evaluation: the recipe's ``evaluation:`` section
            ([`EvaluationConfig`][lightmarl.evaluation.scenarios.EvaluationConfig]; ``lightmarl``
            commands pass it): its ``validation`` block is what ``validation_step`` / ``test_step``
            play, its scenarios what ``lightmarl evaluate`` and periodic evaluation play.
        seed: base seed of the training env copies (copy ``i`` of rank ``r``: ``seed + num_envs * r + i``)
            and of each rank's action sampling. Unset (``null``), the ``lightmarl`` commands pass the
            run's ``seed_everything``; in Python it is then 0 (``seed_everything`` does not reach it).
        stats_window: training episodes per binding in the running episode statistics.
        cpu_threads: torch intra-op threads per process (``None``: torch's default). Small
            policies step fastest with 1; more threads spin-wait on a busy machine.
        shared_modules: module name -> ``{class_path, init_args, shared_between, lr}``: one
            network object handed to several bindings' policies (e.g. a shared encoder or
            centralized value function), stepped once per iteration on the gradient all its
            users' losses summed; see `lightmarl.population.shared`.
        marl_trainer: the MARLTrainer that coordinates the UnitTrainers:
            ``{class_path: lightmarl.algorithms.IndependentMARLTrainer}`` (the default) or a
            subclass of [`MARLTrainer`][lightmarl.algorithms.marl_trainer.MARLTrainer], with its own knobs in
            ``init_args``; built in ``setup`` with ``(table, policies, algorithms, shared)``.
        league: league training (`lightmarl.training.league`): roles bound to trainable
            bindings, seats, opponent slots, snapshot rules; the league then chooses who plays
            whom per env copy and episode (``agent_binding_map`` is the league's: leave it unset).
        checkpoint_replay: keep the off-policy learners' replay buffers in checkpoints (per process),
            so that ``--ckpt_path last`` resumes exactly (`lightmarl.training.resume`); ``false``
            makes checkpoints smaller and a resumed learner refills its buffer from scratch.
    """

    def __init__(
        self,
        env: PettingZooEnvConfig | EnvConfig | None = None,
        policy_bindings: list[PolicyBindingConfig] | None = None,
        agent_binding_map: list[str] | PerEnvAgentBindingMap | None = None,
        policy_mapping_fn: str | None = None,
        loss_profiles: dict[str, list[str]] | None = None,
        algorithm: Algorithm | None = None,
        algorithms: dict[str, Algorithm] | None = None,
        rollout_steps: int = 25,
        max_frames: int = 200_000,
        iterations_per_epoch: int = 10,
        evaluation: EvaluationConfig | None = None,
        seed: int | None = None,
        stats_window: int = 100,
        cpu_threads: int | None = 1,
        shared_modules: dict[str, SharedModuleConfig] | None = None,
        marl_trainer: MARLTrainerFactory = IndependentMARLTrainer,
        league: LeagueConfig | None = None,
        checkpoint_replay: bool = True,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        if cpu_threads is not None and (
            isinstance(cpu_threads, bool) or not isinstance(cpu_threads, int) or cpu_threads < 1
        ):
            raise ValueError(
                f"model.cpu_threads: expected a positive integer or null (the default), got {cpu_threads!r}"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"model.seed: expected an integer >= 0 or null, got {seed!r}")
        if policy_bindings is not None and len(policy_bindings) == 0:
            # An empty list would quietly become the default binding: say so instead.
            raise ValueError(
                "model.policy_bindings: the list is empty; list at least one binding, or leave policy_bindings "
                "unset for the default (one trainable 'main' binding of lightmarl.policies.MLPActorCritic)"
            )
        self.env_config = env or PettingZooEnvConfig()
        self.algorithm = algorithm or PPO()
        self.algorithms = dict(algorithms or {})
        self.rollout_steps = rollout_steps
        self.max_frames = max_frames
        self.iterations_per_epoch = iterations_per_epoch
        _ = self.budget  # a bad number fails now, naming its field
        #: the one evaluation configuration: validation episodes and the evaluation scenarios.
        self.evaluation = evaluation if evaluation is not None else EvaluationConfig()
        self.seed = 0 if seed is None else seed
        self.stats_window = stats_window
        self.cpu_threads = cpu_threads

        # Everything below validates the recipe before any training starts.
        # The env's own spec too: exports rebuild the transforms' inputs from it (EnvConfig.spec() is the same chain).
        self.env_base_spec = self.env_config.base_spec()
        self.env_spec = transformed_spec(self.env_base_spec, self.env_config.transforms)
        check_validation(self.evaluation.validation, self.env_config)  # e.g. a video of an env that draws nothing
        # League: its opponent slot bindings join the population; it owns the agent binding map.
        self.league = LeagueTraining(league, self.env_spec, policy_bindings) if league is not None else None
        if self.league is not None:
            if agent_binding_map is not None or policy_mapping_fn is not None:
                raise ValueError(
                    "model.agent_binding_map / policy_mapping_fn: a league seats the agents; leave them unset"
                )
            policy_bindings, agent_binding_map = self.league.policy_bindings, self.league.eval_map
        self.table = BindingTable(
            policy_bindings,
            self.env_spec,
            agent_binding_map,
            loss_profiles,
            policy_mapping_fn=policy_mapping_fn,
            num_envs=self.env_config.num_envs,
        )
        if self.league is not None:
            self.league.reserve(self.table)
        for binding_id in self.algorithms:
            if binding_id not in self.table.index or not self.table.binding(binding_id).trainable:
                raise ValueError(
                    f"model.algorithms: {binding_id!r} is not a trainable binding; "
                    f"trainable bindings are {self.table.trainable_ids}"
                )
        self._reserve_idle_teachers()
        self.shared = SharedModules(shared_modules, self.table, self.env_spec)
        # Loaded policies see inputs as in their own runs (env transforms); a policy_uri file may name the
        # classes this recipe names, and lightmarl's own (lightmarl.trust).
        registry = PolicyRegistry(
            self.env_config.transforms, allowed=recipe_class_paths(self.table.bindings, shared_modules)
        )
        policies = {
            b: registry.get(
                self.table.binding(b),
                self.env_spec.groups[self.table.group_of_binding[b]],
                injected=self.shared.injected(b),
            )
            for b in self.table.active_ids
        }
        for binding in self.table.bindings:
            if not binding.trainable and binding.id in policies:
                policies[binding.id].requires_grad_(False)
        self.shared.restore_trainability()  # a module a trainable binding uses keeps learning
        self.population = MultiAgentPolicy(policies, self.table)
        self.marl_trainer_factory = marl_trainer
        self.marl_trainer: MARLTrainer | None = None
        self._optimizer_index: dict[str, int] = {}  # optimizer name (binding id) -> position in configure_optimizers
        self._collector: RolloutCollector | None = None
        self.frames = 0
        self.iterations = 0
        self.checkpoint_replay = checkpoint_replay
        self._resume = RunResume(checkpoint_replay)  # per-process state in checkpoints, put back on resume

    @property
    def policies(self) -> nn.ModuleDict:
        return self.population.policies

    def get_weights(self, binding_id: str) -> dict[str, torch.Tensor]:
        """A CPU copy of one binding's policy weights (what [`WeightExchange`][lightmarl.training.weight_exchange.WeightExchange] publishes)."""
        return {k: v.detach().cpu().clone() for k, v in self._policy_of(binding_id).state_dict().items()}

    def set_weights(self, binding_id: str, weights: dict[str, torch.Tensor]) -> None:
        """Load weights into one binding's policy (another run's, from [`WeightExchange`][lightmarl.training.weight_exchange.WeightExchange]); shapes must match."""
        policy = self._policy_of(binding_id)
        try:
            policy.load_state_dict(weights)
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"set_weights: the weights do not fit binding {binding_id!r}: {err}") from None

    def describe_binding(self, binding_id: str) -> dict[str, Any]:
        """How to rebuild one binding's policy: class path, keyword arguments, shared modules, group
        and whether it trains (plain data: checkpoints and league snapshot files carry it)."""
        return {
            **cast(Policy, self._policy_of(binding_id)).origin,
            "group": self.table.group_of_binding.get(binding_id),
            "trainable": self.table.binding(binding_id).trainable,
        }

    def snapshot_description(self, binding_id: str) -> dict[str, Any]:
        """What a league snapshot file of ``binding_id`` carries besides its weights: the policy's class,
        kwargs and group spec, the shared modules' specs, the env and its transforms (statistics as now)."""
        origin = self.describe_binding(binding_id)
        group = self.env_spec.groups[origin.pop("group")]
        origin.pop("trainable", None)
        return {
            "policy": {**origin, "group_spec": dataclasses.asdict(group)},
            "shared_modules": self.shared.describe(),
            "transforms": [{**t.describe(), "state": t.state_dict()} for t in self.env_config.transforms],
            "env": {
                **self.env_config.describe(),
                "possible_agents": list(self.env_spec.possible_agents),
                "turn_based": self.env_spec.turn_based,
                "base_groups": {n: dataclasses.asdict(g) for n, g in self.env_base_spec.groups.items()},
            },
        }

    def _policy_of(self, binding_id: str) -> nn.Module:
        if binding_id not in self.policies:
            raise KeyError(f"no policy for binding {binding_id!r}; bindings with policies are {list(self.policies)}")
        return self.policies[binding_id]

    # -- budget ---------------------------------------------------------------------------------
    @property
    def budget(self) -> FrameBudget:
        """The frame budget as the recipe sets it now (`lightmarl.training.budget`)."""
        return FrameBudget(self.max_frames, self.env_config.num_envs, self.rollout_steps, self.iterations_per_epoch)

    @property
    def world_size(self) -> int:
        return self._trainer.world_size if self._trainer is not None else 1

    @property
    def frames_per_iteration(self) -> int:
        """Env steps per training batch, summed over processes."""
        return self.budget.frames_per_iteration(self.world_size)

    @property
    def remaining_iterations(self) -> int:
        """Iterations left until ``max_frames``, counted from the frames done (a resumed run's come from its checkpoint)."""
        return self.budget.remaining_iterations(self.frames, self.world_size)

    @property
    def total_iterations(self) -> int:
        """Iterations of the whole run: those done and those left."""
        return self.iterations + self.remaining_iterations

    def algorithm_of(self, binding_id: str) -> Algorithm:
        return self.algorithms.get(binding_id, self.algorithm)

    def _reserve_idle_teachers(self) -> None:
        """A kickstarting teacher that plays no agent still gets a policy, built for its student's group:
        it reads the student's rows (a ``clone`` teacher must play, its rows are what teaches)."""
        for student in self.table.trainable_ids:
            distillation = getattr(self.algorithm_of(student), "distillation", None)
            group = self.table.group_of_binding.get(student)
            if distillation is None or group is None or distillation.mode != "kl":
                continue
            teacher = distillation.teacher
            if teacher in self.table.index and teacher not in self.table.group_of_binding:
                self.table.reserve({teacher: group})

    def setup(self, stage: str) -> None:
        if self.cpu_threads is not None:
            torch.set_num_threads(self.cpu_threads)
        if stage != "fit":
            return
        if self.marl_trainer is not None:
            return
        if self._trainer is not None:
            # Before any env exists: an unwritable run directory fails now, and checkpoints are written atomically.
            check_run_directories(self._trainer)
            use_atomic_checkpoints(self._trainer)
        # Every binding is checked against its algorithm's policy contract and the loss profiles
        # against the trainers' loss names here, before any env exists.
        try:
            self.table.require_trainable()
            algorithms = {b: self.algorithm_of(b) for b in self.table.trainable_ids}
            policies = {b: cast(Policy, p) for b, p in self.policies.items()}
            for binding_id, algorithm in algorithms.items():
                algorithm.check_rollout(binding_id, self.env_config.num_envs, self.rollout_steps)
            marl_trainer = self.marl_trainer_factory(self.table, policies, algorithms, self.shared)
            marl_trainer.check_loss_profiles()
        except ValueError as err:
            raise ConfigError(str(err)) from err
        self.marl_trainer = marl_trainer
        if self.league is not None:
            self.league.setup(self)
        rank_zero_info(
            "lightmarl: "
            + ", ".join(f"binding {b!r} learns with {u.flavour}" for b, u in marl_trainer.unit_trainers.items())
            + f"; {self.total_iterations} iterations of {self.frames_per_iteration} frames"
        )

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        assert self.marl_trainer is not None, "configure_optimizers runs after setup('fit')"
        optimizers = self.marl_trainer.make_optimizers()
        self._optimizer_index = {name: i for i, name in enumerate(optimizers)}
        return list(optimizers.values())

    def named_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The MARLTrainer's optimizers by name, as Lightning wraps them (``LightningOptimizer`` steps like a torch one)."""
        optimizers = self.optimizers()
        listed = optimizers if isinstance(optimizers, list) else [optimizers]
        return {name: cast(torch.optim.Optimizer, listed[i]) for name, i in self._optimizer_index.items()}

    def _place_bindings(self) -> None:
        # Trainable policies live with their optimizer on the module's device; frozen and
        # scripted bindings may act elsewhere (e.g. a large frozen NPC on the CPU).
        for binding_id, device in self.population.binding_devices.items():
            if self.table.binding(binding_id).trainable and device != self.device:
                raise ConfigError(
                    f"policy_bindings: trainable binding {binding_id!r} asks for device {str(device)!r} but the "
                    f"trainer runs on {str(self.device)!r}; only frozen bindings may act on a device of their own"
                )
        self.population.place_bindings()

    def on_validation_start(self) -> None:
        self._place_bindings()
        if self.league is not None:
            self.league.evaluation_map(True)

    def on_validation_end(self) -> None:
        if self.league is not None:
            self.league.evaluation_map(False)

    def on_test_start(self) -> None:
        self._place_bindings()

    def on_fit_start(self) -> None:
        assert self.marl_trainer is not None
        self._place_bindings()
        self.marl_trainer.to(self.device)
        rank, num_envs = self.global_rank, self.env_config.num_envs
        seed_rank_streams(self.seed, rank, dict(self.policies.items()))  # each rank samples its own actions
        # Per-rank env seeds: seed + num_envs * rank + i.
        env = self.env_config.make_vector(seed=self.seed + num_envs * rank)
        self._collector = RolloutCollector(
            env,
            self.population,
            self.rollout_steps,
            stats_window=self.stats_window,
            device=self.device,
            on_step=self.step_hook(),
        )
        self._resume.restore_collector(self._collector, self.league)  # a resumed run: env copies back mid-episode
        if self.league is not None:
            self.league.start(self._collector)

    def step_hook(self) -> StepHook | None:
        """What the collector calls after every env step (`RolloutCollector`'s
        ``on_step``): the league's seating of the copies whose episode ended, where there is one."""
        return self.league.on_step if self.league is not None else None

    def on_train_start(self) -> None:
        self._resume.restore_rng(
            self.device, dict(self.policies.items())
        )  # last: nothing may draw from the RNG streams after them
        if self.frames >= self.max_frames:
            # Resumed from a checkpoint of a finished run: no iteration would run, so no training
            # step would ever stop the (max_epochs: -1) fit loop, which would spin on empty epochs.
            rank_zero_info(
                f"lightmarl: the run had already reached model.max_frames ({self.frames} frames); nothing to train "
                "(raise model.max_frames to continue it)"
            )
            self.trainer.should_stop = True
            return
        self.budget.show_in_progress_bar(self.trainer, self.remaining_iterations)

    def on_fit_end(self) -> None:
        if self._collector is not None:
            self._collector.close()
            self._collector = None

    def on_exception(self, exception: BaseException) -> None:
        self.on_fit_end()

    def on_train_epoch_end(self) -> None:
        assert_ranks_in_sync(self)  # DDP only: raises if ranks' parameters or iterations differ
        if self.league is not None:
            self.league.on_epoch_end(self.trainer.log_dir or self.trainer.default_root_dir, self.current_epoch)

    # -- data -----------------------------------------------------------------------------
    def train_dataloader(self):
        return tick_loader(self.iterations_per_epoch, lambda: self.remaining_iterations)

    def val_dataloader(self):
        return tick_loader()

    def test_dataloader(self):
        return tick_loader()

    # -- training -------------------------------------------------------------------------
    def training_step(self, batch: int, batch_idx: int) -> None:
        assert self.marl_trainer is not None and self._collector is not None
        started = time.perf_counter()
        self.population.eval()
        experience = self._collector.collect()
        collected = time.perf_counter()
        self.population.train()
        optimizers = self.named_optimizers()
        self.marl_trainer.set_progress(optimizers, self.iterations / self.total_iterations)
        metrics = self.marl_trainer.update(experience, optimizers, LightningStepper(self), iteration=self.iterations)
        self.iterations += 1
        self.frames += self.frames_per_iteration
        league_logs = self.league.after_iteration(experience) if self.league is not None else {}

        logs: dict[str, float] = {}
        for binding, values in metrics.items():
            for name, value in values.items():
                logs[f"train/{binding}/{name}"] = value
        for binding, stats in self._collector.episode_summary().items():
            for name, value in stats.items():
                logs[f"collect/{binding}/{name}"] = value
        now = time.perf_counter()
        logs["time/fps"] = self.frames_per_iteration / max(now - started, 1e-9)
        logs["time/collect_s"] = collected - started
        logs["time/update_s"] = now - collected
        logs["counters/frames"] = float(self.frames)
        logs["counters/iterations"] = float(self.iterations)
        logs.update(league_logs)
        self.log_dict(logs, on_step=True, on_epoch=False, batch_size=1)
        progress = {"fps": logs["time/fps"]}
        first = self.table.trainable_ids[0]
        if f"collect/{first}/episode_return" in logs:
            progress["return"] = logs[f"collect/{first}/episode_return"]
        self.log_dict(progress, prog_bar=True, logger=False, on_step=True, on_epoch=False, batch_size=1)
        if self.frames >= self.max_frames:
            self.trainer.should_stop = True

    # -- evaluation -----------------------------------------------------------------------
    def _validate(self, prefix: str) -> None:
        # trainer.log_dir is a collective under DDP (it broadcasts rank 0's): every rank asks.
        video = None
        if self.evaluation.validation.video_episodes:
            video = os.path.join(self.trainer.log_dir or ".", "videos", f"{prefix}_iter{self.iterations}.gif")
        result = play_validation(
            self.population,
            self.env_config,
            self.env_spec,
            self.evaluation.validation,
            prefix=prefix,
            rank=self.global_rank,
            device=self.device,
            video_path=video,
        )
        self.log_dict(result.logs, on_step=False, on_epoch=True, sync_dist=True, batch_size=1)
        if result.video is not None:
            rank_zero_info(f"lightmarl: evaluation video {result.video}")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._validate("eval")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._validate("test")

    # -- checkpoints ----------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = {
            "frames": self.frames,
            "iterations": self.iterations,
            # What an iteration was made of: a resume with another shape is checked against the budget.
            "iteration_shape": self.budget.iteration_shape(self.world_size),
            "env": self.env_config.describe(),
            # Running statistics of the env's transforms (e.g. ObservationNorm), used frozen by `validate`.
            "env_transforms": transforms_state_dict(self.env_config.transforms),
            # ... and how to rebuild them, so that an export or `load_population` applies them alone.
            "env_transforms_config": [t.describe() for t in self.env_config.transforms],
            "possible_agents": list(self.env_spec.possible_agents),
            "base_groups": {name: dataclasses.asdict(group) for name, group in self.env_base_spec.groups.items()},
            "turn_based": self.env_spec.turn_based,
            "agent_binding_map": {
                "default": list(self.table.agent_binding_map),
                "per_env": {str(k): list(v) for k, v in self.table.per_env_maps.items()},
            },
            # With the bindings' origins, enough to rebuild the policies alone (PolicyDict.load).
            "groups": {name: dataclasses.asdict(group) for name, group in self.env_spec.groups.items()},
            "shared_modules": self.shared.describe(),
            # Self-describing: `policy_uri: this.ckpt#binding` rebuilds a policy from here alone.
            "bindings": {binding_id: self.describe_binding(binding_id) for binding_id in self.policies},
            "trainers": self.marl_trainer.state_dict() if self.marl_trainer is not None else {},
        }
        if self.league is not None and self.league.matchmaker is not None:
            checkpoint[LEAGUE_CHECKPOINT_KEY] = self.league.state_dict()
        if self._collector is not None:  # fit: every process's RNG streams, env copies and replay buffers
            checkpoint[RESUME_CHECKPOINT_KEY] = self._resume.save(
                self._collector,
                self.marl_trainer,
                self.league,
                self.device,
                self.trainer.strategy,
                policies=dict(self.policies.items()),
            )

    def check_checkpoint_fits(self, state_dict: Any, *, field: str) -> None:
        """Raise a [`ConfigError`][lightmarl.errors.ConfigError] naming what differs when ``state_dict`` cannot load into this module.

        (Lightning's strict load raises a multi-line ``RuntimeError``, or TensorDict's "key sets don't match".)
        """
        own = self.state_dict()
        if not isinstance(state_dict, dict):
            raise ConfigError(f"{field}: the checkpoint's state_dict is not a table of tensors")
        problems = []
        missing = sorted(set(own) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(own))
        shapes = [
            f"{key} is {list(state_dict[key].shape)} in the checkpoint, {list(value.shape)} in the recipe"
            for key, value in own.items()
            if isinstance(value, torch.Tensor)
            and isinstance(state_dict.get(key), torch.Tensor)
            and state_dict[key].shape != value.shape
        ]
        for label, items in (("shapes differ", shapes), ("missing", missing), ("unexpected", unexpected)):
            if items:
                more = f" and {len(items) - 2} more" if len(items) > 2 else ""
                problems.append(f"{label}: {'; '.join(items[:2])}{more}")
        if problems:
            raise ConfigError(
                f"{field}: the checkpoint does not fit this recipe's population (another env, policy class or "
                f"policy_kwargs?): {'; '.join(problems)}"
            )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        try:
            self._load_checkpoint_state(checkpoint)
        except ConfigError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
            # Another recipe's or a damaged checkpoint: one line naming what does not fit, not a traceback.
            detail = err if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"
            raise ConfigError(f"--ckpt_path: the checkpoint's state does not fit this run ({detail})") from err

    def _load_checkpoint_state(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get(CHECKPOINT_KEY, {})
        self.frames = int(state.get("frames", 0))
        self.iterations = int(state.get("iterations", 0))
        if self.marl_trainer is not None:  # fit: the budget left, in the frames an iteration now takes
            self.budget.check_resume(
                state.get("iteration_shape"), frames=self.frames, iterations=self.iterations, world_size=self.world_size
            )
        load_transforms_state_dict(self.env_config.transforms, state.get("env_transforms", []))
        # `fit --ckpt_path` restores after setup("fit") built the trainers (and their target networks
        # from the still random policy): their saved state replaces that now. `validate` has no trainers.
        if self.marl_trainer is not None:
            self.marl_trainer.load_state_dict(state.get("trainers", {}))
        if self.league is not None and self.league.matchmaker is not None and LEAGUE_CHECKPOINT_KEY in checkpoint:
            self.league.load_state_dict(checkpoint[LEAGUE_CHECKPOINT_KEY])
        if self.marl_trainer is not None:  # fit: this process's part, put back as the run starts
            self._resume.load(
                checkpoint.get(RESUME_CHECKPOINT_KEY), self.global_rank, self.trainer.world_size, self.marl_trainer
            )
