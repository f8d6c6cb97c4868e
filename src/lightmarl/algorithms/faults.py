"""What a UnitTrainer does when learning goes wrong: non-finite losses or gradients, and divergence.

Every trainable binding has a `NonFiniteGuard` and a `DivergenceWatch`, set by its
algorithm's ``on_nonfinite``, ``on_divergence``, ``divergence_patience`` and ``max_loss_growth``
(and PPO's ``max_kl``).

* **Non-finite values.** [`optimize`][lightmarl.algorithms.base.optimize] asks the guard about the
  loss terms before ``backward``: a NaN or an infinity in any ``loss*`` term (on any process:
  the processes agree through ``GradientStepper.agree_min``) means no backward and no optimizer
  step. Gradients are checked by the stepper after DDP averaged them (so every process sees the
  same ones) and before clipping: a non-finite gradient norm means no optimizer step either.
  The binding's weights and its optimizer's state (Adam's moments and step count) are then
  exactly what they were; other bindings learn on. ``skip`` counts the skipped gradient steps
  (logged as ``train/<binding>/skipped_steps``) and warns once per update, naming the binding and
  the terms; ``stop`` raises [`TrainingFault`][lightmarl.errors.TrainingFault] at the first one. The
  update's loss metrics keep the non-finite values, so they show in the logs.
* **Non-finite transitions.** An off-policy learner hands each rollout's transitions to the
  guard before they enter its replay buffer (`NonFiniteGuard.finite_transitions`): one
  with a NaN or an infinity in any floating entry (a reward, an observation) would be sampled
  again and again and make every later loss non-finite. ``skip`` drops such transitions (counted
  as ``train/<binding>/dropped_transitions``, warned once per update); ``stop`` raises
  [`TrainingFault`][lightmarl.errors.TrainingFault]. On-policy rollouts are used once: their non-finite
  values show up as a non-finite loss, handled above.
* **Divergence.** After each update the watch compares the binding's metrics with limits: PPO's
  approximate KL above ``max_kl``, or a critic loss (`CRITIC_LOSS_TERMS`)
  above ``max_loss_growth`` times its mean over the binding's first learning updates. When that
  holds for ``divergence_patience`` updates in a row it warns naming the binding, the metric and
  the limit (``on_divergence: warn``, the default) or stops the run (``stop``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Literal

import torch
from tensordict import TensorDictBase

from lightmarl import keys
from lightmarl.errors import TrainingFault

log = logging.getLogger(__name__)

NonFinitePolicy = Literal["skip", "stop"]
DivergencePolicy = Literal["warn", "stop"]
#: ``GradientStepper.agree_min``: the smallest of a value over every process.
AgreeMin = Callable[[int], int]

#: updates with a critic loss whose mean is a binding's baseline for ``max_loss_growth``.
BASELINE_UPDATES = 5
#: the smallest baseline: a critic loss that starts near 0 (sparse rewards) must not trip the watch.
BASELINE_FLOOR = 1e-2
#: while a binding keeps diverging, the warning repeats every this many updates.
REPEAT_WARNING_EVERY = 50


class NonFiniteGuard:
    """Catches non-finite loss terms and gradients of one binding's gradient steps.

    Args:
        binding_id: the binding, named in warnings and errors.
        policy: ``skip`` the step (warn, count it) or ``stop`` the run.
    """

    def __init__(self, binding_id: str, policy: NonFinitePolicy = "skip") -> None:
        if policy not in ("skip", "stop"):
            raise ValueError(f"algorithm.on_nonfinite: invalid value {policy!r}; valid values are 'skip', 'stop'")
        self.binding_id = binding_id
        self.policy = policy
        self.steps = 0  # gradient steps tried in the current update
        self.skipped = 0  # of which skipped
        self.total_skipped = 0  # over the run (this process)
        self._first: str | None = None
        self.dropped: int | None = None  # transitions dropped in the current update (None: none checked)
        self.total_dropped = 0
        self._first_dropped: str | None = None

    def begin_update(self) -> None:
        self.steps = self.skipped = 0
        self._first = None
        self.dropped = None
        self._first_dropped = None

    def finite_transitions(self, transitions: TensorDictBase) -> TensorDictBase:
        """``transitions`` (batch ``[N, ...]``) without those holding a non-finite floating entry.

        Raises:
            TrainingFault: with ``stop``, at the first such transition, naming the binding and the entries.
        """
        self.dropped = self.dropped or 0
        n = transitions.shape[0] if transitions.batch_dims else 0
        if not n:
            return transitions
        finite: torch.Tensor | None = None
        bad_entries = []
        for key, value in transitions.items(include_nested=True, leaves_only=True):
            if not value.is_floating_point():
                continue
            rows = torch.isfinite(value.reshape(n, -1)).all(-1)
            finite = rows if finite is None else finite & rows
            if not bool(rows.all()):
                bad_entries.append("/".join(key) if isinstance(key, tuple) else key)
        if finite is None or not bad_entries:
            return transitions
        count = int((~finite).sum())
        where = (
            f"binding {self.binding_id!r}: {count} of {n} transitions hold non-finite values "
            f"(in {', '.join(bad_entries)})"
        )
        if self.policy == "stop":
            raise TrainingFault(f"{where}; stopping (algorithm.on_nonfinite: stop)")
        self.dropped += count
        self.total_dropped += count
        self._first_dropped = self._first_dropped or where
        return transitions[finite]

    def losses_finite(self, terms: Mapping[str, torch.Tensor], agree_min: AgreeMin) -> bool:
        """Whether every process's ``loss*`` terms are finite (a collective under DDP: every process calls it)."""
        self.steps += 1
        # One device sync for all terms; the names of the bad ones are looked up only when needed.
        finite = not terms or bool(torch.stack([torch.isfinite(v.detach()).all() for v in terms.values()]).all())
        if agree_min(int(finite)):
            return True
        bad = {name: value for name, value in terms.items() if not bool(torch.isfinite(value.detach()).all())}
        what = ", ".join(f"{name} = {_describe(value)}" for name, value in bad.items()) or "a loss on another process"
        self._fault(f"non-finite loss ({what})")
        return False

    def gradient_not_finite(self, norm: float) -> None:
        """The stepper refused a step: the (DDP-averaged) gradient norm is ``norm``."""
        self._fault(f"non-finite gradient (norm {norm})")

    def _fault(self, what: str) -> None:
        where = f"binding {self.binding_id!r}: {what} at gradient step {self.steps} of this update"
        if self.policy == "stop":
            raise TrainingFault(f"{where}; stopping (algorithm.on_nonfinite: stop)")
        self.skipped += 1
        self.total_skipped += 1
        self._first = self._first or where

    def end_update(self) -> dict[str, float]:
        """The update's ``skipped_steps`` (and, where transitions were checked, ``dropped_transitions``)
        metrics; warns once if any step was skipped or transition dropped."""
        metrics = {"skipped_steps": float(self.skipped)}
        if self.dropped:
            log.warning(
                "lightmarl: %s; dropped them before the replay buffer (%d in this run; algorithm.on_nonfinite: skip)",
                self._first_dropped,
                self.total_dropped,
            )
        if self.dropped is not None:
            metrics["dropped_transitions"] = float(self.dropped)
        if self.skipped:
            log.warning(
                "lightmarl: %s; skipped %d of %d gradient steps (%d in this run), the binding's weights and "
                "optimizer state stay as they were (algorithm.on_nonfinite: skip)",
                self._first,
                self.skipped,
                self.steps,
                self.total_skipped,
            )
        return metrics


def _describe(value: torch.Tensor) -> str:
    value = value.detach().float()
    if value.numel() == 1:
        return str(float(value))
    return f"{int((~torch.isfinite(value)).sum())} of {value.numel()} entries non-finite"


class DivergenceWatch:
    """Warns (or stops) when one binding's update metrics stay beyond their limits.

    Args:
        binding_id: the binding, named in warnings and errors.
        limits: metric name -> the largest value that is not divergence (e.g. ``{"kl_approx": 1.0}``).
        max_loss_growth: a critic loss above this many times its early mean is divergence (``None``: no check).
        patience: consecutive diverging updates before it acts.
        policy: ``warn`` or ``stop``.
    """

    def __init__(
        self,
        binding_id: str,
        limits: Mapping[str, float] | None = None,
        max_loss_growth: float | None = None,
        patience: int = 3,
        policy: DivergencePolicy = "warn",
    ) -> None:
        self.binding_id = binding_id
        self.limits = dict(limits or {})
        self.max_loss_growth = max_loss_growth
        self.patience = patience
        self.policy = policy
        self.streak = 0
        self._early: dict[str, list[float]] = {}

    def _baseline(self, name: str, value: float) -> float | None:
        early = self._early.setdefault(name, [])
        if len(early) < BASELINE_UPDATES:
            if math.isfinite(value):
                early.append(value)
            return None
        return max(sum(early) / len(early), BASELINE_FLOOR)

    def reasons(self, metrics: Mapping[str, float]) -> list[str]:
        """What in ``metrics`` is beyond its limit, in words (empty: nothing)."""
        found = [
            f"{name} = {metrics[name]:.3g} > {limit:g}"
            for name, limit in self.limits.items()
            if name in metrics and metrics[name] > limit
        ]
        if self.max_loss_growth is not None:
            for name in keys.CRITIC_LOSS_TERMS:
                if name not in metrics:
                    continue
                baseline = self._baseline(name, metrics[name])
                if baseline is not None and metrics[name] > self.max_loss_growth * baseline:
                    found.append(
                        f"{name} = {metrics[name]:.3g} > {self.max_loss_growth:g} x its early mean {baseline:.3g}"
                    )
        return found

    def observe(self, metrics: Mapping[str, float], agree_min: AgreeMin) -> dict[str, float]:
        """Check one update's ``metrics``; returns the ``diverging`` metric (1.0 while it acts, else 0.0)."""
        reasons = self.reasons(metrics)
        self.streak = self.streak + 1 if reasons else 0
        diverging = self.streak >= self.patience
        if self.policy == "stop":
            # Every process stops at the same update, whichever one saw it.
            diverging = not agree_min(int(not diverging))
        if diverging:
            message = (
                f"binding {self.binding_id!r} is diverging: {'; '.join(reasons) or 'on another process'} "
                f"for {self.streak} updates in a row"
            )
            if self.policy == "stop":
                raise TrainingFault(f"{message}; stopping (algorithm.on_divergence: stop)")
            if (self.streak - self.patience) % REPEAT_WARNING_EVERY == 0:
                log.warning("lightmarl: %s (check lr and max_grad_norm; algorithm.on_divergence: warn)", message)
        return {"diverging": float(diverging)}
