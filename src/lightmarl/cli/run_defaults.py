"""What a recipe leaves unset: the Trainer defaults every run shares and the run directory ``runs/<run_name>``.

A recipe carries only what differs from these: the Trainer settings of `TRAINER_DEFAULTS`, and a
run directory ``runs/<run_name>`` (`apply_run_defaults`) holding a CSV and a TensorBoard logger and a
``checkpoints/`` folder with ``last.ckpt``. The run name is ``run_name`` where the recipe (or
``--run_name``) sets it, else the recipe file's path under ``recipes/`` without ``.yaml`` (`run_name_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint

from lightmarl.errors import ConfigError

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


def seed_of(seed_everything: Any) -> int | None:
    """The module's ``seed`` from ``seed_everything``: the integer, or ``None`` (``false``; ``true`` before it is drawn)."""
    return seed_everything if isinstance(seed_everything, int) and not isinstance(seed_everything, bool) else None


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
