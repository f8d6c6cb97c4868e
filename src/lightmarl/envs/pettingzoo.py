"""PettingZoo parallel envs, built from a recipe and stepped as a lean vector.

The vector writes straight into NumPy arrays laid out ``[num_envs, agents_in_group, ...]``
per group and hands torch views of them to the collector; it skips TorchRL's per-step
spec checks and TensorDict churn, which cost ~4x in speed on small envs
(see ``benchmarks/README.md``). ``num_workers >= 1`` steps the copies in worker processes
instead (:mod:`lightmarl.envs.workers`), with the same stepping code and trajectories.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from tensordict import TensorDict

from lightmarl._imports import import_object
from lightmarl.envs.spec import EnvSpec, GroupSpec, default_group_name, space_signature
from lightmarl.envs.workers import EnvSlice, GroupLayout, ProcessVecEnv, empty_current, empty_next


@dataclass
class PettingZooEnvConfig:
    """Which PettingZoo parallel env to build, and how many copies.

    Attributes:
        env_fn: import path of a callable returning a PettingZoo ``ParallelEnv``
            (e.g. ``mpe2.simple_spread_v3.parallel_env``, or your own class).
        env_kwargs: keyword arguments passed to ``env_fn``.
        num_envs: env copies stepped together by each training process.
        num_workers: ``0`` steps the copies in the training process (:class:`ParallelVecEnv`);
            ``k >= 1`` splits them over ``k`` worker processes
            (:class:`~lightmarl.envs.workers.ProcessVecEnv`, same trajectories). At most
            ``num_envs``; a vector asked for fewer copies gets at most one worker per copy.
    """

    env_fn: str = "mpe2.simple_spread_v3.parallel_env"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 16
    num_workers: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.num_envs, int) or self.num_envs < 1:
            raise ValueError(f"env.num_envs: expected a positive integer, got {self.num_envs!r}")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise ValueError(f"env.num_workers: expected an integer >= 0, got {self.num_workers!r}")
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
        if hasattr(env, "agent_iter"):
            raise ValueError(
                f"env.env_fn: {self.env_fn!r} returned an AEC (turn-based) env; lightmarl's collector "
                "steps ParallelEnv objects: use the module's `parallel_env` constructor"
            )
        return env

    def spec(self) -> EnvSpec:
        env = self.make_one()
        try:
            return env_spec_of(env, name=self.name)
        finally:
            env.close()

    def make_vector(self, seed: int, num_envs: int | None = None) -> VecEnv:
        """``num_envs`` (default ``self.num_envs``) copies, copy ``i`` reset with ``seed + i``:
        in this process, or in ``min(num_workers, num_envs)`` worker processes."""
        count = self.num_envs if num_envs is None else num_envs
        seeds = [seed + i for i in range(count)]
        if self.num_workers > 0:
            # Validates the env here (clear errors before any process starts); workers build
            # their copies from the import path and kwargs.
            spec = self.spec()
            return ProcessVecEnv(self.env_fn, dict(self.env_kwargs), spec, seeds, min(self.num_workers, count))
        make = self.constructor()
        envs: list[Any] = []
        for _ in range(count):
            envs.append(self.make_one() if not envs else make())
        return ParallelVecEnv(envs, env_spec_of(envs[0], name=self.name), seeds=seeds)


def env_spec_of(env: Any, name: str) -> EnvSpec:
    """Group the env's agents by name prefix (TorchRL's convention) and check each group's spaces."""
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
            raise ValueError(
                f"env {name!r}: agents of group {group_name!r} have different spaces "
                f"({ {a: s for a, s in signatures.items()} }); lightmarl batches a group's rows together"
            )
        obs_shape, has_mask, kind, num_actions, action_shape, low, high = signatures[group_agents[0]]
        groups[group_name] = GroupSpec(
            name=group_name,
            agents=tuple(group_agents),
            agent_ids=tuple(agents.index(a) for a in group_agents),
            observation_shape=obs_shape,
            action_kind=kind,
            num_actions=num_actions,
            action_shape=action_shape,
            action_low=low,
            action_high=high,
            has_action_mask=has_mask,
        )
    return EnvSpec(name=name, possible_agents=agents, groups=groups)


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
        entries["agent_id"] = ids.expand(num_envs, g.num_agents)
        groups[g.name] = TensorDict(entries, batch_size=[num_envs, g.num_agents])
    return TensorDict(groups, batch_size=[num_envs])


@runtime_checkable
class VecEnv(Protocol):
    """What the collector and evaluation need from a vector of env copies.

    Implemented by :class:`ParallelVecEnv` (in-process) and
    :class:`~lightmarl.envs.workers.ProcessVecEnv` (worker processes); both reset copy ``i``
    with ``seeds[i]`` and produce the same trajectories for the same actions.
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
    The stepping itself is :class:`~lightmarl.envs.workers.EnvSlice`, shared with the
    worker processes of :class:`~lightmarl.envs.workers.ProcessVecEnv`.

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
        self._block = EnvSlice(envs, self._groups, seeds, 0, spec.name, spec.possible_agents)
        self.current: dict[str, dict[str, torch.Tensor]] = {}
        self._agent_ids: dict[str, torch.Tensor] = {}
        self._closed = False

    @staticmethod
    def _to_torch(arrays: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, torch.Tensor]]:
        return {g: {k: torch.from_numpy(v) for k, v in d.items()} for g, d in arrays.items()}

    def reset(self) -> dict[str, dict[str, torch.Tensor]]:
        current = empty_current(self._groups, self.num_envs)
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
            episode ended), ``reward``, ``terminated``, ``truncated``, ``done``; and a
            ``[num_envs]`` bool tensor of envs that were reset.
        """
        action_arrays = {g: a.numpy() for g, a in actions.items()}
        nxt = empty_next(self._groups, self.num_envs)
        current = empty_current(self._groups, self.num_envs)
        episode_end = np.zeros(self.num_envs, dtype=bool)
        self._block.step(action_arrays, nxt, current, episode_end)
        self.current = self._to_torch(current)
        return self._to_torch(nxt), torch.from_numpy(episode_end)

    def observation_td(self) -> TensorDict:
        """What the policies see now: per group ``observation``, ``valid``, ``agent_id``
        (index in ``possible_agents``, so scripted policies can tell agents apart) and
        ``action_mask`` where the env has one; root batch ``[num_envs]``."""
        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> np.ndarray | None:
        return self.envs[index].render()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._block.close()
