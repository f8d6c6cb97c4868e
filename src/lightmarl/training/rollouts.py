"""Lightning's training data for RL: iteration ticks (rollouts are collected in ``training_step``), and what an iteration logs.

Lightning prefetches one batch ahead from iterable loaders. Were the loader to yield
rollouts, rollout k+1 would be collected before update k, from a stale policy; so the
loader yields only iteration numbers and ``training_step`` collects with the current policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
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


def iteration_logs(
    metrics: Mapping[str, Mapping[str, float]],
    episodes: Mapping[str, Mapping[str, float]],
    *,
    frames: int,
    iterations: int,
    frames_per_iteration: int,
    seconds: tuple[float, float, float],
) -> dict[str, float]:
    """What one training iteration logs (docs/reference/metrics.md).

    Args:
        metrics: the update's metrics per binding, logged as ``train/<binding>/<name>``.
        episodes: the running episode statistics per binding, logged as ``collect/<binding>/<name>``.
        frames: frames done after this iteration (``counters/frames``).
        iterations: iterations done after this iteration (``counters/iterations``).
        frames_per_iteration: env steps of one iteration, summed over processes (for ``time/fps``).
        seconds: ``time.perf_counter()`` at the iteration's start, after its collection and at its end.
    """
    started, collected, now = seconds
    logs = {f"train/{b}/{name}": value for b, values in metrics.items() for name, value in values.items()}
    logs.update({f"collect/{b}/{name}": value for b, stats in episodes.items() for name, value in stats.items()})
    logs["time/fps"] = frames_per_iteration / max(now - started, 1e-9)
    logs["time/collect_s"] = collected - started
    logs["time/update_s"] = now - collected
    logs["counters/frames"] = float(frames)
    logs["counters/iterations"] = float(iterations)
    return logs
