"""Lightning's training data for RL: iteration ticks; rollouts are collected in ``training_step``.

Lightning prefetches one batch ahead from iterable loaders. Were the loader to yield
rollouts, rollout k+1 would be collected before update k, from a stale policy; so the
loader yields only iteration numbers and ``training_step`` collects with the current policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset


class IterationTicks(IterableDataset):
    """Yields up to ``iterations`` ticks per epoch, fewer once ``remaining()`` reaches 0.

    Every rank yields the same number of ticks (the budget is global and deterministic),
    so every rank takes the same optimizer steps.
    """

    def __init__(self, iterations: int, remaining: Callable[[], int]) -> None:
        self.iterations = iterations
        self.remaining = remaining

    def __iter__(self) -> Iterator[int]:
        yield from range(min(self.iterations, max(self.remaining(), 0)))


def _keep(item: Any) -> Any:
    return item


def tick_loader(iterations: int = 1, remaining: Callable[[], int] = lambda: 1) -> DataLoader:
    # A generator of its own: each iter() of a DataLoader draws a base seed, from torch's global RNG
    # otherwise, and a resumed run (its RNG restored) would then draw differently from the original.
    return DataLoader(
        IterationTicks(iterations, remaining),
        batch_size=None,
        num_workers=0,
        collate_fn=_keep,
        generator=torch.Generator(),
    )
