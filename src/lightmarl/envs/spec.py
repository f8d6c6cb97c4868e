"""What the population needs to know about an env: its agents, groups and spaces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch


@dataclass(frozen=True)
class GroupSpec:
    """Agents that share observation and action spaces (TorchRL's *group*).

    Rows of one group are batched together; a binding controls agents of one group.

    Attributes:
        name: group key in experience TensorDicts (``"agent"`` for ``agent_0..N``).
        agents: agent names, in the env's ``possible_agents`` order.
        agent_ids: each agent's index in ``possible_agents``.
        observation_shape: shape of one agent's observation.
        action_kind: ``"discrete"`` (``Discrete(n)``) or ``"continuous"`` (``Box``).
        num_actions: number of discrete actions (discrete groups only).
        action_shape: shape of one continuous action (empty for discrete).
        action_low: lower bound of continuous actions.
        action_high: upper bound of continuous actions.
        has_action_mask: observations come with an ``action_mask`` entry.
    """

    name: str
    agents: tuple[str, ...]
    agent_ids: tuple[int, ...]
    observation_shape: tuple[int, ...]
    action_kind: Literal["discrete", "continuous"]
    num_actions: int = 0
    action_shape: tuple[int, ...] = ()
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    has_action_mask: bool = False

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def action_dtype(self) -> torch.dtype:
        return torch.int64 if self.action_kind == "discrete" else torch.float32


@dataclass(frozen=True)
class EnvSpec:
    """The population-facing description of a multi-agent env.

    Attributes:
        name: a readable env name for messages and logs.
        possible_agents: every agent name the env can have, in order.
        groups: group name -> spec, in first-appearance order of ``possible_agents``.
    """

    name: str
    possible_agents: tuple[str, ...]
    groups: dict[str, GroupSpec] = field(default_factory=dict)

    def group_of(self, agent: str) -> GroupSpec:
        for group in self.groups.values():
            if agent in group.agents:
                return group
        raise KeyError(agent)


def default_group_name(agent: str) -> str:
    """TorchRL's PettingZoo convention: ``agent_0`` -> ``agent``, ``adversary_1`` -> ``adversary``."""
    head, sep, tail = agent.rpartition("_")
    return head if sep and tail.isdigit() else agent


def space_signature(observation_space, action_space) -> tuple:
    """A hashable summary of an agent's spaces: agents with equal signatures can share a group."""
    from gymnasium import spaces

    obs_space = observation_space
    has_mask = False
    if isinstance(obs_space, spaces.Dict):
        if "observation" not in obs_space.spaces:
            raise ValueError(
                f"Dict observation spaces need an 'observation' entry (and optionally 'action_mask'); "
                f"got keys {sorted(obs_space.spaces)}"
            )
        has_mask = "action_mask" in obs_space.spaces
        obs_space = obs_space.spaces["observation"]
    if not isinstance(obs_space, spaces.Box):
        raise ValueError(f"unsupported observation space {observation_space!r}: expected Box or Dict(observation=Box)")
    action: tuple
    if isinstance(action_space, spaces.Discrete):
        action = ("discrete", int(action_space.n), (), (), ())
    elif isinstance(action_space, spaces.Box):
        action = (
            "continuous",
            0,
            tuple(action_space.shape),
            tuple(np.broadcast_to(action_space.low, action_space.shape).ravel().tolist()),
            tuple(np.broadcast_to(action_space.high, action_space.shape).ravel().tolist()),
        )
    else:
        raise ValueError(f"unsupported action space {action_space!r}: expected Discrete or Box")
    return (tuple(obs_space.shape), has_mask, *action)
