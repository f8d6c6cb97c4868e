"""The learner contract: an :class:`Algorithm` (config) builds one :class:`UnitTrainer` per binding.

This layer knows nothing of Lightning. Gradient steps go through a :class:`GradientStepper`
so that the LightningModule can route ``backward`` through ``manual_backward`` and
all-reduce gradients under DDP, while plain Python scripts use :class:`PlainStepper`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Protocol

import torch
from tensordict import TensorDictBase
from torch import nn

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy
from lightmarl.population import BindingTable


class GradientStepper(Protocol):
    """How a UnitTrainer turns a loss into a parameter update."""

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(
        self, optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter], max_grad_norm: float | None
    ) -> None:
        """Synchronise gradients (if distributed), clip them, step and zero them."""


class PlainStepper:
    """Single-process stepping for scripts and tests: ``loss.backward()``, clip, step."""

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(
        self, optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter], max_grad_norm: float | None
    ) -> None:
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def loss_row_mask(
    rows: TensorDictBase,
    table: BindingTable,
    loss_name: str,
    *,
    binding_id: str | None,
    trainable_only: bool = True,
) -> torch.Tensor:
    """The shared loss filter: which rows a loss may learn from.

    A row passes when the agent was present (``valid``), its loss profile includes
    ``loss_name``, it belongs to ``binding_id`` (unless ``None``: any binding, as a
    distillation loss reading a teacher's rows needs) and, for ``trainable_only``
    losses, it was produced by a trainable binding.

    Args:
        rows: a group's rows (``[..., agents]``) carrying the annotations of :mod:`lightmarl.data.schema`.
        table: the population.
        loss_name: the loss asking.
        binding_id: restrict to this binding's rows, or ``None``.
        trainable_only: also require ``is_trainable_agent``.

    Returns:
        A bool tensor shaped like the rows' batch.
    """
    profile_allows = torch.tensor(
        [allowed is None or loss_name in allowed for allowed in table.loss_profiles.values()],
        device=rows.device,
    )
    mask = rows.get(keys.VALID) & profile_allows[rows.get(keys.LOSS_PROFILE_ID)]
    if trainable_only:
        mask = mask & rows.get(keys.IS_TRAINABLE_AGENT)
    if binding_id is not None:
        mask = mask & (rows.get(keys.BINDING_ID) == table.index[binding_id])
    return mask


class UnitTrainer(ABC):
    """The learner of one trainable binding: its losses, optimizer and data path.

    Args:
        binding_id: the binding it trains.
        policy: that binding's policy.
        table: the population (for the loss filter).
    """

    #: names of the losses this trainer runs; loss profiles refer to them.
    loss_names: tuple[str, ...] = ()
    #: learn on every k-th training iteration only.
    update_every: int = 1
    #: ids of parameters of shared modules: the MARLTrainer's shared optimizer steps them, never this trainer.
    shared_parameter_ids: frozenset[int] = frozenset()

    def __init__(self, binding_id: str, policy: Policy, table: BindingTable) -> None:
        self.binding_id = binding_id
        self.policy = policy
        self.table = table
        self.group: GroupSpec = policy.group

    @abstractmethod
    def parameters(self) -> list[nn.Parameter]:
        """The parameters its optimizer steps: implement as ``self.own_parameters([...])``."""

    def own_parameters(self, modules: Iterable[nn.Module]) -> list[nn.Parameter]:
        """Trainable parameters of ``modules``, each once, without those of shared modules.

        Shared modules (``shared_modules`` in a recipe) accumulate gradients from every binding
        that uses them and are stepped once per update by the MARLTrainer's own optimizer.
        """
        return [p for p in unique_parameters(modules) if id(p) not in self.shared_parameter_ids]

    @abstractmethod
    def make_optimizer(self) -> torch.optim.Optimizer: ...

    @abstractmethod
    def update(
        self, experience: TensorDictBase, optimizer: torch.optim.Optimizer, stepper: GradientStepper
    ) -> dict[str, float]:
        """Learn from one rollout; returns scalar metrics (logged as ``train/<binding>/<name>``)."""

    def to(self, device: torch.device) -> UnitTrainer:
        """Move loss buffers (the policy moves with the LightningModule)."""
        return self

    def state_dict(self) -> dict:
        """Trainer state beyond the policy and optimizer (schedules, counters)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        del state


class Algorithm(ABC):
    """Configuration of a learning algorithm; builds the :class:`UnitTrainer` of a binding.

    Subclasses list their hyper-parameters as typed ``__init__`` arguments: that signature
    is the YAML schema (``class_path: lightmarl.algorithms.PPO`` + ``init_args``).
    """

    @abstractmethod
    def make_unit_trainer(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        population: Mapping[str, Policy] | None = None,
    ) -> UnitTrainer:
        """Build the learner of ``binding_id``.

        ``population`` (binding id -> policy, every binding that plays) lets a loss read other
        bindings' policies, e.g. a distillation teacher; losses that need it fail without it.
        """

    def check_policy(self, binding_id: str, policy: Policy) -> None:
        """Fail before training when ``policy`` lacks an output this algorithm needs."""
        del binding_id, policy


def require_policy_outputs(
    binding_id: str, algorithm: str, policy: Policy, missing: list[str], *, use: str, action_kind: str | None = None
) -> None:
    """The check behind every ``Algorithm.check_policy``: fail naming the binding, the algorithm and
    what the policy lacks (``missing``: readable descriptions), suggesting the policy class ``use``;
    with ``action_kind``, the binding's group must have that kind of actions."""
    if missing:
        raise ValueError(
            f"binding {binding_id!r}: algorithm {algorithm} needs {' and '.join(missing)}; {type(policy).__name__} "
            f"lacks {'them' if len(missing) > 1 else 'it'} (use {use})"
        )
    if action_kind is not None and policy.group.action_kind != action_kind:
        raise ValueError(
            f"binding {binding_id!r}: algorithm {algorithm} needs {action_kind} actions; group "
            f"{policy.group.name!r} has {policy.group.action_kind} actions"
        )


def check_hyperparameters(*checks: tuple[str, object, bool]) -> None:
    """Raise a ``ValueError`` naming the first ``(name, value, ok)`` whose ``ok`` is false.

    Algorithms call it in ``__init__`` so a bad recipe fails before training starts.
    """
    for name, value, ok in checks:
        if not ok:
            raise ValueError(f"algorithm.{name}: invalid value {value!r}")


def unique_parameters(modules: Iterable[nn.Module]) -> list[nn.Parameter]:
    """Trainable parameters of ``modules``, each once (shared modules appear in several)."""
    seen: set[int] = set()
    out = []
    for module in modules:
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out
