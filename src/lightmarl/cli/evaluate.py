"""``lightmarl evaluate``: a recipe's ``evaluation:`` scenarios played with a checkpoint's policies, written as a report."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import torch
from lightning.pytorch.cli import LightningArgumentParser

from lightmarl.cli.checkpoints import checkpoint_mixtures, read_checkpoint, resolve_last
from lightmarl.cli.trainer_commands import LightmarlCLI
from lightmarl.errors import ConfigError
from lightmarl.evaluation.best_response import best_response_logs
from lightmarl.evaluation.report import markdown_summary
from lightmarl.evaluation.scenarios import EvaluationConfig
from lightmarl.evaluation.suite import EvaluationResult, write_outputs
from lightmarl.training.best_response import check_best_response_algorithms, measure_best_response
from lightmarl.training.checkpoint import check_checkpoint_fits
from lightmarl.training.module import MARLModule
from lightmarl.training.periodic_evaluation import run_suite, suite_for


class EvaluateCLI(LightmarlCLI):
    """``lightmarl evaluate``: the recipe's parser (no subcommand) plus ``--ckpt_path`` and ``--out``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument(
            "--ckpt_path",
            type=str | None,
            default="last",
            help="Checkpoint whose policies are evaluated: a file, `last` (the run's last.ckpt, the default) "
            "or null (the recipe's untrained policies).",
        )
        parser.add_argument(
            "--out",
            type=str | None,
            default=None,
            help="Folder for report.json, summary.md, PNGs and videos (default: evaluation.out_dir, "
            "else <run dir>/evaluation).",
        )

    def evaluate(self) -> None:
        """Load the checkpoint, play every scenario, write the outputs, log the metrics, print the table."""
        config = self.config_init
        evaluation = config.get("evaluation")
        if evaluation is None or not evaluation.names_scenarios:  # evaluation.validation alone is validate's
            raise ConfigError(
                "evaluation: the recipe's `evaluation:` section names no scenarios; add some (docs/evaluation.md) "
                "or pass --evaluation.scenarios / --evaluation.head_to_head"
            )
        module = cast(MARLModule, self.model)
        suite = suite_for(module, evaluation)  # a bad scenario fails before the checkpoint is read
        check_best_response_algorithms(module, evaluation.best_response)
        ckpt_path = config.get("ckpt_path")
        if ckpt_path == "last":
            ckpt_path = resolve_last(self._checkpoint_dirs(), "evaluate")
        if ckpt_path is not None:
            checkpoint = read_checkpoint(ckpt_path)
            check_checkpoint_fits(module, checkpoint["state_dict"], field="--ckpt_path")
            module.load_state_dict(checkpoint["state_dict"])
            module.on_load_checkpoint(checkpoint)
        if module.cpu_threads is not None:
            torch.set_num_threads(module.cpu_threads)
        out = Path(config.get("out") or evaluation.out_dir or Path(self.trainer.default_root_dir) / "evaluation")
        shown = [*evaluation.exploitability, *(c.target for c in evaluation.best_response if c.mixture)]
        mixtures = checkpoint_mixtures(ckpt_path, module, list(dict.fromkeys(shown))) if ckpt_path is not None else {}
        result = run_suite(suite, module, out / "videos", checkpoint=ckpt_path, mixtures=mixtures)
        if evaluation.best_response:
            add_best_responses(result, module, evaluation, suite.bindings, mixtures, out / "best_response")
        written = write_outputs(result, out) + list(result.videos.values())
        for logger in self.trainer.loggers:
            logger.log_metrics(result.logs, step=module.iterations)
            logger.finalize("success")
        print(markdown_summary(result.report))  # noqa: T201 - the command's output
        print("\n".join(f"lightmarl: wrote {path}" for path in written))  # noqa: T201


def add_best_responses(
    result: EvaluationResult,
    module: MARLModule,
    evaluation: EvaluationConfig,
    bindings: dict[str, Any],
    mixtures: dict[str, list[tuple[dict[str, torch.Tensor], float]]],
    root: Path,
) -> None:
    """Train ``evaluation.best_response``'s best responses and add their block and metrics to ``result``."""
    blocks = {}
    for config in evaluation.best_response:
        try:
            blocks[config.name] = measure_best_response(
                module, config, bindings, mixtures, evaluation.confidence, str(root / config.name)
            )
        except ValueError as err:
            raise ConfigError(str(err)) from err
    result.report["best_response"] = blocks
    result.logs.update(best_response_logs(result.report))
