"""The LightningModule that runs a population: collect, learn, evaluate."""

from __future__ import annotations

import math
import os
import time
from typing import Any, cast

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from lightmarl import keys
from lightmarl.algorithms import PPO, Algorithm, IndependentMARLTrainer, MARLTrainer
from lightmarl.algorithms.marl_trainer import MARLTrainerFactory
from lightmarl.data.collector import RolloutCollector, StepHook
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
from lightmarl.envs.transforms import (
    transformed_spec,
)
from lightmarl.errors import ConfigError
from lightmarl.evaluation.episodes import WinRule, evaluate_episodes
from lightmarl.evaluation.suite import preserved_rng
from lightmarl.evaluation.video import check_renders, write_evaluation_video
from lightmarl.policies.base import Policy
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.policies.shared_modules import SharedModules
from lightmarl.population import BindingTable, PerEnvAgentBindingMap, PolicyBindingConfig
from lightmarl.population.shared import SharedModuleConfig
from lightmarl.training import checkpoint as checkpoints
from lightmarl.training.league import LeagueConfig, LeagueTraining
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
        eval_episodes: episodes per validation / test run.
        eval_num_envs: env copies played at once during evaluation (default: ``env.num_envs``).
        eval_seed: base seed of evaluation env copies (same start states every evaluation).
        eval_deterministic: evaluate the policies' mode actions instead of sampling. Bindings
            of continuous-action groups are then also played with sampled actions, on the same
            seeded episodes, logged with a ``_sampled`` suffix (``eval/<binding>/episode_return_sampled``).
        eval_winner: adds ``win_rate`` / ``draw_rate`` per binding: ``highest_return`` for
            head-to-head play (the binding with the strictly highest mean return wins),
            ``positive_return`` for games that pay a positive return for a win, zero for a draw and a
            negative one for a loss, or ``none``.
        eval_video_episodes: after each evaluation, rank 0 also plays this many episodes in one
            env copy built with ``render_mode="rgb_array"`` and writes them to
            ``<log_dir>/videos/<eval|test>_iter<iterations>.gif`` (0: no video); see
            `lightmarl.evaluation.video`.
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
        eval_episodes: int = 32,
        eval_num_envs: int | None = None,
        eval_seed: int = 10_000,
        eval_deterministic: bool = True,
        eval_winner: WinRule = "none",
        eval_video_episodes: int = 0,
        stats_window: int = 100,
        cpu_threads: int | None = 1,
        shared_modules: dict[str, SharedModuleConfig] | None = None,
        marl_trainer: MARLTrainerFactory = IndependentMARLTrainer,
        league: LeagueConfig | None = None,
        checkpoint_replay: bool = True,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        for name, value in (
            ("rollout_steps", rollout_steps),
            ("max_frames", max_frames),
            ("iterations_per_epoch", iterations_per_epoch),
            ("eval_episodes", eval_episodes),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"model.{name}: expected a positive integer, got {value!r}")
        for name, optional in (("eval_num_envs", eval_num_envs), ("cpu_threads", cpu_threads)):
            if optional is not None and (isinstance(optional, bool) or not isinstance(optional, int) or optional < 1):
                raise ValueError(f"model.{name}: expected a positive integer or null (the default), got {optional!r}")
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
        self.eval_episodes = eval_episodes
        self.eval_num_envs = eval_num_envs
        self.eval_seed = eval_seed
        self.eval_deterministic = eval_deterministic
        self.eval_winner = eval_winner
        if isinstance(eval_video_episodes, bool) or not isinstance(eval_video_episodes, int) or eval_video_episodes < 0:
            raise ValueError(f"model.eval_video_episodes: expected an integer >= 0, got {eval_video_episodes!r}")
        self.eval_video_episodes = eval_video_episodes
        self.stats_window = stats_window
        self.cpu_threads = cpu_threads

        # Everything below validates the recipe before any training starts.
        # The env's own spec too: exports rebuild the transforms' inputs from it (EnvConfig.spec() is the same chain).
        self.env_base_spec = self.env_config.base_spec()
        self.env_spec = transformed_spec(self.env_base_spec, self.env_config.transforms)
        if self.eval_video_episodes:
            check_renders(self.env_config)  # an env that cannot draw RGB frames fails here, not after an epoch
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
        for binding_id in self.table.trainable_ids:
            self.algorithm_of(binding_id).reserve_bindings(binding_id, self.table)
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
        if not isinstance(checkpoint_replay, bool):
            raise ValueError(f"model.checkpoint_replay: expected true or false, got {checkpoint_replay!r}")
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
        """How to rebuild one binding's policy (`lightmarl.training.checkpoint.describe_binding`)."""
        return checkpoints.describe_binding(self, binding_id)

    def snapshot_description(self, binding_id: str) -> dict[str, Any]:
        """What a league snapshot file of ``binding_id`` carries besides its weights
        (`lightmarl.training.checkpoint.snapshot_description`)."""
        return checkpoints.snapshot_description(self, binding_id)

    def _policy_of(self, binding_id: str) -> nn.Module:
        if binding_id not in self.policies:
            raise KeyError(f"no policy for binding {binding_id!r}; bindings with policies are {list(self.policies)}")
        return self.policies[binding_id]

    # -- set-up -------------------------------------------------------------------------------
    def _base_seed(self) -> int:
        return int(os.environ.get("PL_GLOBAL_SEED", 0))

    @property
    def frames_per_iteration(self) -> int:
        """Env steps per training batch, summed over processes."""
        world = self._trainer.world_size if self._trainer is not None else 1
        return self.env_config.num_envs * self.rollout_steps * world

    @property
    def remaining_iterations(self) -> int:
        """Iterations left until ``max_frames``, counted from the frames done (a resumed run's come from its checkpoint)."""
        return max(0, math.ceil((self.max_frames - self.frames) / self.frames_per_iteration))

    @property
    def total_iterations(self) -> int:
        """Iterations of the whole run: those done and those left."""
        return self.iterations + self.remaining_iterations

    def _iteration_shape(self) -> dict[str, int]:
        world = self._trainer.world_size if self._trainer is not None else 1
        return {
            "env.num_envs": self.env_config.num_envs,
            "model.rollout_steps": self.rollout_steps,
            "world size": world,
        }

    def _check_resumed_budget(self, state: dict[str, Any]) -> None:
        """A resume whose iterations take another number of frames continues to exactly ``max_frames`` or is refused.

        The budget counts frames: those done come from the checkpoint, so a resumed run with more env
        copies, a longer rollout or more processes neither trains past ``max_frames`` nor stops short
        of it, and says which it would have to do instead.
        """
        saved = state.get("iteration_shape")
        now = self._iteration_shape()
        fpi = self.frames_per_iteration
        if isinstance(saved, dict):
            changed = [f"{k} {saved[k]} -> {now[k]}" for k in now if k in saved and saved[k] != now[k]]
        elif self.iterations > 0 and self.frames != self.iterations * fpi:  # a checkpoint without the shape
            changed = [f"frames per iteration {self.frames // self.iterations} -> {fpi}"]
        else:
            changed = []
        left = self.max_frames - self.frames
        if not changed or left <= 0:
            return
        if left % fpi == 0:
            rank_zero_info(
                f"lightmarl: resuming with {', '.join(changed)}: {left // fpi} iterations of {fpi} frames "
                f"reach model.max_frames {self.max_frames} exactly"
            )
            return
        below, above = self.frames + left // fpi * fpi, self.frames + -(-left // fpi) * fpi
        options = " or ".join(str(n) for n in dict.fromkeys(n for n in (below, above) if n > self.frames))
        raise ConfigError(
            f"--ckpt_path: the run is resumed with {', '.join(changed)}; the {self.frames} frames done leave {left} "
            f"of model.max_frames {self.max_frames}, not a whole number of iterations of {fpi} frames. Resume "
            f"with the settings the checkpoint was written with, or set model.max_frames to {options}"
        )

    def algorithm_of(self, binding_id: str) -> Algorithm:
        """The algorithm that trains ``binding_id`` (its entry in ``model.algorithms``, else ``model.algorithm``)."""
        return self.algorithms.get(binding_id, self.algorithm)

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
        seed_rank_streams(self._base_seed(), rank, dict(self.policies.items()))  # each rank samples its own actions
        # Per-rank env seeds: seed + num_envs * rank + i.
        env = self.env_config.make_vector(seed=self._base_seed() + num_envs * rank)
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
        self._show_budget_in_progress_bar()

    def _show_budget_in_progress_bar(self) -> None:
        """Give the progress bar the frame budget's epochs and iterations instead of ``-2`` and ``--``.

        The frame budget, not an epoch count, ends training (``max_epochs: -1``) and the tick loader
        has no length, so Lightning's bar reads ``Epoch 3/-2 ... 60/--``. The epochs the budget
        still needs and ``iterations_per_epoch`` are what the run will do: stating them to the fit
        loop changes no stopping point (the last tick ends the last epoch either way). A resumed run
        keeps ``--`` for the iterations: with a known epoch length Lightning would warn that a
        manual-optimization run's step count does not fall on an epoch boundary.
        """
        loop = self.trainer.fit_loop
        if loop.max_epochs is None or loop.max_epochs < 0:
            epochs_left = math.ceil((self.total_iterations - self.iterations) / self.iterations_per_epoch)
            loop.max_epochs = self.trainer.current_epoch + epochs_left
        if loop.max_batches == float("inf") and self.trainer.ckpt_path is None:
            loop.max_batches = self.iterations_per_epoch

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
    def _evaluate(self, prefix: str) -> None:
        self.population.eval()
        rank = self.global_rank
        seed = self.eval_seed + 1_000 * rank

        def play(deterministic: bool) -> dict[str, dict[str, float]]:
            # Sampled actions from a stream of their own: the same draws in every evaluation, in fit
            # and in validate, and training's random streams untouched (restored by preserved_rng).
            torch.manual_seed(seed)
            return evaluate_episodes(
                self.population,
                self.env_config,
                num_episodes=self.eval_episodes,
                seed=seed,
                num_envs=self.eval_num_envs,
                deterministic=deterministic,
                winner=self.eval_winner,
                device=self.device,
            )

        with preserved_rng([self.device]):
            results = play(self.eval_deterministic)
            for stats in results.values():
                # Every process logs the same keys (sync_dist): a field no episode reported is NaN.
                for name in self.env_spec.info_fields:
                    stats.setdefault(keys.info_key(name), float("nan"))
            logs = {f"{prefix}/{b}/{name}": value for b, stats in results.items() for name, value in stats.items()}
            continuous = self._continuous_bindings()
            if self.eval_deterministic and continuous:
                # A continuous policy's mean action can look good while the sampled play it trains on
                # falls over (or the reverse): report both, on the same seeded episodes.
                sampled = play(deterministic=False)
                for b in continuous:
                    for name, value in sampled.get(b, {}).items():
                        logs[f"{prefix}/{b}/{name}_sampled"] = value
            video = None
            if self.eval_video_episodes and rank == 0:
                torch.manual_seed(seed)
                video = write_evaluation_video(
                    self.population,
                    self.env_config,
                    os.path.join(self.trainer.log_dir or ".", "videos", f"{prefix}_iter{self.iterations}.gif"),
                    num_episodes=self.eval_video_episodes,
                    seed=self.eval_seed,
                    deterministic=self.eval_deterministic,
                    device=self.device,
                )
        self.log_dict(logs, on_step=False, on_epoch=True, sync_dist=True, batch_size=1)
        if video is not None:
            rank_zero_info(f"lightmarl: evaluation video {video}")

    def _continuous_bindings(self) -> list[str]:
        """Active bindings that act for a group with continuous actions, in binding order."""
        groups = self.env_spec.groups
        return [
            b
            for b in self.table.active_ids
            if b in self.table.group_of_binding and groups[self.table.group_of_binding[b]].action_kind == "continuous"
        ]

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate("eval")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate("test")

    # -- checkpoints (the schema: lightmarl.training.checkpoint) ----------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoints.save_checkpoint(self, checkpoint)

    def check_checkpoint_fits(self, state_dict: Any, *, field: str) -> None:
        """Raise a [`ConfigError`][lightmarl.errors.ConfigError] naming what differs when ``state_dict`` cannot load into this module."""
        checkpoints.check_checkpoint_fits(self, state_dict, field=field)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoints.load_checkpoint(self, checkpoint)
