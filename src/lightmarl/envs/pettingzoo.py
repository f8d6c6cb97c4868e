"""PettingZoo parallel envs, built from a recipe and stepped as a lean vector.

The vector writes straight into NumPy arrays laid out ``[num_envs, agents_in_group, ...]``
per group and hands torch views of them to the collector; it skips TorchRL's per-step
spec checks and TensorDict churn, which cost ~4x in speed on small envs
(see ``benchmarks/README.md``). ``num_workers >= 1`` steps the copies in worker processes
instead (:mod:`lightmarl.envs.workers`), with the same stepping code and trajectories.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from tensordict import TensorDict

from lightmarl import keys
from lightmarl._imports import import_object
from lightmarl.envs.aec import aec_env_spec, is_aec_env
from lightmarl.envs.checks import check_parallel_env
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.spec import EnvSpec, GroupSpec, default_group_name, space_signature
from lightmarl.envs.transforms import VecTransform
from lightmarl.envs.workers import ROOT, GroupLayout, ProcessVecEnv, empty_current, empty_next, slice_class_for


@dataclass
class PettingZooEnvConfig(EnvConfig):
    """Which PettingZoo env (parallel or turn-based) to build, and how many copies.

    Attributes:
        env_fn: import path of a callable returning a PettingZoo ``ParallelEnv``
            (e.g. ``mpe2.simple_spread_v3.parallel_env``, or your own class) or ``AECEnv``
            (turn-based, one agent acts per step: :mod:`lightmarl.envs.aec`; e.g.
            ``pettingzoo.classic.connect_four_v3.env``).
        env_kwargs: keyword arguments passed to ``env_fn``.
        num_envs: env copies stepped together by each training process.
        num_workers: ``0`` steps the copies in the training process (:class:`ParallelVecEnv`);
            ``k >= 1`` splits them over ``k`` worker processes
            (:class:`~lightmarl.envs.workers.ProcessVecEnv`, same trajectories). At most
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
        transforms: optional :mod:`~lightmarl.envs.transforms` applied, in order, to the vector's
            outputs (e.g. ``class_path: lightmarl.envs.transforms.ObservationNorm``); ``spec()``
            is the transformed spec.
    """

    env_fn: str = "mpe2.simple_spread_v3.parallel_env"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 16
    num_workers: int = 0
    overlap: bool | None = None
    state: bool = False
    transforms: list[VecTransform] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.check_transforms()
        if not isinstance(self.num_envs, int) or self.num_envs < 1:
            raise ValueError(f"env.num_envs: expected a positive integer, got {self.num_envs!r}")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ValueError(f"env.num_workers: expected an integer >= 0, got {self.num_workers!r}")
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
        PettingZoo API (:func:`~lightmarl.envs.checks.check_parallel_env`): a broken env fails
        here, before any training, with an error that names it."""
        env = self.make_one()
        try:
            if is_aec_env(env):  # turn-based: checked by playing one turn
                return aec_env_spec(env, name=self.name, state=self.state)
            spec = env_spec_of(env, name=self.name, state=self.state)
            check_parallel_env(env, spec)
            return spec
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
        """One in-process copy of :meth:`make_rendering_one`, drawn by its ``render()``."""
        recorder = record(self.make_rendering_one(), lambda env: env.render())
        return ParallelVecEnv([recorder], env_spec_of(recorder, name=self.name, state=self.state), seeds=[seed])

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
            return ProcessVecEnv(self.env_fn, dict(self.env_kwargs), spec, seeds, workers, num_phases=phases)
        make = self.constructor()
        envs: list[Any] = []
        for _ in range(count):
            envs.append(self.make_one() if not envs else make())
        first = envs[0]
        if is_aec_env(first):
            return ParallelVecEnv(envs, aec_env_spec(first, name=self.name, state=self.state), seeds=seeds)
        return ParallelVecEnv(envs, env_spec_of(first, name=self.name, state=self.state), seeds=seeds)


def env_spec_of(env: Any, name: str, state: bool = False) -> EnvSpec:
    """Group the env's agents by name prefix (TorchRL's convention) and check each group's spaces;
    with ``state``, also read the shape of the env's global state (``state_space``)."""
    agents = tuple(env.possible_agents)
    if not agents:
        raise ValueError(f"env {name!r}: possible_agents is empty")
    members: dict[str, list[str]] = {}
    for agent in agents:
        members.setdefault(default_group_name(agent), []).append(agent)
    groups: dict[str, GroupSpec] = {}
    for group_name, group_agents in members.items():
        signatures = {}
        for agent in group_agents:
            try:
                signatures[agent] = space_signature(env.observation_space(agent), env.action_space(agent))
            except ValueError as err:
                raise ValueError(f"env {name!r}, agent {agent!r}: {err}") from None
        if len(set(signatures.values())) != 1:
            fields = {a: dict(s) for a, s in signatures.items()}
            first = fields[group_agents[0]]
            differing = [k for k in first if any(f[k] != first[k] for f in fields.values())]
            detail = "; ".join(f"{a}: " + ", ".join(f"{k}={f[k]!r}" for k in differing) for a, f in fields.items())
            raise ValueError(
                f"env {name!r}: agents of group {group_name!r} have different spaces ({detail}); lightmarl "
                "batches a group's rows together: give agents with other spaces another name prefix"
            )
        groups[group_name] = GroupSpec(
            name=group_name,
            agents=tuple(group_agents),
            agent_ids=tuple(agents.index(a) for a in group_agents),
            **dict(signatures[group_agents[0]]),
        )
    state_shape = global_state_shape(env, name, groups) if state else None
    return EnvSpec(name=name, possible_agents=agents, groups=groups, state_shape=state_shape)


def global_state_shape(env: Any, name: str, groups: dict[str, GroupSpec]) -> tuple[int, ...]:
    """The shape of ``env.state()``, from PettingZoo's ``state_space``; a clear error where the env has none."""
    space = getattr(env, "state_space", None)
    shape = getattr(space, "shape", None)
    if not callable(getattr(env, keys.STATE, None)) or not isinstance(shape, tuple) or not shape:
        raise ValueError(
            f"env.state: env {name!r} has no global state (PettingZoo's `state_space` with a shape, and "
            f"`state()`; got state_space={space!r}); set env.state: false"
        )
    if keys.STATE in groups:
        raise ValueError(f"env.state: env {name!r} has an agent group named 'state', the experience key of the state")
    return tuple(int(n) for n in shape)


def observation_td(
    spec: EnvSpec,
    current: dict[str, dict[str, torch.Tensor]],
    num_envs: int,
    agent_ids: dict[str, torch.Tensor],
) -> TensorDict:
    """The policies' view of ``current``: see :meth:`ParallelVecEnv.observation_td`.

    ``agent_ids`` is a cache (group name -> ids tensor) the caller keeps between calls.
    """
    groups = {}
    for g in spec.groups.values():
        entries = dict(current[g.name])
        ids = agent_ids.get(g.name)
        if ids is None:
            ids = agent_ids[g.name] = torch.tensor(g.agent_ids, dtype=torch.int64)
        entries[keys.AGENT_ID] = ids.expand(num_envs, g.num_agents)
        groups[g.name] = TensorDict(entries, batch_size=[num_envs, g.num_agents])
    if ROOT in current:  # the env's global state, where the vector records it
        groups[keys.STATE] = current[ROOT][keys.STATE]
    return TensorDict(groups, batch_size=[num_envs])


@runtime_checkable
class VecEnv(Protocol):
    """What the collector and evaluation need from a vector of env copies.

    Implemented by :class:`ParallelVecEnv` (in-process) and
    :class:`~lightmarl.envs.workers.ProcessVecEnv` (worker processes); both reset copy ``i``
    with ``seeds[i]`` and produce the same trajectories for the same actions. Where
    ``spec.state_shape`` is set, ``current`` and a step's results also hold the env's global
    state under :data:`~lightmarl.envs.workers.ROOT` (``{"state": [num_envs, *state_shape]}``).
    """

    spec: EnvSpec
    num_envs: int
    seeds: list[int]
    current: dict[str, dict[str, torch.Tensor]]

    def reset(self) -> dict[str, dict[str, torch.Tensor]]: ...

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[dict[str, dict[str, torch.Tensor]], torch.Tensor]: ...

    def observation_td(self) -> TensorDict: ...

    def render(self, index: int = 0) -> Any: ...

    def close(self) -> None: ...


class ParallelVecEnv:
    """``num_envs`` PettingZoo parallel envs stepped in one process, with auto-reset.

    ``reset()`` and ``step()`` return, per group, tensors shaped ``[num_envs, agents_in_group, ...]``.
    An env whose agents are all gone (or all done) is reset inside ``step``: the step
    reports the episode's final observation, and :attr:`current` holds the reset one.
    The stepping itself is :class:`~lightmarl.envs.workers.EnvSlice` (AEC envs:
    :class:`~lightmarl.envs.aec.AECSlice`, one turn per step), shared with the worker
    processes of :class:`~lightmarl.envs.workers.ProcessVecEnv`.

    Args:
        envs: the env copies (already constructed).
        spec: their shared :class:`EnvSpec`.
        seeds: one reset seed per env copy; later resets continue each env's own RNG.
    """

    def __init__(self, envs: list[Any], spec: EnvSpec, seeds: list[int]) -> None:
        if len(envs) != len(seeds):
            raise ValueError(f"{len(envs)} envs but {len(seeds)} seeds")
        self.envs = envs
        self.spec = spec
        self.seeds = seeds
        self.num_envs = len(envs)
        self._groups = GroupLayout.of(spec)
        self._block = slice_class_for(envs)(envs, self._groups, seeds, 0, spec.name, spec.possible_agents)
        self.current: dict[str, dict[str, torch.Tensor]] = {}
        self._agent_ids: dict[str, torch.Tensor] = {}
        self._closed = False

    @staticmethod
    def _to_torch(arrays: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, torch.Tensor]]:
        return {g: {k: torch.from_numpy(v) for k, v in d.items()} for g, d in arrays.items()}

    def reset(self) -> dict[str, dict[str, torch.Tensor]]:
        current = empty_current(self._groups, self.num_envs, self.spec.state_shape)
        self._block.reset(current)
        self.current = self._to_torch(current)
        return self.current

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[dict[str, dict[str, torch.Tensor]], torch.Tensor]:
        """Step every env copy.

        Args:
            actions: group name -> ``[num_envs, agents_in_group, ...]`` actions; entries of
                agents that are not present are ignored.

        Returns:
            ``(next, episode_end)``: per group ``observation`` (final observation where the
            episode ended), ``reward``, ``terminated``, ``truncated``, ``done`` (and the state
            after the step, final where the episode ended, under ``ROOT`` where it is recorded);
            and a ``[num_envs]`` bool tensor of envs that were reset.
        """
        action_arrays = {g: a.numpy() for g, a in actions.items()}
        nxt = empty_next(self._groups, self.num_envs, self.spec.state_shape)
        current = empty_current(self._groups, self.num_envs, self.spec.state_shape)
        episode_end = np.zeros(self.num_envs, dtype=bool)
        self._block.step(action_arrays, nxt, current, episode_end)
        self.current = self._to_torch(current)
        return self._to_torch(nxt), torch.from_numpy(episode_end)

    def observation_td(self) -> TensorDict:
        """What the policies see now: per group ``observation``, ``valid``, ``agent_id``
        (index in ``possible_agents``, so scripted policies can tell agents apart) and
        ``action_mask`` where the env has one, and the global ``state`` at the root where it is
        recorded; root batch ``[num_envs]``."""
        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> np.ndarray | None:
        return self.envs[index].render()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._block.close()
