"""TorchRL's MAPPO / IPPO losses with their diagnostics over the rows the loss learns from.

TorchRL masks the ``loss_*`` terms with the loss's ``loss_mask_key`` but reports
``kl_approx``, ``clip_fraction``, ``entropy``, ``ESS``, ``max_ratio``, ``mean_ratio`` and
``explained_variance`` over *every* row of the batch. A binding's minibatches hold other rows too: other
bindings' rows (whose stored log-probs come from another policy, so their "KL" is large),
and the rows of agents waiting for their turn. Those diagnostics then overstate how far the
policy moved, by a lot in leagues and turn-based games, and the divergence watch
(``max_kl``) acts on them. These subclasses recompute them over the masked rows only; the
losses themselves are TorchRL's, unchanged; the per-row values come from TorchRL's private
hooks through `lightmarl.algorithms.torchrl_private`.
"""

from __future__ import annotations

from typing import cast

import torch
from tensordict import TensorDictBase
from torchrl.objectives import ClipPPOLoss, LossModule
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss

from lightmarl.algorithms.torchrl_private import PPOIntermediatesTap, clip_bounds, loss_mask


class _MaskedDiagnostics(PPOIntermediatesTap):
    """Mixin for a TorchRL clipped-PPO loss: diagnostics as masked means."""

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        out, seen = self.forward_with_intermediates(tensordict)
        mask = loss_mask(cast(LossModule, self), tensordict)
        if mask is None or not bool(mask.any()):
            return out
        if seen.value is not None and seen.value_target is not None and "explained_variance" in out.keys():
            target, value = _rows(seen.value_target, mask), _rows(seen.value, mask)
            residual = (target - value).var(correction=0)
            out.set("explained_variance", 1.0 - residual / (target.var(correction=0) + torch.finfo(target.dtype).eps))
        if seen.log_weight is None or seen.kl is None:
            return out
        log_weight = _rows(seen.log_weight, mask)
        low, high = clip_bounds(cast(ClipPPOLoss, self))
        out.set("clip_fraction", ((log_weight < low) | (log_weight > high)).float().mean())
        out.set("kl_approx", _rows(seen.kl, mask).mean())
        if seen.entropy is not None and "entropy" in out.keys():
            out.set("entropy", _rows(seen.entropy, mask).mean())
        behaviour = log_weight if seen.log_is_weight is None else log_weight + _rows(seen.log_is_weight, mask)
        ess = (2 * behaviour.logsumexp(0) - (2 * behaviour).logsumexp(0)).exp()
        out.set("ESS", ess / behaviour.numel())
        ratio = behaviour.exp()
        out.set("max_ratio", ratio.max())
        out.set("mean_ratio", ratio.mean())
        return out


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
