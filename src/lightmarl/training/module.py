"""The LightningModule that runs a population: collect, learn, evaluate."""

from __future__ import annotations

import time
from typing import Any, cast

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from lightmarl.algorithms import PPO, Algorithm, IndependentMARLTrainer, MARLTrainer
from lightmarl.algorithms.marl_trainer import MARLTrainerFactory, build_marl_trainer, reserve_algorithm_bindings
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
from lightmarl.envs.transforms import transformed_spec
from lightmarl.evaluation.scenarios import EvaluationConfig
from lightmarl.evaluation.validation import check_validation, log_validation
from lightmarl.policies.base import Policy
from lightmarl.policies.recipe_population import build_recipe_population
from lightmarl.population import BindingTable, PerEnvAgentBindingMap, PolicyBindingConfig
from lightmarl.population.shared import SharedModuleConfig
from lightmarl.training import checkpoint as checkpoints
from lightmarl.training.budget import FrameBudget
from lightmarl.training.league import LeagueConfig, LeagueTraining
from lightmarl.training.resume import RunResume
from lightmarl.training.rollouts import iteration_logs, log_iteration, rank_collector, tick_loader
from lightmarl.training.stepper import LightningStepper, assert_ranks_in_sync
from lightmarl.training.storage import prepare_run_storage


class MARLModule(LightningModule):
    """A population of bindings acting in vectorized envs, trained with manual optimization.

    Each training batch is one rollout of ``env.num_envs x rollout_steps`` env steps per process; ``training_step``
    hands it to the MARLTrainer, whose UnitTrainers (one per trainable binding) take their own optimizer steps.
    ``validate`` / ``test`` play evaluation episodes and report metrics per binding.

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
        self.league = LeagueTraining(league, self.env_spec, policy_bindings) if league is not None else None
        if self.league is not None:  # its players, opponent slots and average networks, seated by the league
            policy_bindings, agent_binding_map = self.league.population(agent_binding_map, policy_mapping_fn)
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
        reserve_algorithm_bindings(self.table, self.algorithms, self.algorithm)  # e.g. a distillation teacher
        self.shared, self.population = build_recipe_population(
            self.table, self.env_spec, self.env_config.transforms, shared_modules
        )
        self.marl_trainer_factory = marl_trainer
        self.marl_trainer: MARLTrainer | None = None
        self._optimizer_index: dict[str, int] = {}  # optimizer name (binding id) -> position in configure_optimizers
        self._collector: RolloutCollector | None = None
        self.frames = 0
        self.iterations = 0
        self._resume = RunResume(checkpoint_replay)  # per-process state in checkpoints, put back on resume

    @property
    def policies(self) -> nn.ModuleDict:
        return self.population.policies

    def get_weights(self, binding_id: str) -> dict[str, torch.Tensor]:
        """A CPU copy of one binding's policy weights (what [`WeightExchange`][lightmarl.training.weight_exchange.WeightExchange] publishes)."""
        return self.population.weights_of(binding_id)

    def set_weights(self, binding_id: str, weights: dict[str, torch.Tensor]) -> None:
        """Load weights into one binding's policy (another run's, from [`WeightExchange`][lightmarl.training.weight_exchange.WeightExchange]); shapes must match."""
        self.population.load_weights(binding_id, weights)

    def snapshot_description(self, binding_id: str) -> dict[str, Any]:
        """What a league snapshot file of ``binding_id`` carries besides its weights (`lightmarl.training.checkpoint`)."""
        return checkpoints.snapshot_description(self, binding_id)

    @property
    def budget(self) -> FrameBudget:
        """The frame budget as the recipe sets it now, over the run's processes (`lightmarl.training.budget`)."""
        world_size = self._trainer.world_size if self._trainer is not None else 1
        return FrameBudget(
            self.max_frames, self.env_config.num_envs, self.rollout_steps, self.iterations_per_epoch, world_size
        )

    @property
    def total_iterations(self) -> int:
        """Iterations of the whole run: those done and those left (a resumed run's done ones come from its checkpoint)."""
        return self.budget.total_iterations(self.frames, self.iterations)

    def algorithm_of(self, binding_id: str) -> Algorithm:
        """The algorithm that trains ``binding_id`` (its entry in ``model.algorithms``, else ``model.algorithm``)."""
        return self.algorithms.get(binding_id, self.algorithm)

    def setup(self, stage: str) -> None:
        if self.cpu_threads is not None:
            torch.set_num_threads(self.cpu_threads)
        if stage != "fit" or self.marl_trainer is not None:
            return
        prepare_run_storage(self._trainer)
        self.marl_trainer = marl_trainer = build_marl_trainer(
            self.marl_trainer_factory,
            self.table,
            {b: cast(Policy, p) for b, p in self.policies.items()},
            {b: self.algorithm_of(b) for b in self.table.trainable_ids},
            self.shared,
            num_envs=self.env_config.num_envs,
            rollout_steps=self.rollout_steps,
        )
        if self.league is not None:
            self.league.setup(self)
        shape = f"{self.total_iterations} iterations of {self.budget.frames_per_iteration} frames"
        rank_zero_info(f"lightmarl: {marl_trainer.describe()}; {shape}")

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

    def on_validation_start(self) -> None:
        self.population.place_bindings(trainer_device=self.device)
        if self.league is not None:
            self.league.evaluation_map(True)

    def on_validation_end(self) -> None:
        if self.league is not None:
            self.league.evaluation_map(False)

    def on_test_start(self) -> None:
        self.population.place_bindings(trainer_device=self.device)

    def on_fit_start(self) -> None:
        assert self.marl_trainer is not None
        self.population.place_bindings(trainer_device=self.device)
        self.marl_trainer.to(self.device)
        self._collector = rank_collector(
            self.env_config,
            self.population,
            self.rollout_steps,
            seed=self.seed,
            rank=self.global_rank,
            stats_window=self.stats_window,
            device=self.device,
            on_step=self.league.on_step if self.league is not None else None,  # seats copies whose episode ended
        )
        self._resume.restore_collector(self._collector, self.league)  # a resumed run: env copies back mid-episode
        if self.league is not None:
            self.league.start(self._collector)

    def on_train_start(self) -> None:
        # Last: nothing may draw from the RNG streams after them.
        self._resume.restore_rng(self.device, dict(self.policies.items()))
        self.budget.start_fit(self.trainer, self.frames)

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
        return tick_loader(self.iterations_per_epoch, lambda: self.budget.remaining_iterations(self.frames))

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
        budget = self.budget
        metrics = self.marl_trainer.update(
            experience,
            self.named_optimizers(),
            LightningStepper(self),
            iteration=self.iterations,
            fraction_done=budget.fraction_done(self.frames, self.iterations),
        )
        self.iterations += 1
        self.frames += budget.frames_per_iteration
        league_logs = self.league.after_iteration(experience) if self.league is not None else {}
        logs = iteration_logs(
            metrics,
            self._collector.episode_summary(),
            frames=self.frames,
            iterations=self.iterations,
            frames_per_iteration=budget.frames_per_iteration,
            seconds=(started, collected, time.perf_counter()),
        )
        log_iteration(self, {**logs, **league_logs}, self.table.trainable_ids[0])
        if self.frames >= self.max_frames:
            self.trainer.should_stop = True

    # -- evaluation -----------------------------------------------------------------------
    def _validate(self, prefix: str) -> None:
        env, spec, config = self.env_config, self.env_spec, self.evaluation.validation
        log_validation(self, self.population, env, spec, config, prefix=prefix, iteration=self.iterations)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._validate("eval")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._validate("test")

    # -- checkpoints (the schema: lightmarl.training.checkpoint) ----------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoints.save_checkpoint(self, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoints.load_checkpoint(self, checkpoint)
