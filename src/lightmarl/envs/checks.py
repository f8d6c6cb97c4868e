"""Checks that an env honours the contract lightmarl's collector relies on.

TorchRL checks a TorchRL env with :func:`torchrl.envs.utils.check_env_specs`: a short random
rollout whose data must match the env's specs (keys, shapes, dtypes). This module does the same
for lightmarl's :class:`~lightmarl.envs.pettingzoo.VecEnv` protocol, plus what multi-agent
envs add: validity of agents, action masks, episode ends and seeding.

* :func:`check_parallel_env`: one ``reset`` and one ``step`` of a raw PettingZoo ``ParallelEnv``
  against its :class:`~lightmarl.envs.spec.EnvSpec` (observations only for known agents, of
  the declared shapes). :meth:`PettingZooEnvConfig.spec` runs it, so a recipe whose env breaks
  the PettingZoo API fails before training starts.
* :func:`check_vec_env`: a random rollout of a vector (in-process or worker processes): shapes
  and dtypes per group match the :class:`~lightmarl.envs.spec.GroupSpec`, absent agents are
  masked, every legal action set is non-empty, ``done`` is ``terminated | truncated``, agents
  leave only through ``done``, and ended episodes are reset.
* :func:`check_same_trajectories`: two vectors stepped with the same actions produce the same
  data (same seed twice, or in-process against worker processes).

Example:
    >>> from lightmarl.envs import PettingZooEnvConfig
    >>> from lightmarl.envs.checks import check_same_trajectories, check_vec_env
    >>> config = PettingZooEnvConfig(env_kwargs={"max_cycles": 10}, num_envs=2)
    >>> report = check_vec_env(config.make_vector(seed=0), num_steps=25)
    >>> report.episode_ends
    4
    >>> check_same_trajectories(config.make_vector(seed=0), config.make_vector(seed=0))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lightmarl import keys
from lightmarl.envs.spec import EnvSpec, GroupSpec
from lightmarl.envs.workers import ROOT

if TYPE_CHECKING:
    from lightmarl.envs.pettingzoo import VecEnv


class EnvContractError(ValueError):
    """An env (or vector of envs) does not behave as lightmarl's collector needs; the message names the env."""


# -- a raw PettingZoo env ----------------------------------------------------------------


def check_parallel_env(env: Any, spec: EnvSpec, seed: int = 0) -> None:
    """Reset ``env`` with ``seed`` and step it once with a fixed legal action per agent.

    Checks the PettingZoo parallel API as the env layer uses it: ``reset`` returns
    ``(observations, infos)`` and ``step`` five dicts; every key is an agent of
    ``possible_agents``; observations (and action masks) have the shapes of the declared
    spaces. Leaves ``env`` mid-episode: close it or reset it afterwards.

    Raises:
        EnvContractError: naming the env, the call and the agent.
    """
    where = f"env {spec.name!r} (API check with seed {seed})"
    try:
        result = env.reset(seed=seed)
    except Exception as err:
        raise EnvContractError(f"{where}: reset() raised {type(err).__name__}: {err}") from err
    if not (isinstance(result, tuple) and len(result) == 2):
        raise EnvContractError(
            f"{where}: reset() must return (observations, infos) as PettingZoo parallel envs do; "
            f"got {type(result).__name__}"
        )
    _check_observations(where, "reset()", result[0], spec)
    agents = list(env.agents)
    _check_known(where, "env.agents after reset()", agents, spec)
    if not agents:
        raise EnvContractError(f"{where}: env.agents is empty after reset(); no agent would act")
    missing = [a for a in agents if a not in result[0]]
    if missing:
        raise EnvContractError(f"{where}: reset() returned no observation for agents {missing} of env.agents")
    actions = {agent: _fixed_action(spec.group_of(agent), result[0][agent]) for agent in agents}
    try:
        result = env.step(actions)
    except Exception as err:
        raise EnvContractError(f"{where}: step() raised {type(err).__name__}: {err} (actions {actions})") from err
    if not (isinstance(result, tuple) and len(result) == 5):
        raise EnvContractError(
            f"{where}: step() must return (observations, rewards, terminations, truncations, infos); "
            f"got {type(result).__name__} of length {len(result) if isinstance(result, tuple) else '-'}"
        )
    observations, rewards, terminations, truncations, _ = result
    _check_observations(where, "step()", observations, spec)
    for what, values in (("rewards", rewards), ("terminations", terminations), ("truncations", truncations)):
        _check_known(where, f"step() {what}", values, spec)
    _check_known(where, "env.agents after step()", list(env.agents), spec)


def _check_known(where: str, what: str, agents: Any, spec: EnvSpec) -> None:
    if not isinstance(agents, (dict, list)):
        raise EnvContractError(f"{where}: {what} must be a dict keyed by agent name; got {type(agents).__name__}")
    unknown = [a for a in agents if a not in spec.possible_agents]
    if unknown:
        raise EnvContractError(
            f"{where}: {what} names unknown agent {unknown[0]!r}; possible_agents are {list(spec.possible_agents)}"
        )


def _check_observations(where: str, call: str, observations: Any, spec: EnvSpec) -> None:
    _check_known(where, f"{call} observations", observations, spec)
    for agent, obs in observations.items():
        group = spec.group_of(agent)
        mask = None
        if isinstance(obs, dict):
            if "observation" not in obs:
                raise EnvContractError(
                    f"{where}: {call} observation of agent {agent!r} is a dict without 'observation'"
                )
            mask = obs.get("action_mask")
            obs = obs["observation"]
        if np.shape(obs) != group.observation_shape:
            raise EnvContractError(
                f"{where}: {call} observation of agent {agent!r} has shape {np.shape(obs)}, but its "
                f"observation_space says {group.observation_shape}"
            )
        if group.has_action_mask and (mask is None or np.shape(mask) != (group.num_actions,)):
            raise EnvContractError(
                f"{where}: {call} observation of agent {agent!r} needs an 'action_mask' of shape "
                f"({group.num_actions},), as its observation_space says; got "
                + ("none" if mask is None else f"shape {np.shape(mask)}")
            )


def _fixed_action(group: GroupSpec, observation: Any) -> Any:
    """A legal action chosen without randomness: the first legal choice, or the zero vector clipped into bounds."""
    if group.action_kind == "continuous":
        low = np.asarray(group.action_low, np.float32).reshape(group.action_shape)
        high = np.asarray(group.action_high, np.float32).reshape(group.action_shape)
        return np.clip(np.zeros(group.action_shape, np.float32), low, high)
    mask = np.asarray(observation["action_mask"], bool) if group.has_action_mask else None
    sizes = group.action_nvec or (group.num_actions,)
    choices, offset = [], 0
    for size in sizes:
        legal = np.ones(size, bool) if mask is None else mask[offset : offset + size]
        choices.append(int(np.argmax(legal)))  # first legal one (0 when none is legal)
        offset += size
    return choices[0] if group.action_kind == "discrete" else np.asarray(choices, np.int64)


# -- vectors -----------------------------------------------------------------------------


@dataclass(frozen=True)
class VecEnvCheck:
    """What :func:`check_vec_env` saw.

    Attributes:
        steps: vector steps taken.
        episode_ends: env copies that ended an episode (and were reset), summed over steps.
        agent_exits: agents done while their env copy's episode went on (agents that died or left).
        masked_rows: valid rows that came with an action mask.
    """

    steps: int
    episode_ends: int
    agent_exits: int
    masked_rows: int


def random_actions(
    spec: EnvSpec, current: dict[str, dict[str, torch.Tensor]], generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Uniformly random legal actions ``[num_envs, agents_in_group, *action_shape]`` per group.

    Args:
        spec: the vector's env spec.
        current: the vector's current per-group entries (``valid``, ``action_mask`` where present).
        generator: the source of randomness (same generator state, same actions).
    """
    actions = {}
    for g in spec.groups.values():
        valid = current[g.name][keys.VALID]
        batch = tuple(valid.shape)
        if g.action_kind == "continuous":
            low = torch.tensor(g.action_low).view(g.action_shape)
            high = torch.tensor(g.action_high).view(g.action_shape)
            finite_low, finite_high = torch.isfinite(low), torch.isfinite(high)
            # Unbounded sides: one unit beyond the other bound, or [-1, 1] when both are unbounded.
            low = torch.where(finite_low, low, torch.where(finite_high, high - 1, torch.full_like(low, -1.0)))
            high = torch.where(finite_high, high, low + torch.where(finite_low, 1.0, 2.0))
            u = torch.rand(*batch, *g.action_shape, generator=generator)
            actions[g.name] = low + u * (high - low)
            continue
        mask = current[g.name].get(keys.ACTION_MASK)
        weights = torch.ones(*batch, g.num_actions) if mask is None else mask.float()
        parts, offset = [], 0
        for size in g.action_nvec or (g.num_actions,):
            w = weights[..., offset : offset + size].reshape(-1, size)
            w = torch.where(w.sum(-1, keepdim=True) > 0, w, torch.ones_like(w))  # absent rows: any choice
            parts.append(torch.multinomial(w, 1, generator=generator).view(batch))
            offset += size
        actions[g.name] = parts[0] if g.action_kind == "discrete" else torch.stack(parts, dim=-1)
    return actions


def check_vec_env(vec: VecEnv, num_steps: int = 100, seed: int = 0) -> VecEnvCheck:
    """Reset ``vec`` and step it ``num_steps`` times with random legal actions, checking every result.

    The vector's own seeds decide the env copies' randomness; ``seed`` only seeds the actions.
    Use it on your own env before training (it resets the vector)::

        check_vec_env(PettingZooEnvConfig(env_fn="my_pkg.envs.parallel_env", num_envs=4).make_vector(seed=0))

    Returns:
        A :class:`VecEnvCheck` with counts of what happened (e.g. whether any episode ended).

    Raises:
        EnvContractError: at the first violation, naming the env, group, entry and step.
    """
    spec, num_envs = vec.spec, vec.num_envs
    if len(vec.seeds) != num_envs:
        raise EnvContractError(f"env {spec.name!r}: {len(vec.seeds)} seeds for {num_envs} env copies")
    generator = torch.Generator().manual_seed(seed)
    current = vec.reset()
    _check_current(spec, num_envs, current, "reset()")
    _require_equal(spec, current, vec.current, "reset() and vec.current")
    episode_ends = agent_exits = masked_rows = 0
    for step in range(num_steps):
        where = f"step {step}"
        _check_observation_td(vec, current, where)
        for g in spec.groups.values():
            if g.has_action_mask:
                masked_rows += int(current[g.name][keys.VALID].sum())
        actions = random_actions(spec, current, generator)
        nxt, ended = vec.step(actions)
        if not (isinstance(ended, torch.Tensor) and ended.dtype == torch.bool and tuple(ended.shape) == (num_envs,)):
            raise EnvContractError(
                f"env {spec.name!r}, {where}: the episode-end flags must be a bool [{num_envs}] tensor"
            )
        _check_next(spec, num_envs, nxt, current, ended, where)
        after = vec.current
        _check_current(spec, num_envs, after, f"{where} (next observations)")
        for g in spec.groups.values():
            before, done = current[g.name][keys.VALID], nxt[g.name][keys.DONE]
            going_on = ~ended.view(-1, 1)
            vanished = before & ~done & going_on & ~after[g.name][keys.VALID]
            if vanished.any():
                e, i = (int(x) for x in vanished.nonzero()[0])
                raise EnvContractError(
                    f"env {spec.name!r} (copy {e}, seed {vec.seeds[e]}), {where}: agent {g.agents[i]!r} left "
                    "env.agents without being terminated or truncated"
                )
            agent_exits += int((before & done & going_on).sum())
        episode_ends += int(ended.sum())
        current = after
    return VecEnvCheck(steps=num_steps, episode_ends=episode_ends, agent_exits=agent_exits, masked_rows=masked_rows)


def check_same_trajectories(a: VecEnv, b: VecEnv, num_steps: int = 30, seed: int = 0, close: bool = True) -> None:
    """Step ``a`` and ``b`` with the same random legal actions and require identical results.

    For seeding (two vectors built with the same seed) and for worker processes against the
    in-process vector. Both are reset first; ``close`` closes them at the end.

    Raises:
        EnvContractError: naming the first step, group and entry that differ.
    """
    try:
        if a.spec != b.spec or a.seeds != b.seeds:
            raise EnvContractError(f"env {a.spec.name!r}: the vectors differ in spec or seeds ({a.seeds} vs {b.seeds})")
        generator = torch.Generator().manual_seed(seed)
        _require_equal(a.spec, a.reset(), b.reset(), "reset()")
        for step in range(num_steps):
            actions = random_actions(a.spec, a.current, generator)
            (nxt_a, ended_a), (nxt_b, ended_b) = a.step(actions), b.step(actions)
            _require_equal(a.spec, nxt_a, nxt_b, f"step {step}")
            _require_equal(a.spec, a.current, b.current, f"step {step} (next observations)")
            if not torch.equal(ended_a, ended_b):
                raise EnvContractError(f"env {a.spec.name!r}, step {step}: episode ends differ")
    finally:
        if close:
            a.close()
            b.close()


# -- helpers -----------------------------------------------------------------------------


def _expected(g: GroupSpec, num_envs: int, section: str) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    rows = (num_envs, g.num_agents)
    fields = {keys.OBSERVATION: (torch.float32, (*rows, *g.observation_shape))}
    if g.has_action_mask:
        fields[keys.ACTION_MASK] = (torch.bool, (*rows, g.num_actions))
    if section == "current":
        fields[keys.VALID] = (torch.bool, rows)
    else:
        fields.update(
            reward=(torch.float32, rows),
            terminated=(torch.bool, rows),
            truncated=(torch.bool, rows),
            done=(torch.bool, rows),
        )
    return fields


def _check_layout(spec: EnvSpec, num_envs: int, data: Any, section: str, where: str) -> None:
    expected_keys = [*spec.groups, *([ROOT] if spec.state_shape is not None else [])]
    if not isinstance(data, dict) or set(data) != set(expected_keys):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise EnvContractError(f"env {spec.name!r}, {where}: expected entries {expected_keys}, got {got}")
    if spec.state_shape is not None:
        state, shape = data[ROOT].get(keys.STATE), (num_envs, *spec.state_shape)
        if state is None or state.dtype != torch.float32 or tuple(state.shape) != shape:
            raise EnvContractError(f"env {spec.name!r}, {where}: the global state must be float32 {shape}")
    for g in spec.groups.values():
        expected = _expected(g, num_envs, section)
        entries = data[g.name]
        if section != "current" and keys.ENV_REWARD in entries:  # the env's own reward beside a rescaled one
            expected[keys.ENV_REWARD] = expected[keys.REWARD]
        if set(entries) != set(expected):
            raise EnvContractError(
                f"env {spec.name!r}, {where}: group {g.name!r} has entries {sorted(entries)}, expected {sorted(expected)}"
            )
        for key, (dtype, shape) in expected.items():
            value = entries[key]
            if value.dtype != dtype or tuple(value.shape) != shape:
                raise EnvContractError(
                    f"env {spec.name!r}, {where}: {g.name}.{key} is {value.dtype} {tuple(value.shape)}, "
                    f"expected {dtype} {shape} (GroupSpec {g.name!r})"
                )
        for key in (keys.OBSERVATION, keys.REWARD):
            if key in entries and not torch.isfinite(entries[key]).all():
                raise EnvContractError(f"env {spec.name!r}, {where}: {g.name}.{key} has non-finite values")


def _check_current(spec: EnvSpec, num_envs: int, current: Any, where: str) -> None:
    _check_layout(spec, num_envs, current, "current", where)
    present = torch.zeros(num_envs, dtype=torch.int64)
    for g in spec.groups.values():
        entries = current[g.name]
        valid = entries[keys.VALID]
        present += valid.sum(-1)
        mask = entries.get(keys.ACTION_MASK)
        if mask is None:
            continue
        offset = 0
        for size in g.action_nvec or (g.num_actions,):
            none_legal = valid & ~mask[..., offset : offset + size].any(-1)
            if none_legal.any():
                e, i = (int(x) for x in none_legal.nonzero()[0])
                raise EnvContractError(
                    f"env {spec.name!r} (copy {e}), {where}: agent {g.agents[i]!r} is present but its action_mask "
                    f"allows no action{'' if g.action_kind == 'discrete' else f' for sub-action of size {size}'}"
                )
            offset += size
    if (present == 0).any():
        e = int((present == 0).nonzero()[0])
        raise EnvContractError(f"env {spec.name!r} (copy {e}), {where}: no agent is present (every valid is False)")


def _check_next(
    spec: EnvSpec,
    num_envs: int,
    nxt: Any,
    current: dict[str, dict[str, torch.Tensor]],
    ended: torch.Tensor,
    where: str,
) -> None:
    _check_layout(spec, num_envs, nxt, keys.NEXT, where)
    for g in spec.groups.values():
        entries, acted = nxt[g.name], current[g.name][keys.VALID]
        if not torch.equal(entries[keys.DONE], entries[keys.TERMINATED] | entries[keys.TRUNCATED]):
            raise EnvContractError(f"env {spec.name!r}, {where}: {g.name}.done must be terminated | truncated")
        for key in (keys.REWARD, keys.DONE):
            if entries[key][~acted].any():
                raise EnvContractError(
                    f"env {spec.name!r}, {where}: {g.name}.{key} is set for agents that were absent (valid False)"
                )
        unfinished = ended.view(-1, 1) & acted & ~entries[keys.DONE]
        if unfinished.any():
            e, i = (int(x) for x in unfinished.nonzero()[0])
            raise EnvContractError(
                f"env {spec.name!r} (copy {e}), {where}: the episode ended but agent {g.agents[i]!r} is not done"
            )


def _check_observation_td(vec: VecEnv, current: dict[str, dict[str, torch.Tensor]], where: str) -> None:
    spec = vec.spec
    td = vec.observation_td()
    if tuple(td.batch_size) != (vec.num_envs,):
        raise EnvContractError(f"env {spec.name!r}, {where}: observation_td() batch {tuple(td.batch_size)}")
    for g in spec.groups.values():
        rows = td.get(g.name)
        if tuple(rows.batch_size) != (vec.num_envs, g.num_agents):
            raise EnvContractError(f"env {spec.name!r}, {where}: observation_td()[{g.name!r}] batch {rows.batch_size}")
        ids = torch.tensor(g.agent_ids).expand(vec.num_envs, -1)
        if not torch.equal(rows.get(keys.AGENT_ID), ids):
            raise EnvContractError(
                f"env {spec.name!r}, {where}: observation_td()[{g.name!r}].agent_id != {g.agent_ids}"
            )
        for key, value in current[g.name].items():
            if not torch.equal(rows.get(key), value):
                raise EnvContractError(
                    f"env {spec.name!r}, {where}: observation_td() disagrees with current on {key!r}"
                )


def _require_equal(spec: EnvSpec, a: dict, b: dict, where: str) -> None:
    if set(a) != set(b):
        raise EnvContractError(f"env {spec.name!r}, {where}: entries {sorted(a)} and {sorted(b)} differ")
    for group in a:
        if set(a[group]) != set(b[group]):
            raise EnvContractError(f"env {spec.name!r}, {where}: group {group!r} entries differ")
        for key, value in a[group].items():
            other = b[group][key]
            if value.dtype != other.dtype or value.shape != other.shape:
                raise EnvContractError(
                    f"env {spec.name!r}, {where}: {group}.{key} is {value.dtype} {tuple(value.shape)} in one vector "
                    f"and {other.dtype} {tuple(other.shape)} in the other"
                )
            if not torch.equal(value, other):
                copies = (value != other).reshape(value.shape[0], -1).any(-1)
                e = int(copies.nonzero()[0])
                raise EnvContractError(f"env {spec.name!r}, {where}: {group}.{key} differs, first in copy {e}")
