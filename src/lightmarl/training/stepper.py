"""Gradient steps under Lightning: manual backward, DDP-safe gradient averaging, clipping."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from lightning.pytorch import LightningModule
from torch import nn


class LightningStepper:
    """The :class:`~lightmarl.algorithms.GradientStepper` a :class:`MARLModule` hands its trainers.

    RL updates take many backward passes per training step (epochs x minibatches x
    bindings), which DDP's reducer does not support (it expects one backward per forward,
    over every parameter). So backward runs outside DDP's hooks (``no_sync``) and the
    gradients of the parameters being stepped are averaged across ranks here, just before
    each optimizer step. Every rank takes the same steps, so the all-reduces line up.
    """

    def __init__(self, module: LightningModule) -> None:
        self.module = module

    def _ddp_model(self) -> nn.Module | None:
        trainer = self.module._trainer
        if trainer is None or trainer.world_size <= 1:
            return None
        model = getattr(trainer.strategy, "model", None)
        return model if hasattr(model, "no_sync") else None

    def backward(self, loss: torch.Tensor) -> None:
        ddp = self._ddp_model()
        with ddp.no_sync() if ddp is not None else contextlib.nullcontext():
            self.module.manual_backward(loss)

    def step(self, optimizer: torch.optim.Optimizer, parameters: list[nn.Parameter], max_grad_norm: float | None) -> None:
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            flat /= dist.get_world_size()
            offset = 0
            for p in parameters:
                n = p.numel()
                p.grad = flat[offset : offset + n].view_as(p).clone()
                offset += n
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
