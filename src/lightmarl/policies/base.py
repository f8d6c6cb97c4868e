"""The policy contract: a module that reads a group's observations and writes its actions."""

from __future__ import annotations

import math
from abc import abstractmethod

import torch
from tensordict import TensorDictBase
from torch import nn

from lightmarl.data import schema
from lightmarl.envs.spec import GroupSpec


class Policy(nn.Module):
    """Base class of every policy a binding can hold, neural or scripted.

    A policy is built for one agent group with ``PolicyClass(group, **policy_kwargs)``.
    ``forward(td)`` reads ``td[group.name, "observation"]`` (and ``"action_mask"`` when
    the env has one) with batch ``[*batch, agents]`` and writes ``(group, "action")`` and
    ``(group, "action_log_prob")``; neural policies also write ``(group, "logits")``
    (discrete) or ``loc``/``scale`` (continuous).

    Args:
        group: the agent group this policy acts for.
    """

    #: the policy has a value head (``critic``) that PPO-style algorithms can train.
    has_critic: bool = False

    def __init__(self, group: GroupSpec) -> None:
        super().__init__()
        self.group = group

    def key(self, name: str) -> tuple[str, str]:
        """The nested key of entry ``name`` of this policy's group."""
        return (self.group.name, name)

    def initialize_to_environment(self, group: GroupSpec) -> None:
        """Check (and adapt to) the group the policy will act for; called before any rollout.

        Raises:
            ValueError: when the policy was built for different spaces.
        """
        mine, theirs = self.group, group
        if (mine.observation_shape, mine.action_kind, mine.num_actions, mine.action_shape) != (
            theirs.observation_shape,
            theirs.action_kind,
            theirs.num_actions,
            theirs.action_shape,
        ):
            raise ValueError(
                f"policy {type(self).__name__} was built for observations {mine.observation_shape} / "
                f"{mine.action_kind} actions ({mine.num_actions or mine.action_shape}), but group "
                f"{theirs.name!r} has observations {theirs.observation_shape} / {theirs.action_kind} actions "
                f"({theirs.num_actions or theirs.action_shape})"
            )
        self.group = group

    @abstractmethod
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase: ...


class ScriptedPolicy(Policy):
    """A hand-written policy: implement :meth:`act` and nothing else.

    Example:
        >>> class AlwaysFirstAction(ScriptedPolicy):
        ...     def act(self, observation, action_mask=None):
        ...         return torch.zeros(observation.shape[:-1], dtype=torch.int64)
    """

    @abstractmethod
    def act(self, observation: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Actions for ``observation`` (``[*batch, obs...]``) -> ``[*batch]`` ints or ``[*batch, *action_shape]``."""

    def action_log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Log-probability of the chosen actions; deterministic scripts report 0."""
        return torch.zeros(action.shape[: action.ndim - len(self.group.action_shape)])

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        observation = tensordict.get(self.key(schema.OBSERVATION))
        mask = tensordict.get(self.key(schema.ACTION_MASK), None)
        action = self.act(observation, mask).to(self.group.action_dtype)
        tensordict.set(self.key(schema.ACTION), action)
        tensordict.set(self.key(schema.ACTION_LOG_PROB), self.action_log_prob(action))
        return tensordict


class UniformRandomPolicy(ScriptedPolicy):
    """Uniformly random legal actions: the baseline every trained policy must beat.

    Args:
        group: the agent group this policy acts for.
        seed: seed of the policy's own generator (``None``: torch's global RNG).
    """

    def __init__(self, group: GroupSpec, seed: int | None = None) -> None:
        super().__init__(group)
        self._generator = None if seed is None else torch.Generator().manual_seed(seed)

    def act(self, observation: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch = observation.shape[: observation.ndim - len(self.group.observation_shape)]
        if self.group.action_kind == "continuous":
            low = torch.tensor(self.group.action_low).view(self.group.action_shape)
            high = torch.tensor(self.group.action_high).view(self.group.action_shape)
            u = torch.rand(*batch, *self.group.action_shape, generator=self._generator)
            return low + u * (high - low)
        weights = torch.ones(*batch, self.group.num_actions) if action_mask is None else action_mask.float()
        return torch.multinomial(weights.reshape(-1, self.group.num_actions), 1, generator=self._generator).view(batch)

    def action_log_prob(self, action: torch.Tensor) -> torch.Tensor:
        if self.group.action_kind == "continuous":
            width = torch.tensor(self.group.action_high) - torch.tensor(self.group.action_low)
            return torch.full(action.shape[: action.ndim - 1], -float(torch.log(width).sum()))
        return torch.full(action.shape, -math.log(self.group.num_actions))


class NoOpPolicy(ScriptedPolicy):
    """Always the env's no-op: discrete action 0, or the zero vector for continuous actions."""

    def act(self, observation: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch = observation.shape[: observation.ndim - len(self.group.observation_shape)]
        if self.group.action_kind == "continuous":
            return torch.zeros(*batch, *self.group.action_shape)
        if action_mask is not None:
            return action_mask.float().argmax(-1)  # first legal action
        return torch.zeros(batch, dtype=torch.int64)
