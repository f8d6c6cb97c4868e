"""Memory of a long run, logged every iteration, so that growth shows before it kills the job.

[`MemoryMonitor`][lightmarl.training.memory.MemoryMonitor] is a Lightning callback; a recipe adds it under ``trainer.callbacks``
(``class_path: lightmarl.training.MemoryMonitor``). Every training iteration it logs, from
``/proc`` (Linux; elsewhere only the peak, from ``getrusage``):

* ``memory/rss_mb``: the training process's resident memory now;
* ``memory/peak_rss_mb``: the most it has held so far;
* ``memory/children_rss_mb``: the resident memory of the processes it started (env workers;
  under DDP rank 0 also counts the ranks Lightning started beside it).

``benchmarks/soak.py`` and ``tests/training/test_soak.py`` read these to check that a mixed
population's memory stays flat after warm-up.
"""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer

_MB = 1024 * 1024


def rss_bytes(pid: int | str = "self") -> int | None:
    """Resident memory of process ``pid`` from ``/proc`` (``None`` where it cannot be read)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def descendants(pid: int | None = None) -> list[int]:
    """Every process started by ``pid`` (default: this one), their children included, from ``/proc``."""
    found: list[int] = []
    todo = [os.getpid() if pid is None else pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


def peak_rss_bytes() -> int:
    """The most resident memory this process has held (``getrusage``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def memory_metrics() -> dict[str, float]:
    """``memory/rss_mb``, ``memory/peak_rss_mb`` and ``memory/children_rss_mb`` now."""
    metrics = {"memory/peak_rss_mb": peak_rss_bytes() / _MB}
    rss = rss_bytes()
    if rss is not None:
        metrics["memory/rss_mb"] = rss / _MB
        metrics["memory/children_rss_mb"] = sum(rss_bytes(p) or 0 for p in descendants()) / _MB
    return metrics


class MemoryMonitor(Callback):
    """Logs this process's and its children's resident memory after every training iteration."""

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        pl_module.log_dict(memory_metrics(), on_step=True, on_epoch=False, batch_size=1)
