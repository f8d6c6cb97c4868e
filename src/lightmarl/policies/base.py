"""The policy contract: a module that reads a group's observations and writes its actions."""

from __future__ import annotations

import contextlib
import inspect
import math
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torch.distributions import Categorical
from torchrl.envs.utils import ExplorationType, exploration_type

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec


@dataclass(frozen=True)
class StackableActor:
    """A discrete actor that several bindings can run as one batched forward.

    ``MultiAgentPolicy`` stacks the weights of bindings whose actors
    have the same layer shapes and runs them with one batched matrix product per layer, instead of
    one forward per binding. A policy offers this through ``Policy.stackable_actor()`` only when
    these layers *are* its action rule.

    Attributes:
        layers: observation -> logits: ``nn.Linear`` layers with a bias and parameter-free
            activations (``Tanh``, ``ReLU``, ``ELU``, ``GELU``), applied in order to the float
            observation vector as stored.
        default_mode: the exploration type the actor acts with when none is set.
    """

    layers: Sequence[nn.Module]
    default_mode: ExplorationType


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
        #: how to rebuild this policy: ``{"class_path", "policy_kwargs"}`` (set by the registry).
        self.origin: dict[str, Any] = {}

    def key(self, name: str) -> tuple[str, str]:
        """The nested key of entry ``name`` of this policy's group."""
        return (self.group.name, name)

    def initialize_to_environment(self, group: GroupSpec) -> None:
        """Check (and adapt to) the group the policy will act for; called before any rollout.

        Raises:
            ValueError: when the policy was built for different spaces.
        """
        mine, theirs = self.group, group
        if (mine.observation_shape, mine.action_kind, mine.num_actions, mine.action_shape, mine.action_nvec) != (
            theirs.observation_shape,
            theirs.action_kind,
            theirs.num_actions,
            theirs.action_shape,
            theirs.action_nvec,
        ):
            raise ValueError(
                f"policy {type(self).__name__} was built for observations {mine.observation_shape} / "
                f"{mine.action_kind} actions ({mine.num_actions or mine.action_shape}), but group "
                f"{theirs.name!r} has observations {theirs.observation_shape} / {theirs.action_kind} actions "
                f"({theirs.num_actions or theirs.action_shape})"
            )
        self.group = group

    def stackable_actor(self) -> StackableActor | None:
        """This policy's action rule as plain layers a batched forward can stack, or ``None``
        (the default: the policy's own ``forward`` acts)."""
        return None

    @abstractmethod
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase: ...


class ScriptedPolicy(Policy):
    """A hand-written policy: implement [`act`][lightmarl.policies.base.ScriptedPolicy.act], or [`action_logits`][lightmarl.policies.base.ScriptedPolicy.action_logits], and nothing else.

    ``act`` returns actions directly (a deterministic script, or one that samples itself).
    ``action_logits`` gives a distribution over discrete actions instead: ``forward`` then
    samples from it (``ExplorationType.RANDOM``, as during collection) or takes its mode
    (any other exploration type, as in deterministic evaluation), writes the ``logits`` next
    to the action and reports the action's real log-probability, and the script can serve
    as a distillation teacher ([`lightmarl.algorithms.Distillation`][lightmarl.algorithms.distillation.Distillation]). Both hooks may
    take ``agent_id`` (each row's index in the env's ``possible_agents``) to tell agents apart;
    scripts written without that argument keep working.

    Example:
        >>> class AlwaysUp(ScriptedPolicy):
        ...     def act(self, observation, action_mask=None, agent_id=None):
        ...         return torch.full(observation.shape[:-1], 4, dtype=torch.int64)
        >>> class MostlyUp(ScriptedPolicy):
        ...     def action_logits(self, observation, action_mask=None, agent_id=None):
        ...         logits = torch.zeros(*observation.shape[:-1], self.group.num_actions)
        ...         return logits.index_fill(-1, torch.tensor([4]), 2.0)
    """

    _act_takes_agent_id: bool = True
    _logits_take_agent_id: bool = True
    #: the script's own random stream (``None``: it draws from torch's global one); see [`own_random_stream`][lightmarl.policies.base.ScriptedPolicy.own_random_stream].
    generator: torch.Generator | None = None
    #: the seed `generator` starts from.
    random_seed: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._act_takes_agent_id = _accepts_keyword(cls.act, keys.AGENT_ID)
        cls._logits_take_agent_id = _accepts_keyword(cls.action_logits, keys.AGENT_ID)

    def __init__(self, group: GroupSpec) -> None:
        super().__init__(group)
        if type(self).act is ScriptedPolicy.act and not self.has_distribution:
            raise TypeError(f"{type(self).__name__} is a ScriptedPolicy without act() or action_logits(): define one")
        if self.has_distribution and group.action_kind != "discrete":
            raise ValueError(
                f"{type(self).__name__} defines action_logits, which needs discrete actions; group "
                f"{group.name!r} has {group.action_kind} actions (define act() instead)"
            )

    def own_random_stream(self, seed: int | None) -> None:
        """Sample from a generator of the script's own, `generator`, started from ``seed`` (``None``: none).

        A script that samples with its own generator keeps it out of torch's global stream, so
        that it meets the same draws whatever else the run samples; evaluation restarts it from
        ``seed`` ([`fresh_random_stream`][lightmarl.policies.base.ScriptedPolicy.fresh_random_stream]).
        """
        self.random_seed = seed
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)

    @contextlib.contextmanager
    def fresh_random_stream(self) -> Iterator[None]:
        """Run the block with `generator` restarted from its seed, and give its previous state back after.

        Evaluation plays the script as one built afresh would, whatever it drew while it played
        in training rollouts, so the same checkpoint evaluates the same in ``fit`` and in a later
        ``validate``; training then goes on with the stream where it was.
        """
        if self.generator is None or self.random_seed is None:
            yield
            return
        state = self.generator.get_state()
        self.generator.manual_seed(self.random_seed)
        try:
            yield
        finally:
            self.generator.set_state(state)

    @property
    def has_distribution(self) -> bool:
        """Whether the script defines [`action_logits`][lightmarl.policies.base.ScriptedPolicy.action_logits] (and so can teach)."""
        return type(self).action_logits is not ScriptedPolicy.action_logits

    def act(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Actions for ``observation`` (``[*batch, obs...]``) -> ``[*batch]`` ints or ``[*batch, *action_shape]``.

        ``agent_id`` (``[*batch]``, or ``None`` outside an env) is each row's index in
        ``possible_agents``. The default takes the mode of [`action_logits`][lightmarl.policies.base.ScriptedPolicy.action_logits].
        """
        logits = self._logits(observation, action_mask, agent_id)
        if logits is None:
            raise NotImplementedError(f"{type(self).__name__}.action_logits returned None and act() is not defined")
        return masked_logits(logits, action_mask).argmax(-1)

    def action_logits(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor | None:
        """Unnormalised log-probabilities ``[*batch, num_actions]`` of the discrete actions, or ``None``.

        ``None`` (the default) marks a deterministic script: [`act`][lightmarl.policies.base.ScriptedPolicy.act] decides and the
        script cannot be a distillation teacher. Illegal actions (``action_mask`` False) are
        masked out by the caller; the script need not do it.
        """
        del observation, action_mask, agent_id
        return None

    def action_log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Log-probability of the chosen actions of [`act`][lightmarl.policies.base.ScriptedPolicy.act]; deterministic scripts report 0."""
        return torch.zeros(action.shape[: action.ndim - len(self.group.action_shape)])

    def _logits(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None, agent_id: torch.Tensor | None
    ) -> torch.Tensor | None:
        if self._logits_take_agent_id:
            return self.action_logits(observation, action_mask, agent_id=agent_id)
        return self.action_logits(observation, action_mask)

    def _act(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None, agent_id: torch.Tensor | None
    ) -> torch.Tensor:
        if self._act_takes_agent_id:
            return self.act(observation, action_mask, agent_id=agent_id)
        return self.act(observation, action_mask)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        observation = tensordict.get(self.key(keys.OBSERVATION))
        mask = tensordict.get(self.key(keys.ACTION_MASK), None)
        agent_id = tensordict.get(self.key(keys.AGENT_ID), None)
        logits = self._logits(observation, mask, agent_id) if self.has_distribution else None
        if logits is None:
            # Scripts may compute on the CPU (their own generators live there): results go where the rows are.
            action = self._act(observation, mask, agent_id).to(device=observation.device, dtype=self.group.action_dtype)
            log_prob = self.action_log_prob(action).to(observation.device)
        else:
            dist = Categorical(logits=masked_logits(logits, mask))
            # Same rule as TorchRL's ProbabilisticActor: sample only under RANDOM; no context = deterministic.
            action = dist.sample() if exploration_type() == ExplorationType.RANDOM else dist.mode
            log_prob = dist.log_prob(action)
            tensordict.set(self.key(keys.LOGITS), logits)
        tensordict.set(self.key(keys.ACTION), action)
        tensordict.set(self.key(keys.ACTION_LOG_PROB), log_prob)
        return tensordict


def masked_logits(logits: torch.Tensor, action_mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with illegal actions pushed to the dtype's minimum (finite: no NaN in softmax or KL)."""
    if action_mask is None:
        return logits
    return logits.masked_fill(~action_mask.bool(), torch.finfo(logits.dtype).min)


def _accepts_keyword(function: Callable[..., Any], name: str) -> bool:
    parameters = inspect.signature(function).parameters.values()
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class UniformRandomPolicy(ScriptedPolicy):
    """Uniformly random legal actions: the baseline every trained policy must beat.

    Args:
        group: the agent group this policy acts for.
        seed: seed of the policy's own generator (``None``: torch's global RNG).
    """

    def __init__(self, group: GroupSpec, seed: int | None = None) -> None:
        super().__init__(group)
        self.own_random_stream(seed)

    def act(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor:
        batch = observation.shape[: observation.ndim - len(self.group.observation_shape)]
        if self.group.action_kind == "continuous":
            low = torch.tensor(self.group.action_low).view(self.group.action_shape)
            high = torch.tensor(self.group.action_high).view(self.group.action_shape)
            u = torch.rand(*batch, *self.group.action_shape, generator=self.generator)
            return low + u * (high - low)
        # Sampled on the CPU, where the policy's own generator is; forward() moves the actions to the rows.
        weights = torch.ones(*batch, self.group.num_actions) if action_mask is None else action_mask.float().cpu()
        choices = []
        # One categorical per sub-action (a single one for Discrete), over its slice of the mask.
        for part in weights.split(list(self.group.action_nvec or (self.group.num_actions,)), dim=-1):
            flat = part.reshape(-1, part.shape[-1])
            flat = torch.where(flat.sum(-1, keepdim=True) > 0, flat, 1.0)  # absent agents' empty masks
            choices.append(torch.multinomial(flat, 1, generator=self.generator).view(batch))
        return choices[0] if self.group.action_kind == "discrete" else torch.stack(choices, dim=-1)

    def action_log_prob(self, action: torch.Tensor) -> torch.Tensor:
        if self.group.action_kind == "continuous":
            width = torch.tensor(self.group.action_high) - torch.tensor(self.group.action_low)
            return torch.full(action.shape[: action.ndim - 1], -float(torch.log(width).sum()))
        if self.group.action_kind == "multi_discrete":
            return torch.full(action.shape[:-1], -sum(math.log(n) for n in self.group.action_nvec))
        return torch.full(action.shape, -math.log(self.group.num_actions))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        super().forward(tensordict)
        mask = tensordict.get(self.key(keys.ACTION_MASK), None)
        if mask is not None and self.group.action_kind != "continuous":
            # Uniform over the legal choices: -log(their number) per (sub-)action; an empty mask
            # (an absent agent's) is sampled over every choice, as in act().
            sizes = list(self.group.action_nvec or (self.group.num_actions,))
            log_prob = torch.zeros(mask.shape[:-1], device=mask.device)
            for part, size in zip(mask.bool().split(sizes, dim=-1), sizes, strict=True):
                legal = part.sum(-1)
                log_prob -= torch.where(legal > 0, legal, size).float().log()
            tensordict.set(self.key(keys.ACTION_LOG_PROB), log_prob)
        return tensordict


class NoOpPolicy(ScriptedPolicy):
    """Always the env's no-op: discrete action 0 (0 for every sub-action of a multi-discrete
    action), or the zero vector for continuous actions; with an action mask, the first legal choice."""

    def act(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor:
        batch = observation.shape[: observation.ndim - len(self.group.observation_shape)]
        if self.group.action_kind == "continuous":
            return torch.zeros(*batch, *self.group.action_shape)
        if action_mask is None:
            return torch.zeros(*batch, *self.group.action_shape, dtype=torch.int64)
        # argmax of a bool mask as float: the first legal choice of each (sub-)action.
        choices = [
            part.float().argmax(-1)
            for part in action_mask.split(list(self.group.action_nvec or (self.group.num_actions,)), dim=-1)
        ]
        return choices[0] if self.group.action_kind == "discrete" else torch.stack(choices, dim=-1)


@contextlib.contextmanager
def fresh_random_streams(module: nn.Module) -> Iterator[None]:
    """[`ScriptedPolicy.fresh_random_stream`][lightmarl.policies.base.ScriptedPolicy.fresh_random_stream] for every scripted policy in ``module`` (a population, say)."""
    with contextlib.ExitStack() as stack:
        for sub in module.modules():
            if isinstance(sub, ScriptedPolicy):
                stack.enter_context(sub.fresh_random_stream())
        yield
