"""Gradient steps under Lightning: manual backward, DDP-safe gradient averaging, clipping."""

from __future__ import annotations

import contextlib

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lightmarl.algorithms.base import step_finite
from lightmarl.training import collectives


class LightningStepper:
    """The [`GradientStepper`][lightmarl.algorithms.base.GradientStepper] a `MARLModule` hands its trainers.

    RL updates take many backward passes per training step (epochs x minibatches x
    bindings), which DDP's reducer does not support (it expects one backward per forward,
    over every parameter). So backward runs outside DDP's hooks (``no_sync``) and the
    gradients of the parameters being stepped are averaged across ranks here, just before
    each optimizer step. Every rank takes the same steps, so the all-reduces line up.
    """

    def __init__(self, module: LightningModule) -> None:
        self.module = module
        trainer = module._trainer
        self.strategy = trainer.strategy if trainer is not None else None

    def _ddp_model(self) -> DistributedDataParallel | None:
        trainer = self.module._trainer
        if trainer is None or trainer.world_size <= 1:
            return None
        model = getattr(trainer.strategy, "model", None)
        return model if isinstance(model, DistributedDataParallel) else None

    def backward(self, loss: torch.Tensor) -> None:
        ddp = self._ddp_model()
        with ddp.no_sync() if ddp is not None else contextlib.nullcontext():
            self.module.manual_backward(loss)

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        parameters: list[nn.Parameter],
        max_grad_norm: float | None,
        *,
        clip_each_group: bool = False,
    ) -> float:
        if collectives.distributed(self.strategy):
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
            flat = collectives.all_reduce(self.strategy, torch.cat([g.reshape(-1) for g in grads]), "mean")
            offset = 0
            for p in parameters:
                n = p.numel()
                p.grad = flat[offset : offset + n].view_as(p).clone()
                offset += n
        # Averaged gradients are the same on every rank: all take the same skip-or-step decision.
        return step_finite(optimizer, parameters, max_grad_norm, clip_each_group=clip_each_group)

    def agree_min(self, value: int) -> int:
        """The smallest ``value`` over every rank (``value`` itself in a single process)."""
        if not collectives.distributed(self.strategy):
            return value
        return int(collectives.all_reduce(self.strategy, torch.tensor(value), "min"))


def assert_ranks_in_sync(module: LightningModule, atol: float = 1e-6) -> float:
    """Check that every rank holds rank 0's parameters and iteration count; raise on every rank if not.

    A collective (every rank must call it) costing one broadcast of the parameters and one
    tiny all-gather: meant for epoch ends, not every step. Returns the largest absolute
    difference between a rank's parameters and rank 0's (0.0 in a single process).
    """
    strategy = module._trainer.strategy if module._trainer is not None else None
    if not collectives.distributed(strategy):
        return 0.0
    params = [p.detach().reshape(-1).double() for p in module.parameters()]
    local = torch.cat(params) if params else torch.zeros(0, dtype=torch.float64, device=module.device)
    counters = torch.tensor([float(getattr(module, "iterations", 0)), float(local.numel())], dtype=torch.float64)
    gathered = collectives.all_gather(strategy, counters)
    iterations = [int(t[0]) for t in gathered]
    sizes = [int(t[1]) for t in gathered]
    max_diff = float("nan")
    if len(set(sizes)) == 1:  # same parameter layout everywhere: compare values with rank 0's
        # Sent from the host: an unpickled tensor would land on rank 0's own GPU.
        reference = collectives.broadcast(strategy, local.cpu()).to(local.device)
        diff = (local - reference).abs().max() if local.numel() else torch.zeros((), dtype=torch.float64)
        diff = collectives.all_reduce(strategy, diff.reshape(1), "max")
        max_diff = float(diff.item())
    if len(set(iterations)) > 1 or not max_diff <= atol:  # also catches NaN
        raise RuntimeError(
            "lightmarl: DDP ranks out of sync: "
            f"iterations per rank {iterations}, parameters per rank {sizes}, "
            f"max |param - rank 0's| = {max_diff:.3g} (tolerance {atol:g})"
        )
    rank_zero_info(
        f"lightmarl: {len(sizes)} ranks in sync at iteration {iterations[0]} (max |param - rank 0's| = {max_diff:.3g})"
    )
    return max_diff
