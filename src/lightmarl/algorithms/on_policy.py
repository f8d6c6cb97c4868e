"""The on-policy learner: a binding's rows of each rollout -> advantages -> epochs x minibatches.

Every update, an on-policy UnitTrainer selects its binding's rows with the shared loss filter
([`loss_row_mask`][lightmarl.algorithms.base.loss_row_mask]), values them and their next observations
with the policy's critic, runs GAE over each (env, agent)'s valid rows
(`valid_row_gae`), standardises the advantages over the
binding's rows, then takes ``epochs`` passes of minibatches, one gradient step each. A recurrent
policy ([`Recurrent`][lightmarl.policies.contracts.Recurrent]) is replayed on whole env sequences.

A subclass builds its TorchRL loss (`OnPolicyUnitTrainer.loss`, with ``advantage`` and
``value_target`` keys) and may add losses that learn in the same steps ([`extra_rows`][lightmarl.algorithms.on_policy.OnPolicyUnitTrainer.extra_rows],
[`minibatch_losses`][lightmarl.algorithms.on_policy.OnPolicyUnitTrainer.minibatch_losses]), as PPO's distillation does.
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import LossModule, ValueEstimators

from lightmarl import keys
from lightmarl.algorithms.base import (
    Algorithm,
    GradientStepper,
    MetricMeans,
    UnitTrainer,
    loss_row_mask,
    optimize,
)
from lightmarl.algorithms.gae import valid_row_gae
from lightmarl.algorithms.open_transitions import AgentTransitions, OpenTransitions, row_marks
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


class OnPolicyUnitTrainer(UnitTrainer):
    """The on-policy learner of one binding: row filter, GAE, epochs x minibatches, one optimizer.

    Subclasses set `loss_name` and build `loss` in `_make_loss`.
    """

    config: OnPolicyAlgorithm
    #: the main loss's name (``loss_profiles`` refer to it).
    loss_name: ClassVar[str]
    #: a TorchRL loss whose ``tensor_keys`` have ``advantage`` and ``value_target``, with a GAE value estimator.
    loss: LossModule

    def _build(self) -> None:
        policy = self.policy
        self.loss_names = (self.loss_name,)
        self.update_every = self.config.update_every
        self.recurrent = isinstance(policy, Recurrent) and policy.is_recurrent
        # Where the losses run: inside sequence mode for a recurrent policy.
        self._replay: Callable[[], AbstractContextManager[None]] = (
            policy.sequence_mode if isinstance(policy, Recurrent) and self.recurrent else contextlib.nullcontext
        )
        self.updates = 0
        #: turn-based envs: rows where the agent did not act carry its rewards, and transitions a
        #: rollout leaves open are kept and learned from once they close (one rollout later).
        self.turn_based = self.table.env_spec.turn_based
        self.open_transitions = OpenTransitions(self.group.name, self.table.index[self.binding_id])
        self._transitions: AgentTransitions | None = None
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

    @abstractmethod
    def _make_loss(self) -> LossModule:
        """The main TorchRL loss (with ``advantage`` and ``value_target`` tensor keys)."""

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        return [(self.own_parameters([self.policy]), self.config.lr)]

    def to(self, device: torch.device) -> OnPolicyUnitTrainer:
        self.loss.to(device)
        return self

    def set_progress(self, optimizer: torch.optim.Optimizer, fraction_done: float) -> None:
        """Linear learning-rate annealing, when enabled; the budget fraction also drives loss schedules."""
        super().set_progress(optimizer, fraction_done)
        if self.config.anneal_lr:
            for group in optimizer.param_groups:
                group["lr"] = self.config.lr * max(0.0, 1.0 - fraction_done)

    # -- hooks --------------------------------------------------------------------------------
    def extra_rows(self, data: TensorDictBase) -> dict[str, int]:
        """Prepare the losses that learn next to the main one (masks written into ``data``).

        Returns each one's row count as ``{metric name: rows}``; the update runs when the main
        loss or one of these has rows.
        """
        del data
        return {}

    def minibatch_losses(self, batch: TensorDictBase, main: bool) -> dict[str, torch.Tensor]:
        """The loss terms of one minibatch: the main loss's (unless ``main`` is false: it has no rows) and extras."""
        return dict(self.loss(batch).items()) if main else {}

    # -- update -------------------------------------------------------------------------------
    def update(
        self, experience: TensorDictBase, optimizer: torch.optim.Optimizer, stepper: GradientStepper
    ) -> dict[str, float]:
        g = self.group.name
        self._transitions = None
        if self.turn_based:
            # The kept tail of open transitions, then this rollout: they close here.
            data = self.open_transitions.extend(experience)
            carried = data.shape[1] - experience.shape[1]
            self._transitions, closed, _ = self.open_transitions.close(data, max_steps=experience.shape[1])
        else:
            # A structural copy: advantage/mask entries written below stay private to this binding.
            data = experience.copy()
            carried, closed = 0, None
        rows = data.get(g)
        mask = loss_row_mask(rows, self.table, self.loss_name, binding_id=self.binding_id)
        if closed is not None:
            mask = mask & closed  # a transition enters the loss once it closed, and once only
        num_rows = int(mask.sum())
        extra = self.extra_rows(data)
        extra_masks = self.extra_row_masks(data)
        if carried:
            # The kept steps' rows were in an earlier update's extra losses already.
            for extra_mask in extra_masks:
                extra_mask[:, :carried] = False
            extra = {name: int(m.sum()) for name, m in zip(extra, extra_masks, strict=True)}
        if num_rows == 0 and not any(extra.values()):
            return {}
        if num_rows:
            self._set_advantages(data, mask, num_rows)
        # Env steps with rows some loss of this binding learns from: the others would only cost.
        steps = mask.any(-1)
        for extra_mask in extra_masks:
            steps = steps | extra_mask.any(-1)
        means = MetricMeans()
        params = self.parameters()
        for batch, replay in self._minibatches(data, steps, stepper):
            with replay:
                terms = self.minibatch_losses(batch, main=num_rows > 0)
            optimize(terms, optimizer, stepper, params, self.config.max_grad_norm, guard=self.guard)
            means.add(terms)
        self.updates += 1
        metrics = {**means.means(), "rows": float(num_rows)}
        if num_rows:
            metrics["value_target_mean"] = float(rows.get(keys.VALUE_TARGET)[mask].mean())
        metrics.update({name: float(count) for name, count in extra.items()})
        return metrics

    def _set_advantages(self, data: TensorDictBase, mask: torch.Tensor, num_rows: int) -> None:
        rows = data.get(self.group.name)
        with torch.no_grad():
            self.estimate_advantages(data)
        advantage = rows.get(keys.ADVANTAGE)
        if self.config.normalize_advantage:
            valid_adv = advantage[mask]
            std = valid_adv.std() if num_rows > 1 else torch.ones((), device=advantage.device)
            advantage = (advantage - valid_adv.mean()) / (std + 1e-8)
        # Other rows (another binding's, say with a NaN reward) are masked out of the loss, but a NaN
        # there would still reach this binding's gradients through the mask (0 x NaN): zero them.
        keep = mask.reshape(*mask.shape, *(1,) * (advantage.ndim - mask.ndim))
        rows.set(keys.ADVANTAGE, torch.where(keep, advantage, 0.0))
        rows.set(keys.VALUE_TARGET, torch.where(keep, rows.get(keys.VALUE_TARGET), 0.0))
        rows.set(keys.LOSS_MASK, mask)

    def extra_row_masks(self, data: TensorDictBase) -> list[torch.Tensor]:
        """The row masks (``[envs, time, agents]``) of the losses next to the main one, written by [`extra_rows`][lightmarl.algorithms.on_policy.OnPolicyUnitTrainer.extra_rows].

        In the order of [`extra_rows`][lightmarl.algorithms.on_policy.OnPolicyUnitTrainer.extra_rows]' names; the tensors ``data`` holds (the update edits them in place).
        """
        del data
        return []

    def _minibatches(
        self, data: TensorDictBase, steps: torch.Tensor, stepper: GradientStepper
    ) -> Iterator[tuple[TensorDictBase, AbstractContextManager[None]]]:
        """``epochs`` shuffled passes of minibatches over the env ``steps`` (``[envs, time]`` bool) that
        hold the binding's rows, each with the context its losses run in."""
        if self.recurrent:
            # Whole env sequences [envs, time]: the actor replays each one from its stored state.
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
                yield samples[order[i * size : (i + 1) * size]], self._replay()

    def estimate_advantages(self, data: TensorDictBase) -> None:
        """Write ``(group, "advantage")`` and ``(group, "value_target")`` into ``data`` (``[envs, time]``).

        The critic values every row and every next observation as TorchRL's GAE does (same
        call, so recurrent and centralized critics behave as there); the recursion then runs
        over each (env, agent)'s valid rows only (`valid_row_gae`). With every row valid
        this is exactly TorchRL's GAE.
        """
        g = self.group.name
        # TorchRL's own value call (vmap or not, recurrent "is_init" handling).
        value, next_value = value_and_next_value(self.loss.value_estimator, data)
        counted, _ = row_marks(data, g)
        advantage, value_target = valid_row_gae(
            self.config.gamma,
            self.config.lmbda,
            value,
            next_value,
            reward=data.get((keys.NEXT, g, keys.REWARD)),
            done=data.get((keys.NEXT, g, keys.DONE)),
            terminated=data.get((keys.NEXT, g, keys.TERMINATED)),
            valid=data.get((g, keys.VALID)),
            time_dim=data.ndim - 1,
            turn_based=self.turn_based,
            counted=counted,
            transitions=self._transitions,  # grouped by the update already (None: group them here)
        )
        self._transitions = None
        data.set(self.loss.tensor_keys.advantage, advantage)
        data.set(self.loss.tensor_keys.value_target, value_target)

    def restart(self) -> None:
        """New weights: the open transitions' actions were the old policy's, so they enter no loss."""
        self.open_transitions.forget_learning()

    def state_dict(self) -> dict:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state.get("updates", 0))

    def replay_state_dict(self) -> dict:
        """The open transitions kept for the next update (turn-based envs; per process), ``{}`` for none."""
        kept = self.open_transitions.state_dict()
        return {"open_transitions": kept} if kept else {}

    def load_replay_state_dict(self, state: dict) -> None:
        self.open_transitions.load_state_dict(state.get("open_transitions", {}))
