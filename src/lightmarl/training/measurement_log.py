"""What a callback measures now and then (an evaluation, an exploitability), logged once per measurement."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from lightning.pytorch import LightningModule, Trainer


def log_measurement(
    trainer: Trainer,
    module: LightningModule,
    metrics: Mapping[str, float],
    *,
    rank_zero_only: bool = False,
    after_last_batch: bool = False,
) -> None:
    """Log what a callback measured at this iteration only (an evaluation, an exploitability): one row for
    the loggers with the iteration's ``counters/frames`` and ``counters/iterations`` beside it, and the values
    in ``trainer.callback_metrics`` (checkpoint monitors, early stopping, a study) until the next measurement.

    Logged through ``module.log`` they would go to the loggers again at every later step of the epoch
    (Lightning's result collection keeps an ``on_step`` value until the epoch ends, and a run is one epoch):
    a flat line between measurements that a curve reads as measured.

    Args:
        trainer: the fit's trainer.
        module: the lightmarl module (its ``frames`` and ``iterations`` label the row).
        metrics: ``{name: value}``.
        rank_zero_only: only rank 0 calls (its measurement is no monitor for callbacks on other ranks).
        after_last_batch: called from ``on_train_end``, where ``module.log`` is closed: the loggers only, at the
            last batch's step.
    """
    # Lightning's count of the batches logged so far: this batch's step until its batch end, one past it after.
    step = int(trainer.fit_loop.epoch_loop._batches_that_stepped)
    if after_last_batch:
        step = max(step - 1, 0)
    else:
        module.log_dict(
            dict(metrics), logger=False, on_step=True, on_epoch=False, batch_size=1, rank_zero_only=rank_zero_only
        )
    if not trainer.is_global_zero:
        return
    row = {
        **metrics,
        "counters/frames": float(cast(Any, module).frames),
        "counters/iterations": float(cast(Any, module).iterations),
    }
    for logger in trainer.loggers:
        logger.log_metrics(row, step=step)
