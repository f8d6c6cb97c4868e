"""Every private TorchRL method lightmarl relies on, behind one small adapter.

TorchRL 0.14 gives no public way to reach three things the on-policy learner needs:

* the critic calls of its GAE (`ValueEstimatorBase._call_value_nets`): the values of every row and
  of every next observation, with TorchRL's own vmap and recurrent ``is_init`` handling, which
  [`value_and_next_value`][lightmarl.algorithms.torchrl_private.value_and_next_value] returns;
* the per-row intermediates of a clipped-PPO loss (`PPOLoss._log_weight`, `PPOLoss._get_entropy`,
  `PPOLoss._critic_loss_inputs`), which [`PPOIntermediatesTap`][lightmarl.algorithms.torchrl_private.PPOIntermediatesTap]
  records so that diagnostics can be taken over the masked rows only
  (`lightmarl.algorithms.masked_ppo_loss`);
* the keys a loss reads its row mask from (`LossModule._loss_mask_keys`), behind
  [`loss_mask`][lightmarl.algorithms.torchrl_private.loss_mask], and a clipped-PPO loss's log-ratio
  clip range (`ClipPPOLoss._clip_bounds`), behind [`clip_bounds`][lightmarl.algorithms.torchrl_private.clip_bounds].

No other module of lightmarl calls or overrides a private TorchRL or TensorDict method. `PRIVATE_METHODS`
lists each one with the parameters this module passes or receives, `PRIVATE_PROPERTIES` the properties; ``tests/algorithms/test_torchrl_private.py``
checks them, and what they return, against the installed TorchRL, so an upgrade that changes one fails
there first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.objectives import ClipPPOLoss, LossModule, PPOLoss
from torchrl.objectives.value import ValueEstimatorBase

#: ``(owner class, method, its parameter names)`` of every private TorchRL method used (TorchRL 0.14.1).
PRIVATE_METHODS: tuple[tuple[type, str, tuple[str, ...]], ...] = (
    (
        ValueEstimatorBase,
        "_call_value_nets",
        (
            "self",
            "data",
            "params",
            "next_params",
            "single_call",
            "value_key",
            "detach_next",
            "vmap_randomness",
            "value_net",
        ),
    ),
    (PPOLoss, "_log_weight", ("self", "tensordict", "adv_shape")),
    (PPOLoss, "_get_entropy", ("self", "dist", "adv_shape")),
    (PPOLoss, "_critic_loss_inputs", ("self", "target_return", "state_value", "old_state_value")),
    (LossModule, "_loss_mask_keys", ("self",)),
)
#: ``(owner class, property)`` of every private TorchRL property read.
PRIVATE_PROPERTIES: tuple[tuple[type, str], ...] = ((ClipPPOLoss, "_clip_bounds"),)


def value_and_next_value(estimator: ValueEstimatorBase, data: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
    """The critic's values of every row of ``data`` and of every row's next observation (detached), as TorchRL's GAE calls it.

    Args:
        estimator: a loss's value estimator (``loss.value_estimator``), whose value network it calls.
        data: rows ``[*batch, time]`` with their ``("next", ...)`` entries.

    Returns:
        ``(value, next_value)``, each shaped as the estimator's value key in ``data``.
    """
    value, next_value, _ = estimator._call_value_nets(
        data=data,
        params=None,
        next_params=None,
        single_call=False,
        value_key=estimator.tensor_keys.value,
        detach_next=True,
        vmap_randomness=estimator.vmap_randomness,
    )
    return value, next_value


def loss_mask(loss: LossModule, tensordict: TensorDictBase) -> torch.Tensor | None:
    """The row mask ``loss`` applies to its ``loss_*`` terms on ``tensordict`` (bool), ``None`` when it has none."""
    for key in loss._loss_mask_keys():
        mask = tensordict.get(key, default=None)
        if mask is not None:
            return mask.bool()
    return None


def clip_bounds(loss: ClipPPOLoss) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, high)``: the log-ratio range outside which ``loss`` clips (``log(1 - eps)``, ``log(1 + eps)``)."""
    low, high = loss._clip_bounds
    return low, high


@dataclass
class PPOIntermediates:
    """Per-row intermediates of one forward pass of a TorchRL clipped-PPO loss (detached; ``None``: not computed)."""

    log_weight: torch.Tensor | None = None
    """``log pi(a) - log pi_old(a)`` per row."""
    kl: torch.Tensor | None = None
    """TorchRL's per-row approximate KL."""
    log_is_weight: torch.Tensor | None = None
    """The behaviour importance weight's log, when the batch carries one."""
    entropy: torch.Tensor | None = None
    """Per-row entropy (``None`` when TorchRL returns a TensorDict of entropies)."""
    value_target: torch.Tensor | None = None
    """The critic's regression targets."""
    value: torch.Tensor | None = None
    """The critic's values."""


class PPOIntermediatesTap:
    """Mixin for a TorchRL clipped-PPO loss (before it in the bases): records its per-row intermediates.

    [`forward_with_intermediates`][lightmarl.algorithms.torchrl_private.PPOIntermediatesTap.forward_with_intermediates]
    runs the loss, unchanged, and returns what it computed on the way.
    """

    #: the pass being recorded (``None`` outside `forward_with_intermediates`: a plain call records nothing).
    _intermediates: PPOIntermediates | None = None

    def forward_with_intermediates(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, PPOIntermediates]:
        """The loss's output on ``tensordict`` and the intermediates of that pass."""
        self._intermediates = seen = PPOIntermediates()
        try:
            out = super().forward(tensordict)  # type: ignore[misc]
        finally:
            self._intermediates = None
        return out, seen

    def _log_weight(self, tensordict: TensorDictBase, adv_shape: torch.Size) -> Any:
        out = super()._log_weight(tensordict, adv_shape)  # type: ignore[misc]
        seen = self._intermediates
        if seen is not None:
            seen.log_weight, seen.kl = out[0].detach(), out[2].detach()
            seen.log_is_weight = None if out[3] is None else out[3].detach()
        return out

    def _get_entropy(self, dist: Any, adv_shape: torch.Size) -> Any:
        entropy = super()._get_entropy(dist, adv_shape)  # type: ignore[misc]
        if self._intermediates is not None:
            self._intermediates.entropy = entropy.detach() if isinstance(entropy, torch.Tensor) else None
        return entropy

    def _critic_loss_inputs(self, target_return: torch.Tensor, state_value: torch.Tensor, old_state_value: Any) -> Any:
        out = super()._critic_loss_inputs(target_return, state_value, old_state_value)  # type: ignore[misc]
        if self._intermediates is not None:
            self._intermediates.value_target, self._intermediates.value = out[0].detach(), out[1].detach()
        return out


__all__ = [
    "PRIVATE_METHODS",
    "PRIVATE_PROPERTIES",
    "PPOIntermediates",
    "PPOIntermediatesTap",
    "clip_bounds",
    "loss_mask",
    "value_and_next_value",
]
