"""What the population needs to know about an env: its agents, groups and spaces.

Plain data, torch-free at import: env worker processes read it (see `lightmarl.envs.runners`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class GroupSpec:
    """Agents that share observation and action spaces (TorchRL's *group*).

    Rows of one group are batched together; a binding controls agents of one group.

    Attributes:
        name: group key in experience TensorDicts (``"agent"`` for ``agent_0..N``).
        agents: agent names (`agent_name` of the env's ids), in the env's ``possible_agents``
            order: what maps, ``policy_mapping_fn``, metrics and messages use.
        agent_ids: each agent's index in ``possible_agents``.
        observation_shape: shape of one agent's observation.
        action_kind: ``"discrete"`` (``Discrete(n)``), ``"multi_discrete"`` (``MultiDiscrete(nvec)``:
            one choice per entry of ``nvec``) or ``"continuous"`` (``Box``).
        num_actions: number of logits: ``n`` (discrete) or ``sum(nvec)`` (multi-discrete, the
            sub-actions' logits side by side); also the size of an ``action_mask``. 0 for continuous.
        action_shape: shape of one action: ``()`` (discrete), ``(len(nvec),)`` (multi-discrete) or
            the ``Box`` shape (continuous).
        action_low: lower bound of continuous actions.
        action_high: upper bound of continuous actions.
        has_action_mask: observations come with an ``action_mask`` entry.
        action_nvec: choices per sub-action (multi-discrete groups only).
        observation_dtype: NumPy dtype name of the env's observations (e.g. ``"uint8"`` for
            images). Vectors, rollouts and replay buffers keep ``uint8`` observations as ``uint8``
            (a quarter of the memory; encoders convert them to float on the device that trains)
            and every other dtype as float32: `observation_storage_dtype`.
        env_agents: the env's own ids of ``agents`` (any hashable: ``str``, ``int``, ``tuple``), what
            its dicts are keyed by; only the stepping code talks to the env with them. Defaults to
            ``agents``.
    """

    name: str
    agents: tuple[str, ...]
    agent_ids: tuple[int, ...]
    observation_shape: tuple[int, ...]
    action_kind: Literal["discrete", "multi_discrete", "continuous"]
    num_actions: int = 0
    action_shape: tuple[int, ...] = ()
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    has_action_mask: bool = False
    action_nvec: tuple[int, ...] = ()
    observation_dtype: str = "float32"
    env_agents: tuple[Hashable, ...] = ()

    def __post_init__(self) -> None:
        _default_env_agents(self)

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def action_dtype(self) -> torch.dtype:
        import torch  # lazily: worker processes import this module and must not pay for torch

        return torch.float32 if self.action_kind == "continuous" else torch.int64


@dataclass(frozen=True)
class EnvSpec:
    """The population-facing description of a multi-agent env.

    Attributes:
        name: a readable env name for messages and logs.
        possible_agents: every agent name the env can have, in order (`agent_name` of the
            env's ids).
        groups: group name -> spec, in first-appearance order of ``possible_agents``.
        state_shape: shape of the env's global ``state()`` when the vector records it (at the
            experience root key ``"state"``), else ``None``.
        env_agents: the env's own ids of ``possible_agents``, in the same order (defaults to
            ``possible_agents``).
        turn_based: one agent acts per step (a PettingZoo AEC env): each copy has exactly one
            valid row, and rewards and ends may arrive in rows of agents that did not act.
        info_fields: numeric fields of the env's per-agent ``infos`` that every step's results
            carry per group, as ``info/<field>`` ``[num_envs, agents_in_group]`` float32 (NaN where
            the agent's info did not report the field at that step); the env config's
            ``info_fields``.
    """

    name: str
    possible_agents: tuple[str, ...]
    groups: dict[str, GroupSpec] = field(default_factory=dict)
    state_shape: tuple[int, ...] | None = None
    env_agents: tuple[Hashable, ...] = ()
    turn_based: bool = False
    info_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _default_env_agents(self)

    def group_of(self, agent: Hashable) -> GroupSpec:
        """The group of an agent, given by name or by the env's own id (no name equals another agent's
        id: `agent_names` makes sure)."""
        for group in self.groups.values():
            if agent in group.agents or agent in group.env_agents:
                return group
        raise KeyError(agent)


def _default_env_agents(spec: GroupSpec | EnvSpec) -> None:
    names = spec.agents if isinstance(spec, GroupSpec) else spec.possible_agents
    if not spec.env_agents:
        object.__setattr__(spec, "env_agents", tuple(names))  # frozen dataclass
    elif len(spec.env_agents) != len(names):
        raise ValueError(f"{len(spec.env_agents)} env agent ids for {len(names)} agent names")


def agent_name(agent: Hashable) -> str:
    """The readable name lightmarl gives an env's agent id: groups, maps and metrics use it.

    A ``str`` id is its own name; an ``int`` id ``i`` is ``agent_i``; a ``tuple`` id joins its
    parts with ``_`` (``("red", 0)`` -> ``red_0``), after ``agent`` when its first part is not
    a string (``(0, 1)`` -> ``agent_0_1``); any other hashable is its ``str()``. Agents are
    then grouped by name prefix (`default_group_name`).
    """
    if isinstance(agent, str):
        return agent
    if isinstance(agent, tuple):
        parts = [str(part) for part in agent]
        return "_".join(parts if agent and isinstance(agent[0], str) else ["agent", *parts])
    if isinstance(agent, (int, np.integer)) and not isinstance(agent, bool):
        return f"agent_{int(agent)}"
    return str(agent)


def agent_names(env_agents: Sequence[Hashable], env_name: str) -> tuple[str, ...]:
    """`agent_name` of every env id, checked to be unique.

    Raises:
        ValueError: where two ids get the same name (e.g. ``0`` and ``"agent_0"``), naming both.
    """
    names: dict[str, Hashable] = {}
    for agent in env_agents:
        if not isinstance(agent, Hashable):
            raise ValueError(f"env {env_name!r}: agent id {agent!r} is not hashable; PettingZoo agent ids key dicts")
        name = agent_name(agent)
        if name in names:
            raise ValueError(
                f"env {env_name!r}: agent ids {names[name]!r} and {agent!r} both get the name {name!r}; "
                "lightmarl names an int id i 'agent_i' and joins a tuple's parts with '_': give the agents "
                "ids whose names differ"
            )
        names[name] = agent
    return tuple(names)


def observation_storage_dtype(dtype: str) -> str:
    """The dtype (NumPy name) vectors and experience keep observations of the env's ``dtype`` in:
    ``uint8`` stays ``uint8`` (images: converted to float by the policy's encoder), the rest is ``float32``."""
    return "uint8" if dtype == "uint8" else "float32"


def default_group_name(agent: str) -> str:
    """TorchRL's PettingZoo convention: ``agent_0`` -> ``agent``, ``adversary_1`` -> ``adversary``."""
    head, sep, tail = agent.rpartition("_")
    return head if sep and tail.isdigit() else agent


def space_signature(observation_space, action_space) -> tuple[tuple[str, Any], ...]:
    """A hashable summary of an agent's spaces: agents with equal signatures can share a group.

    Returns:
        ``(field, value)`` pairs of [`GroupSpec`][lightmarl.envs.spec.GroupSpec] (every field but the group's name and agents).

    Raises:
        ValueError: for spaces lightmarl cannot batch, saying what is supported.
    """
    from gymnasium import spaces

    obs_space = observation_space
    mask_space = None
    if isinstance(obs_space, spaces.Dict):
        if "observation" not in obs_space.spaces:
            raise ValueError(
                f"Dict observation spaces need an 'observation' entry (and optionally 'action_mask'); "
                f"got keys {sorted(obs_space.spaces)}"
            )
        mask_space = obs_space.spaces.get("action_mask")
        obs_space = obs_space.spaces["observation"]
    if not isinstance(obs_space, spaces.Box):
        raise ValueError(
            f"unsupported observation space {observation_space!r}: expected Box (vector or image) "
            "or Dict(observation=Box, action_mask=...)"
        )
    fields: dict[str, Any] = {
        "observation_shape": tuple(obs_space.shape),
        "observation_dtype": np.dtype(obs_space.dtype).name,
        "has_action_mask": mask_space is not None,
    }
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError(
                f"unsupported action space {action_space!r}: Discrete actions must start at 0 (start={action_space.start})"
            )
        fields.update(action_kind="discrete", num_actions=int(action_space.n))
    elif isinstance(action_space, spaces.MultiDiscrete):
        if action_space.nvec.ndim != 1 or np.any(action_space.start != 0):
            raise ValueError(
                f"unsupported action space {action_space!r}: MultiDiscrete actions must be one-dimensional "
                "nvec starting at 0"
            )
        nvec = tuple(int(n) for n in action_space.nvec)
        fields.update(action_kind="multi_discrete", num_actions=sum(nvec), action_shape=(len(nvec),), action_nvec=nvec)
    elif isinstance(action_space, spaces.Box):
        fields.update(
            action_kind="continuous",
            action_shape=tuple(action_space.shape),
            action_low=tuple(np.broadcast_to(action_space.low, action_space.shape).ravel().tolist()),
            action_high=tuple(np.broadcast_to(action_space.high, action_space.shape).ravel().tolist()),
        )
    else:
        raise ValueError(f"unsupported action space {action_space!r}: expected Discrete, MultiDiscrete or Box")
    if mask_space is not None:
        if fields["action_kind"] == "continuous":
            raise ValueError(
                f"an 'action_mask' needs Discrete or MultiDiscrete actions; the action space is {action_space!r}"
            )
        if tuple(getattr(mask_space, "shape", None) or ()) != (fields["num_actions"],):
            raise ValueError(
                f"the 'action_mask' space {mask_space!r} must have shape ({fields['num_actions']},): one entry per "
                + ("action" if fields["action_kind"] == "discrete" else "choice of each sub-action, side by side")
                + f" of {action_space!r}"
            )
    return tuple(sorted(fields.items()))
