"""Every cross-process call of a training run, in one place, through the Lightning strategy.

Training code never calls ``torch.distributed`` itself: it hands the run's
`Strategy` (``trainer.strategy``) to these functions, which
are no-ops in one process (a strategy of world size 1, or none: a module used outside a
``Trainer``). Under DDP they use the strategy's own ``all_gather`` and ``broadcast``; where
Lightning has no fitting operation, the call to ``torch.distributed`` is made here:

* `all_reduce`: ``Strategy.reduce`` runs a barrier before every all-reduce, which would
  double the collectives of the gradient path (one all-reduce per optimizer step);
* `all_gather_objects`: Lightning gathers tensors of one shape only, and the per-rank
  resume state is a tree of tensors of any size.

Every function is a collective: every rank must call it, in the same order.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import Strategy

T = TypeVar("T")
ReduceOp = Literal["sum", "mean", "min", "max"]
_OPS = {"sum": "SUM", "mean": "SUM", "min": "MIN", "max": "MAX"}


def world_size(strategy: Strategy | None) -> int:
    """The number of training processes (1 without a strategy)."""
    return 1 if strategy is None else int(getattr(strategy, "world_size", 1))  # single-device strategies have none


def distributed(strategy: Strategy | None) -> bool:
    """True when the run has more than one process (every function below then communicates)."""
    return world_size(strategy) > 1


def rank(strategy: Strategy | None) -> int:
    """This process's global rank (0 in one process)."""
    return int(strategy.global_rank) if distributed(strategy) else 0  # type: ignore[union-attr]


def all_gather(strategy: Strategy | None, tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor`` (same shape on each), stacked in rank order: ``[ranks, *tensor.shape]``, on the CPU.

    The tensor travels from the strategy's device (NCCL sends GPU tensors only).
    """
    if not distributed(strategy):
        return tensor.detach().unsqueeze(0).cpu()
    assert strategy is not None
    gathered = strategy.all_gather(tensor.detach().to(strategy.root_device).contiguous())
    return gathered.reshape(world_size(strategy), *tensor.shape).cpu()


def all_reduce(strategy: Strategy | None, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
    """``tensor`` reduced over ranks with ``op``, on the tensor's own device (``tensor`` itself may be overwritten)."""
    if op not in _OPS:
        raise ValueError(f"op: expected one of {sorted(_OPS)}, got {op!r}")
    if not distributed(strategy):
        return tensor
    assert strategy is not None
    sent = tensor.to(strategy.root_device)
    # No barrier (Strategy.reduce has one): the gradient path calls this once per optimizer step.
    dist.all_reduce(sent, op=getattr(dist.ReduceOp, _OPS[op]))
    if op == "mean":  # gloo has no AVG
        sent = sent / world_size(strategy) if sent.is_floating_point() else sent // world_size(strategy)
    return sent.to(tensor.device)


def broadcast(strategy: Strategy | None, value: T, src: int = 0) -> T:
    """Rank ``src``'s ``value`` (any picklable object) on every rank."""
    if not distributed(strategy):
        return value
    assert strategy is not None
    return strategy.broadcast(value, src=src)


def all_gather_objects(strategy: Strategy | None, value: Any) -> list[Any]:
    """Every rank's ``value`` (any picklable object, tensors of any size included), in rank order."""
    if not distributed(strategy):
        return [value]
    gathered: list[Any] = [None] * world_size(strategy)
    dist.all_gather_object(gathered, value)
    return gathered
