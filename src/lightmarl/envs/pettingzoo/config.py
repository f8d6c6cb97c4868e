"""Which PettingZoo env a recipe trains in, and how its copies are vectorized: [`PettingZooEnvConfig`][lightmarl.envs.pettingzoo.config.PettingZooEnvConfig].

The in-process vector writes straight into NumPy arrays laid out ``[num_envs, agents_in_group, ...]``
per group and hands torch views of them to the collector; it skips TorchRL's per-step spec
checks and TensorDict churn, which cost ~4x in speed on small envs (see
``benchmarks/README.md``). ``num_workers >= 1`` steps the copies in worker processes instead
([`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv]), with the same stepping code and trajectories.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from lightmarl._imports import import_object
from lightmarl.envs.base import VecEnv
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.pettingzoo.aec import aec_env_spec, is_aec_env
from lightmarl.envs.pettingzoo.checks import check_parallel_env
from lightmarl.envs.pettingzoo.frames import FramedParallelEnv
from lightmarl.envs.pettingzoo.spec import env_spec_of
from lightmarl.envs.pettingzoo.vector import ParallelVecEnv
from lightmarl.envs.runners.process import ProcessVecEnv, WorkerFailure
from lightmarl.envs.spec import EnvSpec
from lightmarl.envs.transforms import VecTransform, transformed_spec
from lightmarl.envs.transforms.image import frame_ops_by_agent


@dataclass
class PettingZooEnvConfig(EnvConfig):
    """Which PettingZoo env (parallel or turn-based) to build, and how many copies.

    Attributes:
        env_fn: import path of a callable returning a PettingZoo ``ParallelEnv``
            (e.g. ``mpe2.simple_spread_v3.parallel_env``, or your own class) or ``AECEnv``
            (turn-based, one agent acts per step: `lightmarl.envs.pettingzoo.aec`; e.g.
            ``pettingzoo.classic.connect_four_v3.env``).
        env_kwargs: keyword arguments passed to ``env_fn``.
        num_envs: env copies stepped together by each training process.
        num_workers: ``0`` steps the copies in the training process ([`ParallelVecEnv`][lightmarl.envs.pettingzoo.vector.ParallelVecEnv]);
            ``k >= 1`` splits them over ``k`` worker processes
            ([`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv], same trajectories). At most
            ``num_envs``; a vector asked for fewer copies gets at most one worker per copy.
        overlap: with worker processes, step the copies as two halves in alternation, so that the
            policy computes one half's actions while the workers step the other (the
            collector's forward pass overlaps env stepping). It pays where the training process
            has a core of its own (1 worker on 2 cores: 1.02x instead of 0.93x the in-process
            collector) and costs where it competes with the workers for one (2 workers on 2
            cores: see ``benchmarks/README.md``). ``None`` (default): overlap when this process
            may run on more cores than there are workers. Needs ``num_envs >= 2 * num_workers``
            (otherwise one half). Actions are sampled per half: same distribution, another
            random stream than the in-process vector with the same seed; ``false`` gives
            bit-identical experience.
        state: also record the env's global ``state()`` (PettingZoo's ``state_space``) at the
            experience root, ``"state"`` and ``("next", "state")``, e.g. for a QMIX mixer. Off by
            default: it costs a ``state()`` call per env step.
        transforms: optional `transforms` applied, in order, to the vector's
            outputs (e.g. ``class_path: lightmarl.envs.transforms.ObservationNorm``); ``spec()``
            is the transformed spec.
        worker_timeout: seconds a worker process may take to answer a step or reset before it
            counts as hung (``num_workers >= 1``).
        worker_failure: what a worker that died or hung during a step does to the run: ``stop``
            (shut every worker down and end the run with a one-line error naming the worker, its
            env copies and their seeds) or ``restart`` (a new process rebuilds and resets the
            same copies; their interrupted episodes end truncated at that step, with reward 0
            and the last observation repeated; a warning names them; training goes on).
        max_worker_restarts: restarts allowed over a run (per training process); the next
            failure stops the run.
        pin_workers: run each worker process on one CPU of its own, one hardware thread of each
            physical core first (`placement`). Workers step in
            lockstep, so two of them sharing a core slow every step; pinned, they share one only
            when there are more workers than cores. Off by default: two runs on one machine
            would pin their workers to the same CPUs.
        info_fields: numeric fields of the env's per-agent ``infos`` that evaluation reports
            per binding (see [`EnvConfig`][lightmarl.envs.config.EnvConfig]); for turn-based envs the
            ``infos`` after each turn.
    """

    env_fn: str = "mpe2.simple_spread_v3.parallel_env"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 16
    num_workers: int = 0
    overlap: bool | None = None
    state: bool = False
    transforms: list[VecTransform] = field(default_factory=list)
    worker_timeout: float = 300.0
    worker_failure: WorkerFailure = "stop"
    max_worker_restarts: int = 3
    info_fields: list[str] = field(default_factory=list)
    pin_workers: bool = False

    applies_frame_transforms = True

    def __post_init__(self) -> None:
        self.check_transforms()
        self.check_info_fields()
        if (
            isinstance(self.worker_timeout, bool)
            or not isinstance(self.worker_timeout, (int, float))
            or not (0 < self.worker_timeout < float("inf"))
        ):
            raise ValueError(f"env.worker_timeout: expected a positive number of seconds, got {self.worker_timeout!r}")
        if self.worker_failure not in ("stop", "restart"):
            raise ValueError(f"env.worker_failure: expected 'stop' or 'restart', got {self.worker_failure!r}")
        if (
            isinstance(self.max_worker_restarts, bool)
            or not isinstance(self.max_worker_restarts, int)
            or self.max_worker_restarts < 0
        ):
            raise ValueError(f"env.max_worker_restarts: expected an integer >= 0, got {self.max_worker_restarts!r}")
        if not isinstance(self.num_envs, int) or self.num_envs < 1:
            raise ValueError(f"env.num_envs: expected a positive integer, got {self.num_envs!r}")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ValueError(f"env.num_workers: expected an integer >= 0, got {self.num_workers!r}")
        if not isinstance(self.pin_workers, bool):
            raise TypeError(f"env.pin_workers: expected true or false, got {self.pin_workers!r}")
        if self.overlap not in (None, True, False):
            raise ValueError(f"env.overlap: expected true, false or null (automatic), got {self.overlap!r}")
        if self.num_workers > self.num_envs:
            raise ValueError(
                f"env.num_workers: {self.num_workers} workers for {self.num_envs} env copies; "
                "each worker needs at least one copy (num_workers <= num_envs)"
            )

    @property
    def name(self) -> str:
        return self.env_fn.rsplit(".", 2)[-2] if self.env_fn.count(".") >= 1 else self.env_fn

    def constructor(self) -> Callable[[], Any]:
        fn = import_object(self.env_fn, field="env.env_fn")
        if not callable(fn):
            raise ValueError(f"env.env_fn: {self.env_fn!r} is not callable")
        kwargs = dict(self.env_kwargs)
        return lambda: fn(**kwargs)

    def make_one(self) -> Any:
        """Build one env, turning constructor failures into errors that name the env."""
        make = self.constructor()
        try:
            env = make()
        except Exception as err:
            raise ValueError(f"env: {self.env_fn}(**{self.env_kwargs!r}) raised {type(err).__name__}: {err}") from err
        if not hasattr(env, "possible_agents") or not hasattr(env, "step"):
            raise ValueError(f"env.env_fn: {self.env_fn!r} did not return a PettingZoo env (got {type(env).__name__})")
        return env

    def describe(self) -> dict[str, Any]:
        return {"env_fn": self.env_fn, "env_kwargs": dict(self.env_kwargs)}

    def base_spec(self) -> EnvSpec:
        """The env's groups and spaces, after one ``reset`` and ``step`` that check it keeps the
        PettingZoo API (`check_parallel_env`): a broken env fails
        here, before any training, with an error that names it."""
        env = self.make_one()
        try:
            if is_aec_env(env):  # turn-based: checked by playing one turn
                if self.frame_transforms():
                    FramedParallelEnv(env, {})  # refuses AEC envs with a clear message
                return self.with_info_fields(aec_env_spec(env, name=self.name, state=self.state))
            spec = env_spec_of(env, name=self.name, state=self.state)
            check_parallel_env(env, spec)
            return self.with_info_fields(spec)
        finally:
            env.close()

    def make_rendering_one(self) -> Any:
        """One env built with ``render_mode="rgb_array"`` added to ``env_kwargs``; a clear error where it cannot be."""
        config = replace(self, env_kwargs={**self.env_kwargs, "render_mode": "rgb_array"}, num_workers=0, transforms=[])
        try:
            return config.make_one()
        except ValueError as err:
            raise ValueError(f"evaluation video: the env must accept render_mode='rgb_array': {err}") from None

    def make_base_recording_vector(self, seed: int, record: Callable[[Any, Callable[[Any], Any]], Any]) -> VecEnv:
        """One in-process copy of [`make_rendering_one`][lightmarl.envs.pettingzoo.config.PettingZooEnvConfig.make_rendering_one], drawn by its ``render()``."""
        env = self.make_rendering_one()
        env, spec = self._framed([env], env_spec_of(env, name=self.name, state=self.state))
        recorder = record(env[0], lambda env: env.render())
        return ParallelVecEnv([recorder], self.with_info_fields(spec), seeds=[seed])

    def _framed(self, envs: list[Any], spec: EnvSpec) -> tuple[list[Any], EnvSpec]:
        """``envs`` (of spec ``spec``) wrapped in the recipe's leading image transforms, and their spec."""
        frames = self.frame_transforms()
        if not frames:
            return envs, spec
        ops = frame_ops_by_agent(spec, frames)
        return [FramedParallelEnv(env, ops) for env in envs], transformed_spec(spec, frames)

    def make_base_vector(self, seed: int, num_envs: int, evaluation: bool = False) -> VecEnv:
        """``num_envs`` copies, copy ``i`` reset with ``seed + i``: in this process, or in
        ``min(num_workers, num_envs)`` worker processes. Evaluation vectors stay in this process:
        starting worker processes for a short evaluation costs more than it saves."""
        count = num_envs
        seeds = [seed + i for i in range(count)]
        if self.num_workers > 0 and not evaluation:
            # Validates the env here (clear errors before any process starts); workers build
            # their copies from the import path and kwargs.
            spec = self.base_spec()
            workers = min(self.num_workers, count)
            overlap = len(os.sched_getaffinity(0)) > workers if self.overlap is None else self.overlap
            phases = 2 if overlap and count >= 2 * workers else 1
            env_fn, env_kwargs = self.env_fn, dict(self.env_kwargs)
            frames = self.frame_transforms()
            if frames:  # workers build the env wrapped in the image transforms, from plain data
                env_fn = "lightmarl.envs.pettingzoo.frames.framed_env"
                env_kwargs = {"env_fn": self.env_fn, "env_kwargs": env_kwargs, "ops": frame_ops_by_agent(spec, frames)}
                spec = transformed_spec(spec, frames)
            return ProcessVecEnv(
                env_fn,
                env_kwargs,
                spec,
                seeds,
                workers,
                num_phases=phases,
                timeout=float(self.worker_timeout),
                on_failure=self.worker_failure,
                max_restarts=self.max_worker_restarts,
                pin_cpus=self.pin_workers,
            )
        make = self.constructor()
        envs: list[Any] = []
        for _ in range(count):
            envs.append(self.make_one() if not envs else make())
        first = envs[0]
        if is_aec_env(first):
            return ParallelVecEnv(
                envs, self.with_info_fields(aec_env_spec(first, name=self.name, state=self.state)), seeds=seeds
            )
        envs, spec = self._framed(envs, env_spec_of(first, name=self.name, state=self.state))
        return ParallelVecEnv(envs, self.with_info_fields(spec), seeds=seeds)
