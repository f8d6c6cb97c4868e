"""Lightning's training data for RL: iteration ticks (rollouts are collected in ``training_step``), each process's
collector, and what an iteration logs.

Lightning prefetches one batch ahead from iterable loaders. Were the loader to yield
rollouts, rollout k+1 would be collected before update k, from a stale policy; so the
loader yields only iteration numbers and ``training_step`` collects with the current policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader, IterableDataset

from lightmarl.data.collector import RolloutCollector, StepHook
from lightmarl.envs.config import EnvConfig
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.training.resume import seed_rank_streams


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


def rank_collector(
    env_config: EnvConfig,
    population: MultiAgentPolicy,
    rollout_steps: int,
    *,
    seed: int,
    rank: int,
    stats_window: int,
    device: torch.device,
    on_step: StepHook | None,
) -> RolloutCollector:
    """The collector of process ``rank``, its env copy ``i`` seeded ``seed + num_envs * rank + i`` and its action
    sampling from streams of its own (`seed_rank_streams`).

    Args:
        env_config: the env and how many copies a process steps.
        population: the bindings that act.
        rollout_steps: env steps per copy per rollout.
        seed: the run's base seed (``model.seed``).
        rank: this process's rank.
        stats_window: training episodes per binding in the running episode statistics.
        device: where the policies act.
        on_step: called after every env step (a league's seating of the copies whose episode ended).
    """
    seed_rank_streams(seed, rank, dict(population.policies.items()))
    env = env_config.make_vector(seed=seed + env_config.num_envs * rank)
    return RolloutCollector(env, population, rollout_steps, stats_window=stats_window, device=device, on_step=on_step)


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


def log_iteration(module: LightningModule, logs: Mapping[str, float], binding: str) -> None:
    """Log one iteration's `iteration_logs` through ``module``, and show the frames per second and ``binding``'s
    running episode return (once it has one) in the progress bar."""
    module.log_dict(dict(logs), on_step=True, on_epoch=False, batch_size=1)
    progress = {"fps": logs["time/fps"]}
    if f"collect/{binding}/episode_return" in logs:
        progress["return"] = logs[f"collect/{binding}/episode_return"]
    module.log_dict(progress, prog_bar=True, logger=False, on_step=True, on_epoch=False, batch_size=1)
