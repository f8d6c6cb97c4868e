"""Where a run writes: run directories checked before the first env step, checkpoint files written atomically.

**Directories.** `check_run_directories` creates and test-writes every directory a run
will write to (``trainer.default_root_dir``, each logger's ``save_dir``, each
``ModelCheckpoint.dirpath``) and fails with one line naming the field and the path, before any
env is built: a read-only or mistyped path is found in seconds, not at the first epoch end.

**Checkpoints.** Lightning 2.6's ``TorchCheckpointIO`` writes through an fsspec transaction:
the bytes go to a temporary file in the system's temp directory and are then moved into place,
which is a copy where that directory is on another filesystem (a kill in the middle leaves a
cut ``last.ckpt``) and is never synced to disk. `AtomicCheckpointIO` writes a hidden
``.<name>.<pid>.partial`` file next to the target, flushes and ``fsync``\\ s it, and renames it over
the target (``os.replace``, atomic on POSIX filesystems), then syncs the directory: whenever the
process dies, the target is the previous checkpoint or the new one, whole. A write that fails
(a full disk, a directory made read-only) removes its partial file and raises
[`CheckpointWriteError`][lightmarl.errors.CheckpointWriteError]; the previous checkpoint is left as it was.
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import threading
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from lightmarl.errors import CheckpointWriteError, ConfigError


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local writes are atomic and synced; remote
    paths (``s3://...``) keep Lightning's own write."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        target = os.fspath(path)
        if "://" in target:
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        directory, name = os.path.split(os.path.abspath(target))
        partial = os.path.join(directory, f".{name}.{os.getpid()}.partial")
        try:
            os.makedirs(directory, exist_ok=True)
            for stale in glob.glob(os.path.join(glob.escape(directory), f".{glob.escape(name)}.*.partial")):
                with contextlib.suppress(OSError):  # left by a process killed while writing
                    os.remove(stale)
            # Serialized first: a write error then surfaces as the OSError it is, not as torch's zip-writer error.
            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            with open(partial, "wb") as file:
                file.write(buffer.getbuffer())
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, target)
            _sync_directory(directory)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.remove(partial)
            kept = "the previous checkpoint there is unchanged" if os.path.exists(target) else "no checkpoint was there"
            raise CheckpointWriteError(
                f"checkpoint: writing {target!r} failed ({err.strerror or err}); {kept}"
            ) from err


def _sync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def use_atomic_checkpoints(trainer: Trainer) -> None:
    """Give the trainer's strategy an `AtomicCheckpointIO` where it has Lightning's default one
    (a ``CheckpointIO`` the recipe chose itself is kept)."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()


def prepare_run_storage(trainer: Trainer | None) -> None:
    """Before any env exists: an unwritable run directory fails now (`check_run_directories`), and
    checkpoints are written atomically (`use_atomic_checkpoints`); without a trainer nothing is written."""
    if trainer is None:
        return
    check_run_directories(trainer)
    use_atomic_checkpoints(trainer)


def run_directories(trainer: Trainer) -> list[tuple[str, str]]:
    """``(field, path)`` of every local directory the run writes to: root, loggers, checkpoints."""
    found = [("trainer.default_root_dir", str(trainer.default_root_dir))]
    for logger in trainer.loggers:
        save_dir = getattr(logger, "save_dir", None)
        if save_dir is not None:
            found.append((f"trainer.logger ({type(logger).__name__}).save_dir", str(save_dir)))
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, ModelCheckpoint) and callback.dirpath is not None:
            found.append(("ModelCheckpoint.dirpath", str(callback.dirpath)))
    return [(field, path) for field, path in found if "://" not in path]


def check_run_directories(trainer: Trainer) -> None:
    """Create and test-write every directory of `run_directories` (on the process that writes).

    Raises:
        ConfigError: naming the field and the path, with the reason the system gave.
    """
    if not trainer.is_global_zero:
        return
    for field, path in run_directories(trainer):
        try:
            _probe(path)
        except OSError as err:
            raise ConfigError(
                f"{field}: cannot write to {path!r} ({err.strerror or err}); "
                "choose a directory this process can create and write to"
            ) from None


def _probe(path: str) -> None:
    """Create ``path``, write and remove a file in it, and remove ``path`` again if it created it.

    Only the run's own directory is removed (a run that then fails on a bad recipe leaves no
    empty run directory behind), never a parent it created: runs started side by side (e.g.
    ``examples/two_trainers.py``) share parents, and removing one under another run's ``mkdir``
    made that run fail.
    """
    created = not os.path.exists(path)
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".lightmarl-write-test-{os.getpid()}-{threading.get_ident()}")
        with open(probe, "wb") as file:
            file.write(b"ok")
        os.remove(probe)
    finally:
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(path)
