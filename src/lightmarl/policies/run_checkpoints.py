"""A run's latest checkpoint, chosen by the run's own counters.

Lightning's ``ModelCheckpoint`` writes ``last-v1.ckpt`` (and leaves ``last.ckpt`` as it was)
when the folder already holds a ``last.ckpt`` this process did not write: a moved or renamed
run resumed with ``--ckpt_path last``, or a second ``fit`` into a finished run's folder. A file
name or a modification time (a copy, an ``rsync``) therefore does not say which state is the
newest; the frames and iterations a checkpoint records do. Everything that resolves "a run's
latest" goes through `latest_checkpoint`: ``--ckpt_path last`` (``fit``, ``validate``,
``test``, ``evaluate``), ``lightmarl export runs/<run>``, ``lightmarl.load_population("runs/<run>")``
and a binding's ``policy_uri: runs/<run>#binding``. It logs which file it read and why.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch

log = logging.getLogger(__name__)

#: the section of a lightmarl checkpoint that holds the run (``lightmarl.training.checkpoint``): its
#: ``population`` entry is the saved population's description, whose ``counters`` these are.
COUNTERS_KEY = "lightmarl"


def checkpoint_counters(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``(frames, iterations)`` a lightmarl checkpoint records, or ``None`` for an unreadable or foreign file.

    The file is memory-mapped and read weights-only: its tensors are not read into memory.
    """
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - a damaged file is named by whoever reads the chosen one
        return None
    return counters_of(saved)


def counters_of(saved: object) -> tuple[int, int] | None:
    """``(frames, iterations)`` of a lightmarl checkpoint already read, or ``None`` for another file."""
    section = saved.get(COUNTERS_KEY) if isinstance(saved, dict) else None
    population = section.get("population") if isinstance(section, dict) else None
    counters = population.get("counters") if isinstance(population, dict) else None
    if not isinstance(counters, dict):
        return None
    try:
        return int(counters["frames"]), int(counters["iterations"])
    except (KeyError, TypeError, ValueError):
        return None


def latest_checkpoint(
    candidates: Iterable[str | os.PathLike[str]], *, field: str, say: Callable[[str], None] | None = None
) -> Path | None:
    """The newest of ``candidates`` by the frames, then iterations, it records; ``None`` if there are none.

    Ties (and files without lightmarl counters, which rank below every file with them) go to a
    ``last*.ckpt`` name, then to the later modification time. The choice is logged with the
    counters of every candidate, so that a stale file next to a newer one is visible.

    Args:
        candidates: checkpoint files (hidden files, e.g. a checkpoint being written, are skipped).
        field: what asked, for the log line (e.g. ``"--ckpt_path last"``).
        say: where the line goes (default: this module's logger at INFO; the CLI prints it).
    """
    files = sorted({Path(p) for p in candidates if not Path(p).name.startswith(".") and Path(p).is_file()})
    if not files:
        return None
    counters = {path: checkpoint_counters(path) for path in files}

    def rank(path: Path) -> tuple[bool, tuple[int, int], bool, float]:
        found = counters[path]
        return (found is not None, found or (0, 0), path.name.startswith("last"), path.stat().st_mtime)

    chosen = max(files, key=rank)
    found = counters[chosen]
    if len(files) > 1:
        others = "; ".join(
            f"{path.name}: {_describe(counters[path])}" for path in sorted(files, key=rank, reverse=True)[1:]
        )
        line = f"{field}: read {chosen} ({_describe(found)}), the newest of the run's checkpoints ({others})"
    else:
        line = f"{field}: read {chosen} ({_describe(found)})"
    (say or log.info)(line)
    return chosen


def _describe(counters: tuple[int, int] | None) -> str:
    if counters is None:
        return "no lightmarl counters"
    return f"frames {counters[0]:,}, iterations {counters[1]:,}"


def run_checkpoint_files(run_dir: str | os.PathLike[str], *, folders: Sequence[str] = ("checkpoints",)) -> list[Path]:
    """Every checkpoint of a run directory: ``*.ckpt`` in its checkpoint ``folders``, else anywhere under it."""
    run_dir = Path(run_dir)
    found = [path for folder in folders if (run_dir / folder).is_dir() for path in (run_dir / folder).glob("*.ckpt")]
    return found or sorted(run_dir.rglob("*.ckpt"))
