"""Evaluation scenarios during ``fit``: a Lightning callback that plays them every K training frames.

The recipe's ``evaluation:`` section ([`EvaluationConfig`][lightmarl.evaluation.scenarios.EvaluationConfig])
with ``every_n_frames: K`` makes ``lightmarl fit`` add a `PeriodicEvaluation`. After each
training iteration that crosses a multiple of K frames, rank 0 plays every scenario
(`EvaluationSuite`), the metrics are broadcast to every rank
and logged as ``eval/<scenario>/<binding>/...`` (so ``ModelCheckpoint(monitor="eval/...")`` can
keep the best checkpoint), and videos go to ``<log dir>/videos/frames_<N>/``.

Evaluation never changes training state: it plays copies of the policies in env copies of its
own, and the random streams are restored afterwards (``tests/training/test_periodic_evaluation.py``
checks that weights, optimizer state and the training env seeds are bit-identical with and
without it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info

from lightmarl.errors import ConfigError
from lightmarl.evaluation.scenarios import EvaluationConfig
from lightmarl.evaluation.suite import EvaluationResult, EvaluationSuite
from lightmarl.training.measurement_log import log_measurement
from lightmarl.training.module import MARLModule


def suite_for(module: MARLModule, config: EvaluationConfig) -> EvaluationSuite:
    """The evaluation scenarios of ``config`` checked against ``module``'s population and env.

    Raises:
        ConfigError: a bad scenario, naming the field.
    """
    try:
        return EvaluationSuite(config, module.env_config, module.table.bindings, module.table.agent_binding_map)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def run_suite(
    suite: EvaluationSuite,
    module: MARLModule,
    video_dir: str | Path | None = None,
    checkpoint: str | None = None,
    mixtures: Mapping[str, Sequence[tuple[Mapping[str, torch.Tensor], float]]] | None = None,
) -> EvaluationResult:
    """Play ``suite`` with the module's current policies (on its device); the report names the training
    seed, frames, iterations and ``checkpoint``. ``mixtures``: the league mixtures bindings show
    (`EvaluationSuite.run`)."""
    metadata: dict[str, Any] = {"iterations": module.iterations, "env": module.env_config.describe()}
    if checkpoint is not None:
        metadata["checkpoint"] = str(checkpoint)
    return suite.run(
        dict(module.policies.items()),
        device=module.device,
        step_count=module.frames,
        run=f"seed_{module.seed}",
        video_dir=video_dir,
        metadata=metadata,
        mixtures=mixtures,
    )


class PeriodicEvaluation(Callback):
    """Play the evaluation scenarios every ``every_n_frames`` training frames and log ``eval/<scenario>/...``.

    Args:
        evaluation: the scenarios (a recipe's ``evaluation:`` section).
        every_n_frames: frames between evaluations (default: ``evaluation.every_n_frames``).
    """

    def __init__(self, evaluation: EvaluationConfig, every_n_frames: int | None = None) -> None:
        every = every_n_frames if every_n_frames is not None else evaluation.every_n_frames
        if every is None or isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"evaluation.every_n_frames: expected a positive integer, got {every!r}")
        self.evaluation = evaluation
        self.every_n_frames = every
        self.suite: EvaluationSuite | None = None
        self._evaluated = 0  # multiples of every_n_frames already evaluated
        #: the last evaluation's result (rank 0; ``None`` elsewhere and before the first).
        self.last: EvaluationResult | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit" and self.suite is None:
            self.suite = suite_for(_marl(pl_module), self.evaluation)  # checked before the first env step

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # A resumed run does not re-evaluate the frames it had reached.
        self._evaluated = _marl(pl_module).frames // self.every_n_frames

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        module = _marl(pl_module)
        due = module.frames // self.every_n_frames
        if due <= self._evaluated:
            return
        self._evaluated = due
        assert self.suite is not None, "setup('fit') builds the suite"
        logs: dict[str, float] = {}
        # trainer.log_dir is a collective under DDP (it broadcasts rank 0's): every rank asks.
        video_dir = Path(trainer.log_dir or trainer.default_root_dir) / "videos" / f"frames_{module.frames}"
        if trainer.is_global_zero:
            self.last = run_suite(self.suite, module, video_dir)
            logs = self.last.logs
            rank_zero_info(
                f"lightmarl: evaluation at {module.frames} frames: "
                + ", ".join(f"{k} {v:.3g}" for k, v in logs.items() if k.endswith("/episode_return"))
            )
        shared = trainer.strategy.broadcast(logs, src=0)  # rank 0's results on every rank
        log_measurement(trainer, pl_module, shared)


def _marl(module: LightningModule) -> MARLModule:
    if not isinstance(module, MARLModule):
        raise TypeError(f"PeriodicEvaluation needs a lightmarl MARLModule, got {type(module).__name__}")
    return module
