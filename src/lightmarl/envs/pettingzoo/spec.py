"""The [`EnvSpec`][lightmarl.envs.spec.EnvSpec] of a PettingZoo env: agents grouped by name prefix, spaces checked.

Torch-free (worker processes import the AEC module, which uses it).
"""

from __future__ import annotations

from typing import Any

from lightmarl import keys
from lightmarl.envs.spec import EnvSpec, GroupSpec, agent_names, default_group_name, space_signature


def env_spec_of(env: Any, name: str, state: bool = False) -> EnvSpec:
    """Name the env's agents (`agent_name`: any hashable id), group them by
    name prefix (TorchRL's convention) and check each group's spaces; with ``state``, also read the
    shape of the env's global state (``state_space``)."""
    env_agents = tuple(env.possible_agents)
    if not env_agents:
        raise ValueError(f"env {name!r}: possible_agents is empty")
    agents = agent_names(env_agents, name)
    env_id = dict(zip(agents, env_agents))
    members: dict[str, list[str]] = {}
    for agent in agents:
        members.setdefault(default_group_name(agent), []).append(agent)
    groups: dict[str, GroupSpec] = {}
    for group_name, group_agents in members.items():
        signatures = {}
        for agent in group_agents:
            try:
                signatures[agent] = space_signature(
                    env.observation_space(env_id[agent]), env.action_space(env_id[agent])
                )
            except ValueError as err:
                raise ValueError(f"env {name!r}, agent {env_id[agent]!r}: {err}") from None
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
            env_agents=tuple(env_id[a] for a in group_agents),
            **dict(signatures[group_agents[0]]),
        )
    state_shape = global_state_shape(env, name, groups) if state else None
    return EnvSpec(name=name, possible_agents=agents, groups=groups, state_shape=state_shape, env_agents=env_agents)


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
