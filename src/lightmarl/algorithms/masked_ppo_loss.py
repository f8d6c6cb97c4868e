"""TorchRL's MAPPO / IPPO losses with their diagnostics over the rows the loss learns from.

TorchRL masks the ``loss_*`` terms with the loss's ``loss_mask_key`` but reports
``kl_approx``, ``clip_fraction``, ``entropy``, ``ESS``, ``max_ratio``, ``mean_ratio`` and
``explained_variance`` over *every* row of the batch. A binding's minibatches hold other rows too: other
bindings' rows (whose stored log-probs come from another policy, so their "KL" is large),
and the rows of agents waiting for their turn. Those diagnostics then overstate how far the
policy moved, by a lot in leagues and turn-based games, and the divergence watch
(``max_kl``) acts on them. These subclasses recompute them over the masked rows only; the
losses themselves are TorchRL's, unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss


class _MaskedDiagnostics:
    """Mixin for a TorchRL clipped-PPO loss: diagnostics as masked means."""

    _clip_bounds: tuple[float, float]

    def _log_weight(self, tensordict: TensorDictBase, adv_shape: torch.Size) -> Any:
        out = super()._log_weight(tensordict, adv_shape)  # type: ignore[misc]
        self._seen_log_weight, self._seen_kl = out[0].detach(), out[2].detach()
        self._seen_log_is_weight = None if out[3] is None else out[3].detach()
        return out

    def _get_entropy(self, dist: Any, adv_shape: torch.Size) -> Any:
        entropy = super()._get_entropy(dist, adv_shape)  # type: ignore[misc]
        self._seen_entropy = entropy.detach() if isinstance(entropy, torch.Tensor) else None
        return entropy

    def _critic_loss_inputs(self, target_return: torch.Tensor, state_value: torch.Tensor, old_state_value: Any) -> Any:
        out = super()._critic_loss_inputs(target_return, state_value, old_state_value)  # type: ignore[misc]
        self._seen_value_target, self._seen_value = out[0].detach(), out[1].detach()
        return out

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._seen_log_weight = self._seen_kl = self._seen_log_is_weight = self._seen_entropy = None
        self._seen_value_target = self._seen_value = None
        out = super().forward(tensordict)  # type: ignore[misc]
        mask = self._row_mask(tensordict)
        if mask is None or not bool(mask.any()):
            return out
        if self._seen_value is not None and "explained_variance" in out.keys():
            target, value = _rows(self._seen_value_target, mask), _rows(self._seen_value, mask)
            residual = (target - value).var(correction=0)
            out.set("explained_variance", 1.0 - residual / (target.var(correction=0) + torch.finfo(target.dtype).eps))
        if self._seen_log_weight is None:
            return out
        log_weight = _rows(self._seen_log_weight, mask)
        low, high = self._clip_bounds
        out.set("clip_fraction", ((log_weight < low) | (log_weight > high)).float().mean())
        out.set("kl_approx", _rows(self._seen_kl, mask).mean())
        if self._seen_entropy is not None and "entropy" in out.keys():
            out.set("entropy", _rows(self._seen_entropy, mask).mean())
        behaviour = (
            log_weight if self._seen_log_is_weight is None else log_weight + _rows(self._seen_log_is_weight, mask)
        )
        ess = (2 * behaviour.logsumexp(0) - (2 * behaviour).logsumexp(0)).exp()
        out.set("ESS", ess / behaviour.numel())
        ratio = behaviour.exp()
        out.set("max_ratio", ratio.max())
        out.set("mean_ratio", ratio.mean())
        return out

    def _row_mask(self, tensordict: TensorDictBase) -> torch.Tensor | None:
        for key in self._loss_mask_keys():  # type: ignore[attr-defined]
            mask = tensordict.get(key, default=None)
            if mask is not None:
                return mask.bool()
        return None


def _rows(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The entries of a per-row diagnostic (``[*rows]`` plus trailing singleton dims) where ``mask`` holds."""
    while values.ndim > mask.ndim and values.shape[-1] == 1:
        values = values.squeeze(-1)
    while mask.ndim > values.ndim and mask.shape[-1] == 1:
        mask = mask.squeeze(-1)
    if values.shape != mask.shape:
        raise ValueError(
            f"PPO diagnostics: per-row values of shape {tuple(values.shape)} for a mask of shape {tuple(mask.shape)}"
        )
    return values[mask].float()


class MaskedMAPPOLoss(_MaskedDiagnostics, MAPPOLoss):
    """TorchRL's `MAPPOLoss`, diagnostics over the loss mask's rows."""


class MaskedIPPOLoss(_MaskedDiagnostics, IPPOLoss):
    """TorchRL's `IPPOLoss`, diagnostics over the loss mask's rows."""
