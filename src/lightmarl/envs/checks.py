"""Checks that a vector of env copies honours the contract lightmarl's collector relies on.

TorchRL checks a TorchRL env with `torchrl.envs.utils.check_env_specs`: a short random
rollout whose data must match the env's specs (keys, shapes, dtypes). This module does the same
for lightmarl's [`VecEnv`][lightmarl.envs.base.VecEnv] protocol, plus what multi-agent envs add:
validity of agents, action masks, episode ends and seeding. (A raw PettingZoo env is checked
before it is vectorized, by `lightmarl.envs.pettingzoo.checks`.)

* [`check_vec_env`][lightmarl.envs.checks.check_vec_env]: a random rollout of a vector (in-process or worker processes): shapes
  and dtypes per group match the [`GroupSpec`][lightmarl.envs.spec.GroupSpec], absent agents are
  masked, every legal action set is non-empty, ``done`` is ``terminated | truncated``, agents
  leave only through ``done``, and ended episodes are reset. For turn-based envs
  (``EnvSpec.turn_based``) exactly one row per copy is valid, and rewards and ends may reach rows
  of agents that did not act (the loser's -1 on the winner's turn).
* [`check_same_trajectories`][lightmarl.envs.checks.check_same_trajectories]: two vectors stepped with the same actions produce the same
  data (same seed twice, or in-process against worker processes).

Example:
    >>> from lightmarl.envs import PettingZooEnvConfig, check_same_trajectories, check_vec_env
    >>> config = PettingZooEnvConfig(env_kwargs={"max_cycles": 10}, num_envs=2)
    >>> report = check_vec_env(config.make_vector(seed=0), num_steps=25)
    >>> report.episode_ends
    4
    >>> check_same_trajectories(config.make_vector(seed=0), config.make_vector(seed=0))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lightmarl import keys
from lightmarl.envs.base import Outputs, VecEnv
from lightmarl.envs.layout import ROOT
from lightmarl.envs.spec import EnvSpec, GroupSpec, observation_storage_dtype
from lightmarl.errors import EnvContractError

# -- vectors -----------------------------------------------------------------------------


@dataclass(frozen=True)
class VecEnvCheck:
    """What [`check_vec_env`][lightmarl.envs.checks.check_vec_env] saw.

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


def random_actions(spec: EnvSpec, current: Outputs, generator: torch.Generator) -> dict[str, torch.Tensor]:
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
        A `VecEnvCheck` with counts of what happened (e.g. whether any episode ended).

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
            # Turn-based: validity passes to the next player every step, which is no leaving.
            vanished = before & ~done & going_on & ~after[g.name][keys.VALID] & (not spec.turn_based)
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
    stored = torch.uint8 if observation_storage_dtype(g.observation_dtype) == "uint8" else torch.float32
    fields = {keys.OBSERVATION: (stored, (*rows, *g.observation_shape))}
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
        if section != "current":  # the env info fields the spec declares (NaN where not reported)
            expected.update(
                {keys.info_key(name): (torch.float32, (num_envs, g.num_agents)) for name in spec.info_fields}
            )
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
    if spec.turn_based and (present != 1).any():
        e = int((present != 1).nonzero()[0])
        raise EnvContractError(
            f"env {spec.name!r} (copy {e}), {where}: a turn-based env has exactly one valid row (the acting agent) "
            f"per copy; got {int(present[e])}"
        )


def _check_next(
    spec: EnvSpec,
    num_envs: int,
    nxt: Any,
    current: Outputs,
    ended: torch.Tensor,
    where: str,
) -> None:
    _check_layout(spec, num_envs, nxt, keys.NEXT, where)
    for g in spec.groups.values():
        entries, acted = nxt[g.name], current[g.name][keys.VALID]
        if not torch.equal(entries[keys.DONE], entries[keys.TERMINATED] | entries[keys.TRUNCATED]):
            raise EnvContractError(f"env {spec.name!r}, {where}: {g.name}.done must be terminated | truncated")
        for key in (keys.REWARD, keys.DONE):
            if not spec.turn_based and entries[key][~acted].any():
                raise EnvContractError(
                    f"env {spec.name!r}, {where}: {g.name}.{key} is set for agents that were absent (valid False)"
                )
        unfinished = ended.view(-1, 1) & acted & ~entries[keys.DONE]
        if unfinished.any():
            e, i = (int(x) for x in unfinished.nonzero()[0])
            raise EnvContractError(
                f"env {spec.name!r} (copy {e}), {where}: the episode ended but agent {g.agents[i]!r} is not done"
            )


def _check_observation_td(vec: VecEnv, current: Outputs, where: str) -> None:
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
