"""What an algorithm may read from a policy: one written contract per capability.

Each contract is a `typing.Protocol` naming the attributes a learner reads (so trainer
code can ``cast`` a checked policy to it and type-check its use), paired with a check that says,
in words, what a given policy lacks. A UnitTrainer lists the contracts it needs in ``requires``;
[`missing_capabilities`][lightmarl.policies.contracts.missing_capabilities] is what ``Algorithm.check_policy`` runs before the first env step.

Examples:
    >>> from lightmarl.envs.pettingzoo import PettingZooEnvConfig
    >>> from lightmarl.policies import MLPActorCritic, QNetworkPolicy
    >>> group = PettingZooEnvConfig(env_kwargs={"N": 3}).spec().groups["agent"]
    >>> missing_capabilities(MLPActorCritic(group), (StochasticActor, ValueCritic))
    []
    >>> satisfies(QNetworkPolicy(group), ValueCritic)
    False
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModuleBase, TensorDictParams

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec

#: a contract's check: the policy -> what it lacks, in words (empty when it satisfies the contract).
Check = Callable[[Any], list[str]]

_CHECKS: dict[type, Check] = {}


def _checked_by(check: Check) -> Callable[[type], type]:
    def register(contract: type) -> type:
        _CHECKS[contract] = check
        return contract

    return register


def _module(policy: Any, name: str) -> TensorDictModuleBase | None:
    # A policy is an nn.Module: a missing attribute raises AttributeError, which is the answer "lacks it".
    try:
        value = getattr(policy, name)
    except AttributeError:
        return None
    return value if isinstance(value, TensorDictModuleBase) else None


def _buffer(policy: Any, name: str) -> bool:
    return isinstance(getattr(policy, name, None), torch.Tensor)


def _group_key(policy: Any, name: str) -> tuple[str, str]:
    return (policy.group.name, name)


def _stochastic_actor(policy: Any) -> list[str]:
    actor = _module(policy, "actor")
    log_prob = _group_key(policy, keys.ACTION_LOG_PROB)
    if isinstance(actor, ProbabilisticTensorDictSequential) and log_prob in actor.out_keys:
        return []
    return [f"a stochastic `actor` (ProbabilisticActor) writing {log_prob!r}"]


@_checked_by(_stochastic_actor)
class StochasticActor(Protocol):
    """A probabilistic ``actor`` (e.g. TorchRL's ``ProbabilisticActor``) writing ``(group, "action")`` and ``(group, "action_log_prob")``.

    What PPO's ratio, SAC's reparameterised actor loss and distillation's KL read.
    """

    group: GroupSpec
    actor: ProbabilisticTensorDictSequential


def _value_critic(policy: Any) -> list[str]:
    critic = _module(policy, "critic")
    value = _group_key(policy, keys.STATE_VALUE)
    if getattr(policy, "has_critic", False) and critic is not None and value in critic.out_keys:
        return []
    return [f"a value `critic` (a TensorDictModule writing {value!r})"]


@_checked_by(_value_critic)
class ValueCritic(Protocol):
    """A value head ``critic`` writing ``(group, "state_value")``, and its kind.

    ``critic_kind`` is ``centralized`` (reads every agent of the group: MAPPO), ``local`` (IPPO)
    or another policy-specific kind (e.g. ``recurrent``).
    """

    group: GroupSpec
    has_critic: bool
    critic: TensorDictModuleBase
    critic_kind: str


def _q_values(policy: Any) -> list[str]:
    qvalue = _module(policy, "qvalue")
    needed = [_group_key(policy, keys.ACTION_VALUE), _group_key(policy, keys.CHOSEN_ACTION_VALUE)]
    if qvalue is not None and set(needed) <= set(qvalue.out_keys) and _buffer(policy, "epsilon"):
        return []
    return [f"a policy with Q-values (a `qvalue` TensorDictModule writing {needed}) and an `epsilon` buffer"]


@_checked_by(_q_values)
class QValues(Protocol):
    """Per-agent action values for discrete actions, acting epsilon-greedily.

    ``qvalue`` writes ``(group, "action_value")`` (every action), ``(group, "chosen_action_value")``
    and the greedy ``(group, "action")``; ``epsilon`` is the exploration-rate buffer a trainer
    schedules. What DQN and value decomposition (QMIX, VDN) train.
    """

    group: GroupSpec
    qvalue: TensorDictModuleBase
    epsilon: torch.Tensor


def _deterministic_actor(policy: Any) -> list[str]:
    actor = _module(policy, "actor")
    action = _group_key(policy, keys.ACTION)
    missing = []
    if actor is None or action not in actor.out_keys:
        missing.append(f"a deterministic `actor` writing {action!r}")
    elif isinstance(actor, ProbabilisticTensorDictSequential):
        missing.append("a deterministic `actor` (it has a stochastic one)")
    if not _buffer(policy, "exploration_noise"):
        missing.append("an `exploration_noise` buffer")
    return missing


@_checked_by(_deterministic_actor)
class DeterministicActor(Protocol):
    """A deterministic ``actor`` writing ``(group, "action")``, and the ``exploration_noise`` buffer a trainer schedules."""

    group: GroupSpec
    actor: TensorDictModuleBase
    exploration_noise: torch.Tensor


def _q_critic(policy: Any) -> list[str]:
    qvalue = _module(policy, "qvalue")
    action, value = _group_key(policy, keys.ACTION), _group_key(policy, keys.STATE_ACTION_VALUE)
    if qvalue is not None and value in qvalue.out_keys and action in qvalue.in_keys and hasattr(policy, "critic_kind"):
        return []
    return [f"a Q critic (`qvalue` reading {action!r}, writing {value!r})"]


@_checked_by(_q_critic)
class QCritic(Protocol):
    """One Q critic ``qvalue`` reading ``(group, "action")`` and writing ``(group, "state_action_value")`` (DDPG).

    ``critic_kind`` is ``local`` (each row's own observation and action) or ``centralized``
    (every agent of the group).
    """

    group: GroupSpec
    qvalue: TensorDictModuleBase
    critic_kind: str


def _twin_q_critics(policy: Any) -> list[str]:
    qvalue = _module(policy, "qvalue")
    value = _group_key(policy, keys.STATE_ACTION_VALUE)
    params = getattr(policy, "qvalue_params", None)
    if qvalue is not None and value in qvalue.out_keys and isinstance(params, TensorDictParams):
        if hasattr(policy, "critic_kind"):
            return []
    return [f"Q critics (`qvalue` writing {value!r} with stacked `qvalue_params`)"]


@_checked_by(_twin_q_critics)
class TwinQCritics(Protocol):
    """Q critics sharing one architecture (SAC): the template ``qvalue`` and their stacked weights ``qvalue_params``."""

    group: GroupSpec
    qvalue: TensorDictModuleBase
    qvalue_params: TensorDictParams
    critic_kind: str


@runtime_checkable
class Recurrent(Protocol):
    """A policy with memory: trained on whole ``[envs, time]`` sequences inside `sequence_mode`.

    Optional for on-policy learners (they rerun whole sequences through a policy that has it), so it is
    tested with ``isinstance`` rather than required.
    """

    is_recurrent: bool

    def sequence_mode(self) -> AbstractContextManager[None]: ...


def missing_capabilities(policy: Any, requires: Sequence[type]) -> list[str]:
    """What ``policy`` lacks of the contracts in ``requires``, in words (empty: it satisfies them all).

    Raises:
        TypeError: when an entry of ``requires`` is not a contract of this module.
    """
    missing = []
    for contract in requires:
        if contract not in _CHECKS:
            raise TypeError(f"{contract!r} is not a policy contract; contracts are {[c.__name__ for c in _CHECKS]}")
        missing += _CHECKS[contract](policy)
    return missing


def satisfies(policy: Any, contract: type) -> bool:
    """Whether ``policy`` satisfies one contract (e.g. a distillation teacher with a ``ValueCritic``)."""
    return not missing_capabilities(policy, (contract,))
