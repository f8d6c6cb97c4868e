"""The on-policy learner: a binding's rows of each rollout -> advantages -> epochs x minibatches.

[`OnPolicyUnitTrainer.update`][lightmarl.algorithms.on_policy.OnPolicyUnitTrainer.update] reads top to bottom:

1. its [`RolloutRows`][lightmarl.algorithms.rollout_rows.RolloutRows] gives the rows of the update
   (this rollout; in turn-based envs after the kept tail of open transitions);
2. the shared loss filter ([`loss_row_mask`][lightmarl.algorithms.base.loss_row_mask]) picks the
   binding's rows, and each [`AuxiliaryLoss`][lightmarl.algorithms.on_policy.AuxiliaryLoss] its own
   (`AuxiliaryLoss.rows`);
3. the critic values every row and next observation, GAE runs over each (env, agent)'s valid rows
   (`valid_row_gae`) and the advantages are standardised over the binding's rows;
4. ``epochs`` passes of minibatches over the env steps with rows, one gradient step each on the main
   loss plus every auxiliary loss (`AuxiliaryLoss.loss`). A recurrent policy
   ([`Recurrent`][lightmarl.policies.contracts.Recurrent]) is rerun over whole env sequences.

A subclass builds its TorchRL loss (`OnPolicyUnitTrainer._make_loss`, with ``advantage`` and
``value_target`` keys) and may add auxiliary losses (`OnPolicyUnitTrainer._make_auxiliary_losses`), as
PPO's distillation does.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn
from torchrl.objectives import LossModule, ValueEstimators

from lightmarl import keys
from lightmarl.algorithms.base import (
    Algorithm,
    GradientStepper,
    MetricMeans,
    UnitTrainer,
    loss_row_mask,
)
from lightmarl.algorithms.gae import valid_row_gae
from lightmarl.algorithms.open_transitions import AgentTransitions, row_marks
from lightmarl.algorithms.rollout_rows import RolloutRows, UpdateRows, rollout_rows
from lightmarl.algorithms.torchrl_private import value_and_next_value
from lightmarl.policies.contracts import Recurrent


@dataclass(kw_only=True)
class OnPolicyAlgorithm(Algorithm):
    """The hyper-parameters every on-policy algorithm shares: the advantage estimate and the update loop."""

    lr: float = 3e-3
    """Adam learning rate."""
    epochs: int = 4
    """Passes over each rollout."""
    minibatch_size: int = 400
    """Env steps (all agents of the group at one step of one env) per minibatch, among the steps in
    which the binding has rows to learn from: steps where only other bindings acted (env copies it
    does not play, the other seat's turns) stay out of its minibatches."""
    gamma: float = 0.99
    """Discount factor."""
    lmbda: float = 0.95
    """GAE lambda."""
    max_grad_norm: float | None = 1.0
    """Clip the gradient norm to this (``null``: no clipping)."""
    normalize_advantage: bool = True
    """Standardise advantages over the binding's valid rows of a rollout."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over the frame budget."""
    update_every: int = 1
    """Learn on every k-th training iteration only (1: every iteration)."""
    bootstrap_truncated: bool = True
    """Bootstrap GAE from the next observation's value where an episode is cut off (``truncated``: done, not
    terminated), as Pardo et al. 2018 argue. ``false`` treats every episode end as terminal, as runs through
    TorchRL's ``VmasEnv`` do (it sets ``terminated`` at ``max_steps``; BenchMARL's VMAS runs learn so)."""

    def check_rollout(self, binding_id: str, num_envs: int, rollout_steps: int) -> None:
        env_steps = num_envs * rollout_steps
        if self.minibatch_size > env_steps:
            # The loop would silently take the whole rollout as one minibatch.
            raise ValueError(
                f"binding {binding_id!r}: algorithm.minibatch_size {self.minibatch_size} is larger than a rollout, "
                f"{env_steps} env steps (env.num_envs {num_envs} x rollout_steps {rollout_steps}); "
                f"use a minibatch_size of at most {env_steps}"
            )

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        return (
            *super().hyperparameter_checks(),
            ("lr", self.lr, self.lr > 0, "lr > 0"),
            ("epochs", self.epochs, self.epochs >= 1, "epochs >= 1"),
            ("minibatch_size", self.minibatch_size, self.minibatch_size >= 1, "minibatch_size >= 1"),
            ("gamma", self.gamma, 0 <= self.gamma <= 1, "0 <= gamma <= 1"),
            ("lmbda", self.lmbda, 0 <= self.lmbda <= 1, "0 <= lmbda <= 1"),
            ("update_every", self.update_every, self.update_every >= 1, "update_every >= 1"),
            # A negative clip norm flips the gradient (torch scales by max_norm / norm): gradient ascent.
            (
                "max_grad_norm",
                self.max_grad_norm,
                self.max_grad_norm is None or self.max_grad_norm > 0,
                "max_grad_norm is None or max_grad_norm > 0",
            ),
        )


@dataclass
class AuxiliaryRows:
    """What an auxiliary loss learns from in one update, as its `AuxiliaryLoss.rows` returns it."""

    metric: str
    """Name of its row count in the update's metrics (e.g. ``distill_rows``)."""
    mask: torch.Tensor
    """``[envs, time, agents]`` bool: the rows it learns from (their env steps enter the minibatches)."""
    entries: dict[NestedKey, torch.Tensor] = field(default_factory=dict)
    """Per-row entries its minibatches read (its mask among them): the update writes them into its rows."""
    coeff: float = 1.0
    """Its weight in this update."""
    count: int = field(init=False)
    """How many rows ``mask`` holds."""

    def __post_init__(self) -> None:
        self.count = int(self.mask.sum())


class AuxiliaryLoss(ABC):
    """A loss that learns next to an on-policy learner's main loss, in the same optimizer steps, on rows of its own.

    Each update calls [`rows`][lightmarl.algorithms.on_policy.AuxiliaryLoss.rows] once, then
    [`loss`][lightmarl.algorithms.on_policy.AuxiliaryLoss.loss] on every minibatch with what ``rows``
    returned. PPO's distillation ([`DistillationLoss`][lightmarl.algorithms.distillation.DistillationLoss])
    is one.
    """

    #: its loss name (loss profiles refer to it).
    name: str

    @abstractmethod
    def rows(self, rows: UpdateRows, *, updates: int, fraction_done: float) -> AuxiliaryRows:
        """The rows it learns from in this update and the entries its minibatches read.

        Args:
            rows: the update's rows (`UpdateRows.new` drops the steps an earlier update learned from).
            updates: the learner's updates so far (for schedules).
            fraction_done: the share of the training budget spent.
        """

    @abstractmethod
    def loss(self, batch: TensorDictBase, prepared: AuxiliaryRows) -> dict[str, torch.Tensor]:
        """Its terms (``loss_*`` entries are summed into the step, the others are diagnostics) on a minibatch."""

    def to(self, device: torch.device) -> None:  # noqa: B027 - an optional hook: nothing to move by default
        """Move its buffers."""


class OnPolicyUnitTrainer(UnitTrainer):
    """The on-policy learner of one binding: row filter, GAE, epochs x minibatches, one optimizer.

    Subclasses set `loss_name`, build `loss` in `_make_loss` and may add auxiliary losses in
    `_make_auxiliary_losses`.
    """

    config: OnPolicyAlgorithm
    #: the main loss's name (``loss_profiles`` refer to it).
    loss_name: ClassVar[str]
    #: a TorchRL loss whose ``tensor_keys`` have ``advantage`` and ``value_target``, with a GAE value estimator.
    loss: LossModule
    #: losses that learn next to the main one, in the same steps.
    auxiliary: tuple[AuxiliaryLoss, ...]

    def _build(self) -> None:
        policy = self.policy
        self.update_every = self.config.update_every
        self.recurrent = isinstance(policy, Recurrent) and policy.is_recurrent
        # Where the losses run: inside sequence mode for a recurrent policy.
        self._sequence_context: Callable[[], AbstractContextManager[None]] = (
            policy.sequence_mode if isinstance(policy, Recurrent) and self.recurrent else contextlib.nullcontext
        )
        self.updates = 0
        #: turn-based envs: rows where the agent did not act carry its rewards (GAE credits them).
        self.turn_based = self.table.env_spec.turn_based
        #: where each update's rows come from (turn-based: with the transitions earlier rollouts left open).
        self.rollout_rows: RolloutRows = rollout_rows(
            self.group.name, self.table.index[self.binding_id], turn_based=self.turn_based
        )
        self.loss = self._make_loss()
        # The row mask and TorchRL's GAE (for its value calls; the recursion is valid_row_gae's).
        self.loss.loss_mask_key = (self.group.name, keys.LOSS_MASK)
        self.loss.make_value_estimator(
            ValueEstimators.GAE,
            gamma=self.config.gamma,
            lmbda=self.config.lmbda,
            # torch.vmap has no batching rule for recurrent layers: call a recurrent critic twice.
            deactivate_vmap=self.recurrent,
        )
        self.auxiliary = self._make_auxiliary_losses()
        self.loss_names = (self.loss_name, *(aux.name for aux in self.auxiliary))

    @abstractmethod
    def _make_loss(self) -> LossModule:
        """The main TorchRL loss (with ``advantage`` and ``value_target`` tensor keys)."""

    def _make_auxiliary_losses(self) -> tuple[AuxiliaryLoss, ...]:
        """The losses that learn next to the main one (default: none)."""
        return ()

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        return [(self.own_parameters([self.policy]), self.config.lr)]

    def to(self, device: torch.device) -> OnPolicyUnitTrainer:
        self.loss.to(device)
        for aux in self.auxiliary:
            aux.to(device)
        return self

    def set_progress(self, optimizer: torch.optim.Optimizer, fraction_done: float) -> None:
        """Linear learning-rate annealing, when enabled (the auxiliary losses' schedules read ``update``'s ``fraction_done``)."""
        if self.config.anneal_lr:
            for group in optimizer.param_groups:
                group["lr"] = self.config.lr * max(0.0, 1.0 - fraction_done)

    # -- update -------------------------------------------------------------------------------
    def update(
        self,
        experience: TensorDictBase,
        optimizer: torch.optim.Optimizer,
        stepper: GradientStepper,
        *,
        fraction_done: float = 0.0,
    ) -> dict[str, float]:
        rows = self.rollout_rows.take(experience)
        data = rows.data
        group_rows = data.get(self.group.name)
        mask = rows.learnable(loss_row_mask(group_rows, self.table, self.loss_name, binding_id=self.binding_id))
        num_rows = int(mask.sum())
        extras = [aux.rows(rows, updates=self.updates, fraction_done=fraction_done) for aux in self.auxiliary]
        if num_rows == 0 and not any(extra.count for extra in extras):
            return {}
        for extra in extras:
            for key, value in extra.entries.items():
                data.set(key, value)
        if num_rows:
            self._set_advantages(rows, mask, num_rows)
        # Env steps with rows some loss of this binding learns from: the others would only cost.
        steps = mask.any(-1)
        for extra in extras:
            steps = steps | extra.mask.any(-1)
        means = MetricMeans()
        params = self.parameters()
        for batch, context in self._minibatches(data, steps, stepper):
            with context:
                terms = self.minibatch_losses(batch, main=num_rows > 0, auxiliary=extras)
            self.gradient_step(terms, optimizer, stepper, params)
            means.add(terms)
        self.updates += 1
        metrics = {**means.means(), "rows": float(num_rows)}
        if num_rows:
            metrics["value_target_mean"] = float(group_rows.get(keys.VALUE_TARGET)[mask].mean())
        metrics.update({extra.metric: float(extra.count) for extra in extras})
        return metrics

    def minibatch_losses(
        self, batch: TensorDictBase, *, main: bool, auxiliary: Sequence[AuxiliaryRows]
    ) -> dict[str, torch.Tensor]:
        """The loss terms of one minibatch: the main loss's (unless ``main`` is false: it has no rows) and
        each auxiliary loss's, given what its `AuxiliaryLoss.rows` returned for this update."""
        terms = dict(self.loss(batch).items()) if main else {}
        for aux, prepared in zip(self.auxiliary, auxiliary, strict=True):
            terms.update(aux.loss(batch, prepared))
        return terms

    def _set_advantages(self, rows: UpdateRows, mask: torch.Tensor, num_rows: int) -> None:
        """Write the binding's advantages, value targets and loss mask into ``rows.data``."""
        group_rows = rows.data.get(self.group.name)
        with torch.no_grad():
            self.estimate_advantages(rows.data, transitions=rows.transitions, counted=rows.counted)
        advantage = group_rows.get(keys.ADVANTAGE)
        if self.config.normalize_advantage:
            valid_adv = advantage[mask]
            std = valid_adv.std() if num_rows > 1 else torch.ones((), device=advantage.device)
            advantage = (advantage - valid_adv.mean()) / (std + 1e-8)
        # Other rows (another binding's, say with a NaN reward) are masked out of the loss, but a NaN
        # there would still reach this binding's gradients through the mask (0 x NaN): zero them.
        keep = mask.reshape(*mask.shape, *(1,) * (advantage.ndim - mask.ndim))
        group_rows.set(keys.ADVANTAGE, torch.where(keep, advantage, 0.0))
        group_rows.set(keys.VALUE_TARGET, torch.where(keep, group_rows.get(keys.VALUE_TARGET), 0.0))
        group_rows.set(keys.LOSS_MASK, mask)

    def _minibatches(
        self, data: TensorDictBase, steps: torch.Tensor, stepper: GradientStepper
    ) -> Iterator[tuple[TensorDictBase, AbstractContextManager[None]]]:
        """``epochs`` shuffled passes of minibatches over the env ``steps`` (``[envs, time]`` bool) that
        hold the binding's rows, each with the context its losses run in."""
        if self.recurrent:
            # Whole env sequences [envs, time]: the actor reruns each one from its stored state.
            played = steps.any(-1)
            samples = data if bool(played.all()) else data[played]
            size = max(1, min(self.config.minibatch_size // data.shape[1], samples.shape[0]))
        else:
            flat = steps.reshape(-1)
            samples = data.reshape(-1) if bool(flat.all()) else data.reshape(-1)[flat]
            size = min(self.config.minibatch_size, samples.shape[0])
        count = samples.shape[0]
        # Every process takes the same number of steps (turn-based rollouts differ in the steps a binding played).
        batches = stepper.agree_min(max(1, count // size))
        for _ in range(self.config.epochs):
            order = torch.randperm(count, device=samples.device)
            for i in range(batches):
                yield samples[order[i * size : (i + 1) * size]], self._sequence_context()

    def estimate_advantages(
        self,
        data: TensorDictBase,
        *,
        transitions: AgentTransitions | None = None,
        counted: torch.Tensor | None = None,
    ) -> None:
        """Write ``(group, "advantage")`` and ``(group, "value_target")`` into ``data`` (``[envs, time]``).

        The critic values every row and every next observation as TorchRL's GAE does (same
        call, so recurrent and centralized critics behave as there); the recursion then runs
        over each (env, agent)'s valid rows only (`valid_row_gae`). With every row valid
        this is exactly TorchRL's GAE.

        Args:
            data: the rows.
            transitions: the group's agent transitions, when already grouped (`UpdateRows.transitions`).
            counted: rows whose reward counts (`UpdateRows.counted`; default: as ``data``'s marks say).
        """
        g = self.group.name
        # TorchRL's own value call (vmap or not, recurrent "is_init" handling).
        value, next_value = value_and_next_value(self.loss.value_estimator, data)
        if counted is None:
            counted, _ = row_marks(data, g)
        done = data.get((keys.NEXT, g, keys.DONE))
        advantage, value_target = valid_row_gae(
            self.config.gamma,
            self.config.lmbda,
            value,
            next_value,
            reward=data.get((keys.NEXT, g, keys.REWARD)),
            done=done,
            terminated=data.get((keys.NEXT, g, keys.TERMINATED)) if self.config.bootstrap_truncated else done,
            valid=data.get((g, keys.VALID)),
            time_dim=data.ndim - 1,
            turn_based=self.turn_based,
            counted=counted,
            transitions=transitions,
        )
        data.set(self.loss.tensor_keys.advantage, advantage)
        data.set(self.loss.tensor_keys.value_target, value_target)

    def restart(self) -> None:
        """New weights: the open transitions' actions were the old policy's, so they enter no loss."""
        self.rollout_rows.restart()

    def state_dict(self) -> dict:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state.get("updates", 0))

    def replay_state_dict(self) -> dict:
        """The open transitions kept for the next update (turn-based envs; per process), ``{}`` for none."""
        kept = self.rollout_rows.state_dict()
        return {"open_transitions": kept} if kept else {}

    def load_replay_state_dict(self, state: dict) -> None:
        self.rollout_rows.load_state_dict(state.get("open_transitions", {}))
