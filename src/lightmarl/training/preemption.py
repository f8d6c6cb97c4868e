"""Stopping a run on SIGTERM or Ctrl-C without losing it: finish the iteration, checkpoint, exit non-zero.

Schedulers preempt jobs with SIGTERM and people stop them with Ctrl-C. Lightning alone exits 0
on SIGTERM (its ``SIGTERMException`` is a ``SystemExit`` without a code, raised before the
epoch-end checkpoint when validation is due), so a killed run looks finished to a scheduler,
and Ctrl-C raises ``KeyboardInterrupt`` wherever the process happens to be. During ``fit``,
`Preemption` takes both signals over and turns them into a request: the current
iteration (rollout + update) completes, training stops at that boundary, the epoch-end
``ModelCheckpoint`` writes ``last`` (so ``--ckpt_path last`` resumes from there), env workers
shut down with the run, and the command exits with `PREEMPTED_EXIT_CODES` so a
scheduler can requeue it. A second signal stops at once.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info

from lightmarl.training import collectives

#: exit code of a preempted run, by the signal that stopped it (128 + signal number, as shells report).
PREEMPTED_EXIT_CODES = {"SIGTERM": 128 + signal.SIGTERM, "SIGINT": 128 + signal.SIGINT}


class Preemption(Callback):
    """Stop training at the next iteration boundary on SIGTERM or SIGINT.

    ``stopped_by`` names the signal once a stop was requested (``None`` otherwise); the CLI
    turns it into the exit code.
    """

    def __init__(self) -> None:
        self.stopped_by: str | None = None
        #: the signal that came a second time and stopped the run at once (no final checkpoint).
        self.forced_by: str | None = None
        self._received: str | None = None
        self._previous: dict[int, Any] = {}

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.stopped_by = self._received = self.forced_by = None
        if threading.current_thread() is threading.main_thread():
            # Lightning has registered its SIGTERM handler by now: this one replaces it while training.
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._received is not None:
            self.forced_by = name
            raise KeyboardInterrupt(f"second {name}")  # stop now, without a final checkpoint
        self._received = name
        rank_zero_info(f"lightmarl: {name}: finishing this iteration, then a checkpoint (send it again to stop now)")

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        names = list(PREEMPTED_EXIT_CODES)
        request = torch.tensor([float(self._received == name) for name in names])
        # Every rank must stop at the same iteration, whichever rank got the signal.
        request = collectives.all_reduce(trainer.strategy, request, "max")
        if bool(request.any()):
            self.stopped_by = names[int(request.argmax())]
            if not trainer.should_stop:
                rank_zero_info(
                    f"lightmarl: {self.stopped_by}: stopping after iteration {getattr(pl_module, 'iterations', '?')}; "
                    "the epoch-end checkpoint is the one to resume from (--ckpt_path last)"
                )
            trainer.should_stop = True

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
        self._previous = {}
