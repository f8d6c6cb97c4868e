"""``lightmarl fit`` / ``validate`` / ``test``: LightningCLI with lightmarl's defaults, checked checkpoints and one fit per run directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, cast

from jsonargparse import set_parsing_settings
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info

from lightmarl.cli.checkpoints import read_checkpoint, resolve_last
from lightmarl.cli.commands import TRAINER_COMMANDS
from lightmarl.cli.parsing import check_class_paths, readable
from lightmarl.cli.run_defaults import apply_run_defaults, check_run_name, run_name_of, seed_of
from lightmarl.errors import ConfigError
from lightmarl.evaluation.scenarios import EvaluationConfig
from lightmarl.training.checkpoint import check_checkpoint_fits
from lightmarl.training.module import MARLModule
from lightmarl.training.periodic_evaluation import PeriodicEvaluation, suite_for
from lightmarl.training.run_lock import RunLock
from lightmarl.training.storage import check_run_directories

#: the largest seed NumPy (and so ``seed_everything``) accepts.
MAX_SEED = 2**32 - 1
#: set to 1 to start a fresh ``fit`` in a run directory that holds another run's checkpoints, deleting them.
OVERWRITE_RUN_ENV = "LIGHTMARL_OVERWRITE_RUN"
#: run locks this process holds (released by `release_run_locks` when ``main`` returns or raises).
RUN_LOCKS: list[RunLock] = []


def release_run_locks() -> None:
    """Release every run lock this process took (``fit``'s, one per run directory)."""
    while RUN_LOCKS:
        RUN_LOCKS.pop().release()


class LightmarlCLI(LightningCLI):
    """LightningCLI with lightmarl's defaults (`TRAINER_DEFAULTS`) and checked checkpoints.

    Before a subcommand runs, ``--ckpt_path`` is resolved and read weights-only: ``last`` with
    no checkpoint on disk is an error for ``validate`` / ``test`` (they would silently evaluate
    an untrained model) and a logged fresh start for ``fit``; a missing, truncated or crafted
    file is a one-line error. Lightning then loads the checkpoint weights-only too.
    """

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {name: skip for name, skip in LightningCLI.subcommands().items() if name in TRAINER_COMMANDS}

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        # Algorithms declare their hyper-parameters as dataclass fields with docstrings: show those in --help.
        set_parsing_settings(docstring_parse_attribute_docstrings=True)
        return super().init_parser(**kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--run_name",
            type=str | None,
            default=None,
            help="Run directory name under runs/ (default: the recipe's path under recipes/, without .yaml).",
        )
        parser.add_argument(
            "--evaluation",
            type=EvaluationConfig | None,
            default=None,
            help="Validation episodes and evaluation scenarios: `validate` / `test` and every fit epoch play "
            "evaluation.validation, `lightmarl evaluate` and, with every_n_frames, fit play the scenarios "
            "(docs/evaluation.md); `--evaluation.help` lists the fields.",
        )
        # One evaluation configuration: the module's validation_step reads the same section.
        parser.link_arguments("evaluation", "model.evaluation")

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        check_run_name(config.get("run_name"))
        if not config.get("run_name"):
            config.run_name = run_name_of(config.get("config") or [])
        apply_run_defaults(config, config.run_name)
        if config.model.get("seed") is None:  # the seed reaches the module as an argument; `true` is drawn by now
            config.model.seed = seed_of(config.get("seed_everything"))

    def instantiate_classes(self) -> None:
        check_class_paths(self.config[self.subcommand] if self.subcommand else self.config)
        try:
            super().instantiate_classes()
        except (ValueError, TypeError) as err:
            raise ConfigError(readable(str(err))) from err
        evaluation = cast(MARLModule, self.model).evaluation  # the recipe's evaluation: section, as validation reads it
        suite_for(cast(MARLModule, self.model), evaluation)  # a bad scenario fails every subcommand now
        if self.subcommand == "fit" and evaluation.every_n_frames is not None:
            # Before the checkpoint callbacks, so that a monitored eval/... metric is fresh when they run.
            self.trainer.callbacks.insert(0, PeriodicEvaluation(evaluation))  # type: ignore[attr-defined]

    def _set_seed(self) -> None:
        seed = self._get(self.config, "seed_everything")
        if not isinstance(seed, bool) and not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
            raise ConfigError(
                f"seed_everything: expected an integer from 0 to {MAX_SEED}, or true for a random seed, got {seed!r}"
            )
        super()._set_seed()

    def _config_init(self) -> Any:
        return self.config_init[self.subcommand] if self.subcommand else self.config_init

    def _parse_ckpt_path(self) -> None:
        # LightningCLI merges a --ckpt_path file's `hyper_parameters` into the parsed config, so a file
        # could set model.env.env_fn (an import path that is then called). lightmarl checkpoints hold
        # no hyper-parameters (the recipe is the config), and a file is data (lightmarl.trust): the
        # file is checked here and its hyper-parameters are never read.
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if ckpt_path not in (None, "last", "best", "hpc"):
            read_checkpoint(ckpt_path)

    def _run_subcommand(self, subcommand: str) -> None:
        # Lightning creates the loggers' files (TensorBoard's event file, config.yaml in the CSV
        # version folder) before the module's set-up checks the recipe: a run refused there leaves
        # nothing behind, and the next run is not pushed to version_1.
        fresh = [Path(log_dir) for log_dir in self._log_dirs() if not Path(log_dir).exists()]
        try:
            super()._run_subcommand(subcommand)
        except ConfigError:
            if self.trainer.global_rank == 0:  # type: ignore[attr-defined]
                for folder in fresh:
                    shutil.rmtree(folder, ignore_errors=True)
            raise

    def _log_dirs(self) -> list[str]:
        found = []
        for logger in self.trainer.loggers:  # type: ignore[attr-defined]
            try:
                log_dir = logger.log_dir
            except (AttributeError, TypeError):
                continue
            if isinstance(log_dir, str):
                found.append(log_dir)
        return found

    def before_fit(self) -> None:
        # Before Lightning writes config.yaml into the log directory: an unwritable one is named in one line.
        check_run_directories(self.trainer)
        # One fit per run directory: a second one would overwrite this one's last.ckpt (training/run_lock.py).
        lock = RunLock(self.trainer.default_root_dir)  # type: ignore[attr-defined]
        lock.acquire()
        RUN_LOCKS.append(lock)
        self._check_checkpoint("fit")

    def before_validate(self) -> None:
        self._check_checkpoint("validate")

    def before_test(self) -> None:
        self._check_checkpoint("test")

    def _check_checkpoint(self, subcommand: str) -> None:
        config = self.config_init[subcommand]
        if config.get("weights_only") is None:
            config["weights_only"] = True  # lightmarl checkpoints hold tensors and plain data only
        ckpt_path = config.get("ckpt_path")
        if subcommand == "fit" and ckpt_path is None:
            self._refuse_a_finished_run()
        if ckpt_path == "last":
            ckpt_path = config["ckpt_path"] = resolve_last(self._checkpoint_dirs(), subcommand)
            if ckpt_path is None:
                return
        if ckpt_path == "best":
            # Lightning knows the best checkpoint only within the process that wrote it.
            files = self._checkpoint_files()
            found = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            raise ConfigError(
                "--ckpt_path best: a new process knows no best checkpoint; pass the file that a ModelCheckpoint "
                f"with `monitor` wrote (in {', '.join(self._checkpoint_dirs()) or 'no checkpoint folder'}: "
                f"{found or 'none yet'}), or --ckpt_path last"
            )
        if ckpt_path == "hpc":
            root = Path(self.trainer.default_root_dir)  # type: ignore[attr-defined]
            hpc = sorted(root.glob("hpc_ckpt_*.ckpt")) if root.is_dir() else []
            if not hpc:
                raise ConfigError(
                    f"--ckpt_path hpc: no hpc_ckpt_*.ckpt in {str(root)!r} (SLURM requeue checkpoints); "
                    "pass a checkpoint file, or --ckpt_path last"
                )
            return
        if ckpt_path is None:
            return
        checkpoint = read_checkpoint(ckpt_path)
        check_checkpoint_fits(cast(MARLModule, self.model), checkpoint["state_dict"], field="--ckpt_path")

    def _checkpoint_files(self) -> list[str]:
        return sorted(p.name for d in self._checkpoint_dirs() if Path(d).is_dir() for p in Path(d).glob("*.ckpt"))

    def _checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        return [cb for cb in self.trainer.callbacks if isinstance(cb, ModelCheckpoint)]  # type: ignore[attr-defined]

    def _checkpoint_dirs(self) -> list[str]:
        return [str(cb.dirpath) for cb in self._checkpoint_callbacks() if cb.dirpath is not None]

    def _refuse_a_finished_run(self) -> None:
        """A fresh ``fit`` into a folder holding another run's checkpoints stops (or, with
        ``LIGHTMARL_OVERWRITE_RUN=1``, deletes them): Lightning would write ``last-v1.ckpt`` beside the
        old ``last.ckpt``, and the two runs' files could not be told apart."""
        found = sorted(path for d in self._checkpoint_dirs() if Path(d).is_dir() for path in Path(d).glob("*.ckpt"))
        if not found:
            return
        if os.environ.get(OVERWRITE_RUN_ENV) == "1":
            for path in found:
                rank_zero_info(f"lightmarl: {OVERWRITE_RUN_ENV}=1: deleting {path} of the earlier run")
                if self.trainer.global_rank == 0:  # type: ignore[attr-defined]
                    path.unlink(missing_ok=True)
            return
        folder = found[0].parent
        names = ", ".join(path.name for path in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise ConfigError(
            f"run directory {str(folder.parent)!r} holds checkpoints of a run ({folder}: {names}); "
            "continue it with --ckpt_path last, start a new run with another --run_name, "
            f"or set {OVERWRITE_RUN_ENV}=1 to delete them and start afresh"
        )
