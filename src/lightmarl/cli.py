"""The ``lightmarl`` command: LightningCLI over [`MARLModule`][lightmarl.training.module.MARLModule].

``lightmarl fit --config recipes/quickstart.yaml`` trains, ``lightmarl validate`` /
``lightmarl test`` play evaluation episodes; ``--print_config`` shows the resolved recipe
and any ``--model.x.y=value`` / ``--trainer.x=value`` overrides it. ``lightmarl export``
writes a run's policies for inference (`lightmarl.policies.exported`). A recipe's
``evaluation:`` section ([`EvaluationConfig`][lightmarl.evaluation.scenarios.EvaluationConfig]) names
evaluation scenarios: ``lightmarl evaluate --config recipe.yaml --ckpt_path last`` plays them and
writes a report, its plots and videos, and ``evaluation.every_n_frames`` makes ``fit`` play them
periodically (`lightmarl.training.periodic_evaluation`).

A recipe carries only what differs from the defaults every run shares: the Trainer settings of
`TRAINER_DEFAULTS`, and a run directory ``runs/<run_name>`` (`apply_run_defaults`)
holding a CSV and a TensorBoard logger and a ``checkpoints/`` folder with ``last.ckpt``. The run
name is ``run_name`` where the recipe (or ``--run_name``) sets it, else the recipe file's path under
``recipes/`` without ``.yaml`` (`run_name_of`).

User errors (a bad recipe, a missing or unreadable checkpoint) end in one line naming the
field and a non-zero exit; ``LIGHTMARL_DEBUG=1`` shows the full traceback instead.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Any, NoReturn, cast

import torch
import yaml
from jsonargparse import set_parsing_settings
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lightmarl._imports import import_object
from lightmarl.errors import TRAINING_FAULT_EXIT_CODE, CheckpointWriteError, ConfigError, TrainingFault
from lightmarl.evaluation import plot_cli
from lightmarl.evaluation.best_response import best_response_logs
from lightmarl.evaluation.report import markdown_summary
from lightmarl.evaluation.scenarios import EvaluationConfig, moved_setting
from lightmarl.evaluation.suite import EvaluationResult, write_outputs
from lightmarl.experiments import commands as experiment_commands
from lightmarl.inference.onnx import export_onnx
from lightmarl.policies.artifact import parse_mixture, read_artifact, write_artifact
from lightmarl.policies.loading import load_torch_file
from lightmarl.policies.run_checkpoints import latest_checkpoint
from lightmarl.training.best_response import measure_best_response
from lightmarl.training.module import MARLModule
from lightmarl.training.periodic_evaluation import PeriodicEvaluation, run_suite, suite_for
from lightmarl.training.preemption import PREEMPTED_EXIT_CODES, Preemption
from lightmarl.training.run_lock import RunLock
from lightmarl.training.storage import check_run_directories

TRAINER_DEFAULTS = {
    # The frame budget (model.max_frames) ends training, not an epoch count; trainer.max_time
    # (Lightning's wall-clock limit, e.g. "00:00:15:00") may end it earlier, with a checkpoint.
    "max_epochs": -1,
    "log_every_n_steps": 1,
    "num_sanity_val_steps": 0,
    "check_val_every_n_epoch": 1,
    "accelerator": "auto",
    "devices": 1,
}
#: where runs go, relative to the working directory: ``runs/<run_name>/``.
RUNS_DIR = "runs"
CHECKPOINT_CLASS = "lightning.pytorch.callbacks.ModelCheckpoint"
#: the largest seed NumPy (and so ``seed_everything``) accepts.
MAX_SEED = 2**32 - 1
#: run locks this process holds (released when `main` returns or raises).
_RUN_LOCKS: list[RunLock] = []
#: every command with its one-line summary, as `lightmarl --help` lists them: LightningCLI's
#: (`TRAINER_COMMANDS`) and those `main` dispatches itself. A new command is one entry here.
COMMANDS: dict[str, str] = {
    "fit": "train a recipe's population until model.max_frames env steps; writes runs/<recipe>/",
    "validate": "play evaluation.validation.episodes seeded episodes with a checkpoint's policies, logged as eval/...",
    "test": "the same episodes as validate, logged as test/...",
    "evaluate": "play the recipe's evaluation: scenarios; write report.json, summary.md, plots and videos",
    "export": "write a run's policies for inference (safetensors or ONNX), without optimizer or trainer state",
    "plot": "draw learning curves, payoff heatmaps and return distributions from runs and reports",
    "sweep": "run recipes x overrides x seeds as fit + validate runs, resumable, with a summary and an rliable report",
    "tune": "search a recipe's hyper-parameters with Optuna in a study database; write the best trial as a recipe",
}
#: the commands that run a Lightning ``Trainer`` method through LightningCLI (``predict`` is not one:
#: a population acts through ``lightmarl.load_population``, docs/howto/export.md).
TRAINER_COMMANDS = ("fit", "validate", "test")
COMMANDS_HINT = f"the commands are {', '.join(COMMANDS)} (`lightmarl COMMAND --help` lists its options)"
#: set to 1 for full tracebacks instead of one-line user errors.
DEBUG_ENV = "LIGHTMARL_DEBUG"
#: set to 1 to start a fresh ``fit`` in a run directory that holds another run's checkpoints, deleting them.
OVERWRITE_RUN_ENV = "LIGHTMARL_OVERWRITE_RUN"


def seed_of(seed_everything: Any) -> int | None:
    """The module's ``seed`` from ``seed_everything``: the integer, or ``None`` (``false``; ``true`` before it is drawn)."""
    return seed_everything if isinstance(seed_everything, int) and not isinstance(seed_everything, bool) else None


def readable(message: str) -> str:
    """A jsonargparse / instantiation error as one line naming the field.

    A field typed ``X | None`` (e.g. ``model.algorithm``) reports a failed ``X`` as "Does not
    validate against any of the Union subtypes" followed by each subtype's error; only the
    non-``None`` one says what is wrong, so that is the one kept. Other messages lose their
    line breaks.
    """
    moved = moved_setting(message)  # a recipe key that has moved: name the new one
    if moved is not None:
        return moved
    union = "Does not validate against any of the Union subtypes"
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if any(union in line for line in lines):
        field = lines[0].split(union)[0].strip()  # e.g. 'Parser key "model.algorithm":'
        reasons: list[str] = []
        for line in lines[lines.index("Errors:") + 1 :] if "Errors:" in lines else []:
            if line.startswith("Given value"):
                break
            if line.startswith("- "):
                reasons.append(line[2:])
            elif reasons:  # a reason continued on the next line
                reasons[-1] += " " + line
        reasons = [reason for reason in reasons if "NoneType" not in reason]
        if reasons:
            return " ".join([field, "; ".join(reasons)]).strip()
    return " ".join(lines)


def commands_help() -> str:
    """``lightmarl --help``: every command of `COMMANDS` with its summary."""
    width = max(len(name) for name in COMMANDS) + 2
    rows = "\n".join(f"  {name:<{width}}{summary}" for name, summary in COMMANDS.items())
    return (
        "usage: lightmarl COMMAND [options]\n\n"
        "Multi-agent RL populations on PyTorch Lightning, TorchRL and TensorDict: train, evaluate and ship\n"
        "the policies a YAML recipe names.\n\n"
        f"commands:\n{rows}\n\n"
        "`lightmarl COMMAND --help` lists a command's options. Example:\n"
        "  lightmarl fit --config recipes/quickstart.yaml\n"
        "  lightmarl validate --config recipes/quickstart.yaml --ckpt_path last\n"
    )


def command_parser_kwargs(command: str) -> dict[str, str]:
    """What the help of a recipe command (`TRAINER_COMMANDS` and ``evaluate``) opens with."""
    extra = " [--out DIR]" if command == "evaluate" else ""
    return {
        "prog": f"lightmarl {command}",
        "usage": f"lightmarl {command} --config RECIPE [--model.FIELD VALUE ...] [--trainer.FIELD VALUE ...] "
        f"[--ckpt_path last|FILE]{extra}",
        "description": f"{COMMANDS[command][0].upper()}{COMMANDS[command][1:]}. lightmarl's own options come first, "
        "then the model's (a recipe's model: section), then Lightning's Trainer (its trainer: section).",
    }


_SITE_LINK = re.compile(r"\[(`[^`\]]+`)\]\[[\w.]+\]")


class LightmarlArgumentParser(LightningArgumentParser):
    """Parse errors as one line (``lightmarl: error: ...``) instead of the whole usage, exit code 2;
    help lists lightmarl's own options and the model's before Lightning's Trainer flags."""

    def format_help(self, formatter: argparse.HelpFormatter | None = None) -> str:
        groups = self._action_groups

        def lightning(group: Any) -> bool:
            dests = [action.dest for action in group._group_actions]
            return bool(dests) and all(d.split(".")[0] in ("trainer", "data") for d in dests)

        titles = {id(g): g.title for g in groups}
        for group in groups:
            dests = {action.dest.split(".")[0] for action in group._group_actions}
            if dests == {"trainer"}:
                group.title = "Lightning's Trainer (a recipe's trainer: section; lightmarl fills in its defaults)"
            elif dests == {"data"}:
                group.title = "Lightning's DataModule (unused: lightmarl collects its own rollouts)"
            elif "ckpt_path" in dests and dests <= {"ckpt_path", "weights_only"}:
                group.title = "The checkpoint"
        self._action_groups = [g for g in groups if not lightning(g)] + [g for g in groups if lightning(g)]
        # Docstrings cross-reference as the site renders them, [`X`][lightmarl.module.X]: the terminal shows `X`.
        helps = {id(a): a.help for a in self._actions}
        for action in self._actions:
            if isinstance(action.help, str):
                action.help = _SITE_LINK.sub(r"\1", action.help)
        try:
            return super().format_help(formatter)
        finally:
            for action in self._actions:
                action.help = helps[id(action)]
            self._action_groups = groups
            for group in groups:
                group.title = titles[id(group)]

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get(DEBUG_ENV):
            super().error(message, ex)
        if "subcommand" in message and ("invalid choice" in message or "not provided" in message):
            # LightningCLI knows only the Trainer's commands; lightmarl dispatches the others itself.
            found = re.search(r"invalid choice: '([^']*)'", message)
            given = f"unknown command {found.group(1)!r}" if found else "no command given"
            sys.stderr.write(f"lightmarl: error: {given}; {COMMANDS_HINT}\n")
            raise SystemExit(2)
        # prog is "<script> [options] fit"; the script is __main__.py when run in-process.
        command = " ".join(["lightmarl", *self.prog.replace(" [options]", "").split()[1:]])
        sys.stderr.write(f"lightmarl: error: {readable(message)} (`{command} --help` lists every option)\n")
        raise SystemExit(2)

    def _parse_common(self, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        # --print_config prints while parsing, before LightmarlCLI.before_instantiate_classes fills
        # in the run layout: fill it in here too, so that the printed config is the one that runs
        # (trainer.default_root_dir: runs/<recipe>, its loggers and checkpoint), not null.
        request = getattr(self, "print_config", None)
        if isinstance(request, dict):
            config = cfg.get(request["key"]) if request.get("key") else cfg  # the subcommand's part
            if config is not None and config.get("trainer") is not None:
                if not config.get("run_name"):
                    config.run_name = run_name_of(config.get("config") or [])
                apply_run_defaults(config, config.run_name)
        return super()._parse_common(cfg, *args, **kwargs)


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
            _read_checkpoint(ckpt_path)

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
        _RUN_LOCKS.append(lock)
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
            last = self._latest_checkpoint()
            if last is None:
                where = self._checkpoint_dirs() or ["(no ModelCheckpoint callback in this recipe)"]
                if subcommand != "fit":
                    raise ConfigError(
                        f"--ckpt_path last: no last checkpoint in {', '.join(where)}; "
                        "train first with `lightmarl fit`, or pass a checkpoint file"
                    )
                rank_zero_info(
                    f"lightmarl: --ckpt_path last: no checkpoint in {', '.join(where)}; starting a fresh run"
                )
                config["ckpt_path"] = None
                return
            ckpt_path = config["ckpt_path"] = str(last)  # Lightning's own "last" lookup goes by file times
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
        checkpoint = _read_checkpoint(ckpt_path)
        cast(MARLModule, self.model).check_checkpoint_fits(checkpoint["state_dict"], field="--ckpt_path")

    def _checkpoint_files(self) -> list[str]:
        return sorted(p.name for d in self._checkpoint_dirs() if Path(d).is_dir() for p in Path(d).glob("*.ckpt"))

    def _checkpoint_callbacks(self) -> list[ModelCheckpoint]:
        return [cb for cb in self.trainer.callbacks if isinstance(cb, ModelCheckpoint)]  # type: ignore[attr-defined]

    def _checkpoint_dirs(self) -> list[str]:
        return [str(cb.dirpath) for cb in self._checkpoint_callbacks() if cb.dirpath is not None]

    def _latest_checkpoint(self) -> Path | None:
        """The run's newest checkpoint by its counters (`lightmarl.policies.run_checkpoints`), said in a line."""
        files = [path for d in self._checkpoint_dirs() if Path(d).is_dir() for path in Path(d).glob("*.ckpt")]
        return latest_checkpoint(files, field="--ckpt_path last", say=lambda line: rank_zero_info(f"lightmarl: {line}"))

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


def check_class_paths(config: Any) -> None:
    """Refuse a ``class_path`` anywhere in the parsed recipe that names a function or another non-class
    (``os.system``) before anything is built: jsonargparse calls ``{class_path, init_args}`` values
    it finds in free-form fields (``policy_kwargs``, ``env_kwargs``) while it instantiates the recipe.
    Each extension point then checks the class's base where it builds it."""
    from jsonargparse import Namespace

    def walk(value: Any, field: str) -> None:
        if isinstance(value, Namespace):
            value = value.as_dict()
        if isinstance(value, dict):
            path = value.get("class_path")
            if isinstance(path, str) and "." in path:
                try:
                    target = import_object(path, field=f"{field}.class_path")
                except ValueError:
                    target = None  # an unimportable path is named where it is built, with its context
                if target is not None and not isinstance(target, type):
                    raise ConfigError(
                        f"{field}.class_path: {path!r} is a {type(target).__name__}, not a class; "
                        "a class_path names a class to build"
                    )
            for key, item in value.items():
                walk(item, f"{field}.{key}" if field else str(key))
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(item, f"{field}[{i}]")

    walk(config, "")


def check_run_name(run_name: str | None) -> None:
    """Refuse a ``--run_name`` that names no folder under ``runs/``: empty (it would become the recipe's
    default name), absolute or leaving ``runs/`` with ``..`` (``trainer.default_root_dir`` moves a run)."""
    if run_name is None:
        return
    path = PurePath(run_name)
    if not run_name.strip() or path.is_absolute() or ".." in path.parts:
        raise ConfigError(
            f"--run_name: expected a folder name under {RUNS_DIR}/ (e.g. my_run or sweeps/lr_3e-4), got {run_name!r}; "
            "leave it unset for the recipe's name, or set --trainer.default_root_dir to put the run elsewhere"
        )


def run_name_of(config_files: Sequence[Any]) -> str:
    """The run name of a recipe: the first ``--config`` file's path under a ``recipes/`` folder,
    without its suffix (``recipes/two_trainers/ppo_run.yaml`` -> ``two_trainers/ppo_run``), else its
    file name without suffix; ``run`` without a config file."""
    if not config_files:
        return "run"
    path = PurePath(str(getattr(config_files[0], "relative", config_files[0]))).with_suffix("")
    parts = path.parts
    if "recipes" in parts[:-1]:
        last = len(parts) - 1 - parts[::-1].index("recipes")
        return "/".join(parts[last + 1 :])
    return path.name


def apply_run_defaults(config: Any, run_name: str) -> None:
    """Fill what a recipe leaves unset with the run layout every recipe shares (docs/getting_started.md, "Where things go").

    ``trainer.default_root_dir`` -> ``runs/<run_name>`` (the run directory; a recipe that sets
    it moves the whole run); ``trainer.logger`` unset or ``null`` -> a CSV logger (``csv/``) and a
    TensorBoard logger (``tensorboard/``) in the run directory (``false``: no logger); a
    ``ModelCheckpoint`` writing ``checkpoints/last.ckpt`` at every epoch end, unless
    ``trainer.enable_checkpointing`` is ``false`` or a ``ModelCheckpoint`` of ``trainer.callbacks``
    keeps ``last`` itself (``save_last``). A recipe's ``ModelCheckpoint`` without ``dirpath`` writes into
    the run's ``checkpoints/`` too: one that keeps the best checkpoint by a metric (``monitor:
    eval/main/episode_return``, ``mode: max``) is the only checkpoint setting a recipe needs.

    Args:
        config: the parsed config of one subcommand (a jsonargparse ``Namespace``).
        run_name: the run's name (`run_name_of`).
    """
    from jsonargparse import Namespace

    trainer = config.trainer
    if trainer.default_root_dir is None:
        trainer.default_root_dir = f"{RUNS_DIR}/{run_name}"
    run_dir = str(trainer.default_root_dir)
    if trainer.logger is None:
        trainer.logger = [
            Namespace(class_path=f"lightning.pytorch.loggers.{kind}", init_args=Namespace(save_dir=run_dir, name=name))
            for kind, name in (("CSVLogger", "csv"), ("TensorBoardLogger", "tensorboard"))
        ]
    callbacks = trainer.callbacks
    callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, list) else [callbacks]
    keeps_last = False
    for callback in callbacks:
        if isinstance(callback, ModelCheckpoint):
            keeps_last |= bool(callback.save_last)
        elif getattr(callback, "class_path", None) == CHECKPOINT_CLASS:
            init_args = callback.get("init_args")
            if init_args is None:
                init_args = callback.init_args = Namespace()
            if init_args.get("dirpath") is None:
                # Lightning's own default is the first logger's version folder: keep every checkpoint of a run in one place.
                init_args.dirpath = f"{run_dir}/checkpoints"
            keeps_last |= bool(init_args.get("save_last"))
    if trainer.enable_checkpointing is not False and not keeps_last:
        callbacks.append(
            Namespace(
                class_path=CHECKPOINT_CLASS,
                init_args=Namespace(
                    dirpath=f"{run_dir}/checkpoints",
                    save_last=True,
                    every_n_epochs=1,
                    save_on_train_epoch_end=True,
                    # A resumed run (moved or renamed) overwrites last.ckpt rather than write last-v1.ckpt
                    # beside it: the run's last.ckpt is always its newest state.
                    enable_version_counter=False,
                ),
            )
        )
    trainer.callbacks = callbacks


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
        ckpt_path = config.get("ckpt_path")
        if ckpt_path == "last":
            last = self._latest_checkpoint()
            if last is None:
                where = self._checkpoint_dirs() or ["(no ModelCheckpoint callback in this recipe)"]
                raise ConfigError(
                    f"--ckpt_path last: no last checkpoint in {', '.join(where)}; "
                    "train first with `lightmarl fit`, pass a checkpoint file, or --ckpt_path null"
                )
            ckpt_path = str(last)
        if ckpt_path is not None:
            checkpoint = _read_checkpoint(ckpt_path)
            module.check_checkpoint_fits(checkpoint["state_dict"], field="--ckpt_path")
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


def checkpoint_mixtures(
    path: str, module: MARLModule, bindings: Sequence[str]
) -> dict[str, list[tuple[dict[str, torch.Tensor], float]]]:
    """The league mixtures a checkpoint records for ``bindings``: binding -> each member's weights
    (a snapshot's, or a binding's own) and its meta weight; bindings without one are left out."""
    if not bindings:
        return {}
    try:
        artifact = read_artifact(path, field="--ckpt_path")
    except ValueError as err:
        raise ConfigError(str(err)) from err
    snapshots = {snapshot.id: snapshot for snapshot in artifact.snapshots}
    out = {}
    for binding in bindings:
        members = artifact.mixtures.get(binding) or {}
        out[binding] = [
            (
                artifact.snapshot_weights(snapshots[member])
                if member in snapshots
                else module.policies[member].state_dict(),
                weight,
            )
            for member, weight in members.items()
        ]
    return {binding: members for binding, members in out.items() if members}


def _read_checkpoint(path: str) -> dict[str, Any]:
    """A checkpoint read weights-only; fails in one line on a missing, truncated, crafted or non-Lightning file."""
    try:
        checkpoint = load_torch_file(path, field="--ckpt_path")
    except ValueError as err:
        raise ConfigError(str(err)) from err
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"--ckpt_path: {str(path)!r} is not a Lightning checkpoint (no 'state_dict')")
    for key, kind in (("state_dict", dict), ("pytorch-lightning_version", str)):
        if not isinstance(checkpoint.get(key), kind):
            raise ConfigError(f"--ckpt_path: {str(path)!r} is not a Lightning checkpoint (no {key!r})")
    return checkpoint


def _config_files(args: list[str]) -> list[tuple[str, str]]:
    """``(flag, value)`` of every ``--config F``, ``--config=F``, ``-c F`` and ``-cF`` in ``args``."""
    found: list[tuple[str, str]] = []
    for i, arg in enumerate(args):
        for flag in ("--config", "-c"):
            if arg == flag and i + 1 < len(args):
                found.append((flag, args[i + 1]))
            elif arg.startswith(f"{flag}="):
                found.append((flag, arg[len(flag) + 1 :]))
            elif flag == "-c" and arg.startswith("-c") and len(arg) > 2 and not arg.startswith("--"):
                found.append((flag, arg[2:]))
    return found


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping that sets one key twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key set twice in one mapping is an error: plain YAML keeps
    the later value without a word (a second ``model:`` section replaces the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in seen and key != "<<":
                raise DuplicateKeyError(
                    f"key {key!r} is set twice in one mapping (lines {seen[key]} and {line}); "
                    "YAML would keep only the later value: remove one"
                )
            if isinstance(key, str | int | float | bool):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _check_config_files(args: list[str]) -> None:
    """Fail on a recipe file that holds no settings, no mapping of them, or a key set twice, with a
    message (LightningCLI prints only 'Unexpected config', and YAML keeps a duplicate key's later value)."""
    for flag, value in _config_files(args):
        path = Path(value)
        if not path.is_file():
            continue  # jsonargparse also takes an inline YAML string, and names a missing file itself
        text = path.read_text()
        if not text.strip():
            raise ConfigError(f"{flag} {value}: the file is empty; a recipe needs at least a `model:` section")
        try:
            loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader that refuses duplicate keys
        except DuplicateKeyError as err:
            raise ConfigError(f"{flag} {value}: {err}") from None
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            reason = getattr(err, "problem", None) or type(err).__name__
            raise ConfigError(f"{flag} {value}: not valid YAML: {reason}{at}") from None
        if loaded is None:
            raise ConfigError(
                f"{flag} {value}: the file holds no settings (only comments or document markers); "
                "a recipe needs at least a `model:` section"
            )
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"{flag} {value}: expected a mapping of sections (model:, trainer:, ...), "
                f"got a {type(loaded).__name__} ({' '.join(text.split())[:60]!r})"
            )


class _OneLineArgumentParser(argparse.ArgumentParser):
    """``lightmarl export``'s argument errors as one ``lightmarl: error:`` line, without argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message} (`{self.prog} --help` lists every option)")


def export_main(args: list[str]) -> None:
    """``lightmarl export SOURCE --out DIR``: the trained population, for inference, as NPCs or as ONNX."""
    parser = _OneLineArgumentParser(
        prog="lightmarl export",
        description="Write everything a run's population needs to act (policies, env transforms with their "
        "statistics, the agent -> binding map, counters, league snapshots and mixtures; no optimizer or trainer "
        "state) as population.json + safetensors, or each binding's acting graph as ONNX. "
        "`policy_uri: DIR#binding`, PolicyDict.load(DIR) and lightmarl.load_population(DIR) load an export "
        "(docs/export_format.md).",
    )
    parser.add_argument(
        "checkpoint",
        help="a run directory (runs/x), a training checkpoint (runs/x/checkpoints/last.ckpt), an export, a "
        "PolicyDict file or a league snapshot file",
    )
    parser.add_argument("--out", required=True, help="the directory to write")
    parser.add_argument("--bindings", nargs="+", help="export only these bindings (default: all)")
    parser.add_argument(
        "--format",
        choices=["safetensors", "onnx"],
        default="safetensors",
        help="safetensors: the export format; onnx: <binding>.onnx + manifest.json (needs the onnx extra)",
    )
    parser.add_argument(
        "--mixture",
        action="append",
        default=[],
        metavar="NAME=MEMBER:WEIGHT,...",
        help="a league mixture to record: weights per member (a binding or snapshot id), normalized to sum 1",
    )
    parser.add_argument(
        "--allow",
        nargs="+",
        default=[],
        metavar="CLASS_PATH",
        help="classes outside lightmarl's policies and env transforms that the file may name (e.g. an encoder "
        "of examples/)",
    )
    parser.add_argument(
        "--trust_code",
        action="store_true",
        help="build any class the file names (importing it runs its code): only for files you trust",
    )
    parser.add_argument("--no_snapshots", action="store_true", help="leave the league's snapshots out")
    options = parser.parse_args(args)
    out_path = Path(options.out)
    if out_path.exists() and not out_path.is_dir():
        raise ConfigError(f"--out: {options.out!r} is a file; name a directory to write the export into")
    artifact = read_artifact(options.checkpoint, field="lightmarl export")
    artifact.check_classes(options.allow, trust_code=options.trust_code)
    ungrouped = sorted(b for b, entry in artifact.bindings.items() if entry.get("group") not in artifact.groups)
    if ungrouped:
        # An export without them would be written, and then refused by load_population.
        raise ConfigError(
            f"lightmarl export: {artifact.source!r} records no agent group spec for binding(s) {ungrouped} "
            "(a checkpoint without saved group specs); load it as a policy_uri in a recipe, whose env gives them"
        )
    if options.bindings:
        artifact = artifact.select(options.bindings)
    for text in options.mixture:
        name, weights = parse_mixture(text, artifact)
        artifact.mixtures[name] = weights
    try:
        if options.format == "onnx":
            out = export_onnx(artifact, options.out, allow=options.allow, trust_code=options.trust_code)
            skipped = json.loads((out / "manifest.json").read_text())["skipped"]
            for binding, reason in skipped.items():
                print(f"lightmarl: no ONNX graph for {binding}: {reason}")  # noqa: T201
        else:
            out = write_artifact(artifact, options.out, with_snapshots=not options.no_snapshots)
    except OSError as err:
        raise ConfigError(f"--out: cannot write {options.out!r} ({err.strerror or err})") from err
    print(f"lightmarl: exported {', '.join(artifact.bindings)} to {out} (from {artifact.source})")  # noqa: T201


#: a negative number argparse takes for an option (it knows only ``-5`` and ``-0.5``): ``-1e9``, ``-1.5E-3``, ``-inf``.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)[eE][+-]?\d+$|^-(inf|infinity|nan)$", re.IGNORECASE)


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--field -1e9`` as ``--field=-1e9``: argparse reads a value such as ``-1e9`` as an option, and
    the error then names the option before it instead of the field's value check."""
    out: list[str] = []
    for arg in argv:
        previous = out[-1] if out else ""
        if _NEGATIVE_NUMBER.match(arg) and previous.startswith("--") and "=" not in previous:
            out[-1] = f"{previous}={arg}"
        else:
            out.append(arg)
    return out


def _one_line(err: BaseException) -> str:
    """An error message on one line (an env's or a library's message may span several)."""
    return " ".join(str(err).split())


def main(args: list[str] | None = None) -> None:
    argv = _join_negative_values(sys.argv[1:] if args is None else args)
    if args is not None:
        args = argv
    else:
        sys.argv[1:] = argv  # LightningCLI reads sys.argv itself when given no args
    if argv[:1] in (["-h"], ["--help"]):
        print(commands_help(), end="")  # noqa: T201 - the command's output
        return
    if argv[:1] == ["plot"]:
        # LightningCLI's subcommands are fixed: `lightmarl plot` is dispatched before it.
        plot_cli.main(argv[1:])
        return
    if argv[:1] in (["sweep"], ["tune"]):
        # Many runs, each a `lightmarl fit` subprocess (lightmarl.experiments): dispatched before LightningCLI too.
        experiment_commands.main(argv)
        return
    preemption = Preemption()
    try:
        _main(argv, args, preemption)
    finally:
        while _RUN_LOCKS:
            _RUN_LOCKS.pop().release()


def _main(argv: list[str], args: list[str] | None, preemption: Preemption) -> None:
    try:
        if argv[:1] == ["export"]:
            try:
                return export_main(argv[1:])
            except (ValueError, ImportError) as err:
                raise ConfigError(str(err)) from err
        _check_config_files(argv)
        if argv[:1] == ["evaluate"]:
            # Not a Trainer method, so not a LightningCLI subcommand: the recipe is parsed without one,
            # from the arguments after `evaluate` (LightningCLI warns when args and sys.argv both exist).
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*args parameter is intended.*")
                cli = EvaluateCLI(
                    MARLModule,
                    trainer_defaults=TRAINER_DEFAULTS,
                    seed_everything_default=0,
                    auto_configure_optimizers=False,
                    parser_class=LightmarlArgumentParser,
                    parser_kwargs=command_parser_kwargs("evaluate"),
                    args=argv[1:],
                    run=False,
                )
            cli.evaluate()
            return
        LightmarlCLI(
            MARLModule,
            parser_kwargs={
                "description": f"Multi-agent RL with lightmarl; {COMMANDS_HINT}.",
                **{command: command_parser_kwargs(command) for command in TRAINER_COMMANDS},
            },
            trainer_defaults={**TRAINER_DEFAULTS, "callbacks": [preemption]},
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            parser_class=LightmarlArgumentParser,
            args=args,
        )
    except SIGTERMException:
        preemption.stopped_by = "SIGTERM"  # Lightning's own exit after the stop; it carries no exit code
    except (SystemExit, KeyboardInterrupt):
        if preemption.forced_by is None:
            raise
        # A second signal: Lightning's "Detected KeyboardInterrupt" exit 1, said in lightmarl's words.
        print(  # noqa: T201
            f"lightmarl: error: stopped at once by a second {preemption.forced_by}, without a final checkpoint; "
            "resume from the last one with --ckpt_path last",
            file=sys.stderr,
        )
        raise SystemExit(PREEMPTED_EXIT_CODES[preemption.forced_by]) from None
    except ConfigError as err:
        if os.environ.get(DEBUG_ENV):
            raise
        # Config errors raised while building the run: one readable line, non-zero exit.
        print(f"lightmarl: error: {_one_line(err)}", file=sys.stderr)  # noqa: T201
        raise SystemExit(2) from None
    except CheckpointWriteError as err:
        if os.environ.get(DEBUG_ENV):
            raise
        # A fault during the run (a full disk): one line, and the run's own failure exit code.
        print(f"lightmarl: error: {_one_line(err)}", file=sys.stderr)  # noqa: T201
        raise SystemExit(1) from None
    except TrainingFault as err:
        if os.environ.get(DEBUG_ENV):
            raise
        # A run that cannot go on (stop policies, env workers): one line naming the binding or env copy.
        print(f"lightmarl: error: {_one_line(err)}", file=sys.stderr)  # noqa: T201
        raise SystemExit(TRAINING_FAULT_EXIT_CODE) from None
    except RuntimeError as err:
        # Lightning's load_state_dict of a checkpoint from another recipe: say so in one line.
        if os.environ.get(DEBUG_ENV) or "Error(s) in loading state_dict" not in str(err):
            raise
        detail = " ".join(str(err).split())[:400]
        print(  # noqa: T201
            f"lightmarl: error: --ckpt_path: the checkpoint does not fit this recipe's population ({detail})",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    if preemption.stopped_by is not None:
        print(  # noqa: T201
            f"lightmarl: stopped by {preemption.stopped_by} after a final checkpoint; resume with --ckpt_path last",
            file=sys.stderr,
        )
        raise SystemExit(PREEMPTED_EXIT_CODES[preemption.stopped_by])


if __name__ == "__main__":  # pragma: no cover - use the installed `lightmarl` console script
    main()
