"""PettingZoo parallel envs, built from a recipe and stepped as a lean in-process vector.

The vector writes straight into NumPy arrays laid out ``[num_envs, agents_in_group, ...]``
per group and hands torch views of them to the collector; it skips TorchRL's per-step
spec checks and TensorDict churn, which cost ~4x in speed on small envs
(see ``benchmarks/README.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from lightmarl._imports import import_object
from lightmarl.envs.spec import EnvSpec, GroupSpec, default_group_name, space_signature

log = logging.getLogger(__name__)


@dataclass
class PettingZooEnvConfig:
    """Which PettingZoo parallel env to build, and how many copies.

    Attributes:
        env_fn: import path of a callable returning a PettingZoo ``ParallelEnv``
            (e.g. ``mpe2.simple_spread_v3.parallel_env``, or your own class).
        env_kwargs: keyword arguments passed to ``env_fn``.
        num_envs: env copies stepped together by each training process.
    """

    env_fn: str = "mpe2.simple_spread_v3.parallel_env"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 16

    def __post_init__(self) -> None:
        if not isinstance(self.num_envs, int) or self.num_envs < 1:
            raise ValueError(f"env.num_envs: expected a positive integer, got {self.num_envs!r}")

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

    def make_vector(self, seed: int, num_envs: int | None = None) -> ParallelVecEnv:
        make = self.constructor()
        count = self.num_envs if num_envs is None else num_envs
        envs: list[Any] = []
        for _ in range(count):
            envs.append(self.make_one() if not envs else make())
        return ParallelVecEnv(envs, env_spec_of(envs[0], name=self.name), seeds=[seed + i for i in range(count)])


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


class ParallelVecEnv:
    """``num_envs`` PettingZoo parallel envs stepped in one process, with auto-reset.

    ``reset()`` and ``step()`` return, per group, tensors shaped ``[num_envs, agents_in_group, ...]``.
    An env whose agents are all gone (or all done) is reset inside ``step``: the step
    reports the episode's final observation, and :attr:`current` holds the reset one.

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
        # agent name -> (group name, position in group)
        self._slot = {a: (g.name, i) for g in spec.groups.values() for i, a in enumerate(g.agents)}
        self.current: dict[str, dict[str, torch.Tensor]] = {}
        self._agent_ids = {g.name: torch.tensor(g.agent_ids, dtype=torch.int64) for g in spec.groups.values()}
        self._closed = False

    def _empty_obs(self) -> dict[str, dict[str, np.ndarray]]:
        out = {}
        for g in self.spec.groups.values():
            arrays = {
                "observation": np.zeros((self.num_envs, g.num_agents, *g.observation_shape), dtype=np.float32),
                "valid": np.zeros((self.num_envs, g.num_agents), dtype=bool),
            }
            if g.has_action_mask:
                arrays["action_mask"] = np.zeros((self.num_envs, g.num_agents, g.num_actions), dtype=bool)
            out[g.name] = arrays
        return out

    def _write_obs(self, arrays: dict[str, dict[str, np.ndarray]], e: int, observations: dict, live) -> None:
        for agent, obs in observations.items():
            try:
                group, i = self._slot[agent]
            except KeyError:
                raise RuntimeError(
                    f"env {self.spec.name!r} (copy {e}, seed {self.seeds[e]}) returned an observation for "
                    f"unknown agent {agent!r}; possible_agents are {list(self.spec.possible_agents)}"
                ) from None
            target = arrays[group]
            if isinstance(obs, dict):
                if "action_mask" in target:
                    target["action_mask"][e, i] = obs["action_mask"]
                obs = obs["observation"]
            target["observation"][e, i] = obs
        for agent in live:
            group, i = self._slot[agent]
            arrays[group]["valid"][e, i] = True

    @staticmethod
    def _to_torch(arrays: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, torch.Tensor]]:
        return {g: {k: torch.from_numpy(v) for k, v in d.items()} for g, d in arrays.items()}

    def reset(self) -> dict[str, dict[str, torch.Tensor]]:
        arrays = self._empty_obs()
        for e, env in enumerate(self.envs):
            observations, _ = env.reset(seed=self.seeds[e])
            self._write_obs(arrays, e, observations, env.agents)
        self.current = self._to_torch(arrays)
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
        nxt = self._empty_obs()
        for arrays in nxt.values():
            shape = arrays["valid"].shape
            arrays["reward"] = np.zeros(shape, dtype=np.float32)
            arrays["terminated"] = np.zeros(shape, dtype=bool)
            arrays["truncated"] = np.zeros(shape, dtype=bool)
        live_next = {g: np.zeros_like(arrays["valid"]) for g, arrays in nxt.items()}
        reset_arrays = None
        episode_end = np.zeros(self.num_envs, dtype=bool)
        for e, env in enumerate(self.envs):
            acting = list(env.agents)  # env.step mutates env.agents
            joint = {}
            for agent in acting:
                group, i = self._slot[agent]
                value = action_arrays[group][e, i]
                joint[agent] = value.item() if value.ndim == 0 else value
            try:
                observations, rewards, terminations, truncations, _ = env.step(joint)
            except Exception as err:
                raise RuntimeError(
                    f"env {self.spec.name!r} (copy {e}, seed {self.seeds[e]}) raised in step(): "
                    f"{type(err).__name__}: {err}"
                ) from err
            self._write_obs(nxt, e, observations, ())
            for agent in acting:
                group, i = self._slot[agent]
                arrays = nxt[group]
                arrays["reward"][e, i] = rewards.get(agent, 0.0)
                arrays["terminated"][e, i] = terminations.get(agent, False)
                arrays["truncated"][e, i] = truncations.get(agent, False)
            if env.agents and not all(terminations.get(a, False) or truncations.get(a, False) for a in env.agents):
                for agent in env.agents:
                    group, i = self._slot[agent]
                    live_next[group][e, i] = True
                continue
            # Episode over: mark everyone who was present done, and reset this copy.
            episode_end[e] = True
            for agent in acting:
                group, i = self._slot[agent]
                if not (nxt[group]["terminated"][e, i] or nxt[group]["truncated"][e, i]):
                    nxt[group]["truncated"][e, i] = True
            if reset_arrays is None:
                reset_arrays = self._empty_obs()
            observations, _ = env.reset()
            self._write_obs(reset_arrays, e, observations, env.agents)
        for arrays in nxt.values():
            arrays["done"] = arrays["terminated"] | arrays["truncated"]
            del arrays["valid"]  # validity belongs to the acting step: see ``current``
        next_td = self._to_torch(nxt)
        # Observations for the next step: the new ones, except in envs that were reset.
        ended = torch.from_numpy(episode_end)
        current = {}
        for g, tensors in next_td.items():
            obs = {"observation": tensors["observation"].clone(), "valid": torch.from_numpy(live_next[g])}
            if "action_mask" in tensors:
                obs["action_mask"] = tensors["action_mask"].clone()
            if reset_arrays is not None:
                reset = self._to_torch({g: reset_arrays[g]})[g]
                for key in obs:
                    obs[key][ended] = reset[key][ended]
            current[g] = obs
        self.current = current
        return next_td, ended

    def observation_td(self) -> TensorDict:
        """What the policies see now: per group ``observation``, ``valid``, ``agent_id``
        (index in ``possible_agents``, so scripted policies can tell agents apart) and
        ``action_mask`` where the env has one; root batch ``[num_envs]``."""
        groups = {}
        for g in self.spec.groups.values():
            entries = dict(self.current[g.name])
            entries["agent_id"] = self._agent_ids[g.name].expand(self.num_envs, g.num_agents)
            groups[g.name] = TensorDict(entries, batch_size=[self.num_envs, g.num_agents])
        return TensorDict(groups, batch_size=[self.num_envs])

    def render(self, index: int = 0) -> np.ndarray | None:
        return self.envs[index].render()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for env in self.envs:
            try:
                env.close()
            except Exception:
                log.debug("closing env copy failed", exc_info=True)
