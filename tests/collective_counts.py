"""A callback that counts a training run's collectives, by phase (importable from CLI subprocesses with tests/ on PYTHONPATH).

It wraps the ``torch.distributed`` functions that every collective of the run goes through
(Lightning's strategy and the project's own calls look them up on the module at call time) and
counts the calls made while the collector steps the envs (``rollout``) and while the league
does its between-iteration work (``league``). At the end of training each rank writes
``<default_root_dir>/collectives_rank<r>.json``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer

#: every collective or point-to-point call of ``torch.distributed`` a training run could make.
NAMES = (
    "all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_to_all", "barrier",
    "broadcast", "broadcast_object_list", "gather", "gather_object", "irecv", "isend", "recv", "reduce",
    "reduce_scatter", "scatter", "scatter_object_list", "send",
)  # fmt: skip


class CountCollectives(Callback):
    """Count ``torch.distributed`` calls per phase of each iteration (see the module doc)."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.counts: dict[str, int] = {"rollout": 0, "league": 0}
        self.iterations = 0
        self._restore: dict[str, Any] = {}

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.phase is not None:
                self.counts[self.phase] += 1
            return fn(*args, **kwargs)

        return wrapper

    def _in_phase(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.phase = phase
            try:
                return fn(*args, **kwargs)
            finally:
                self.phase = None

        return wrapper

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        for name in NAMES:
            if hasattr(dist, name):
                self._restore[name] = getattr(dist, name)
                setattr(dist, name, self._counted(name, self._restore[name]))
        collector = pl_module._collector  # type: ignore[attr-defined]
        collector.collect = self._in_phase("rollout", collector.collect)
        league = pl_module.league  # type: ignore[attr-defined]
        league.after_iteration = self._in_phase("league", league.after_iteration)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        self.iterations += 1

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        for name, fn in self._restore.items():
            setattr(dist, name, fn)
        path = os.path.join(trainer.default_root_dir, f"collectives_rank{trainer.global_rank}.json")
        with open(path, "w") as f:
            json.dump({"iterations": self.iterations, **self.counts}, f)
