"""Starting, watching and stopping env worker processes, from the parent's side.

Helpers of [`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv]: a handle per worker, the shutdown
that ``weakref.finalize`` runs, and the two context managers that keep starting workers cheap
(single-threaded BLAS in children; no re-import of the parent's ``__main__``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from lightmarl.envs.runners.shared_memory import SharedArrays

log = logging.getLogger(__name__)


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (chained as the cause)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


@dataclass
class WorkerHandle:
    index: int
    process: Any  # multiprocessing.context.SpawnProcess / ForkServerProcess
    conn: Connection
    chunks: tuple[tuple[int, tuple[int, ...]], ...]  # per phase: (first copy, seeds of its copies)

    def holds(self, index: int) -> bool:
        return any(start <= index < start + len(seeds) for start, seeds in self.chunks)

    def describe(self) -> str:
        ranges = [f"{s}" if len(seeds) == 1 else f"{s}..{s + len(seeds) - 1}" for s, seeds in self.chunks]
        copies = ("copy " if ranges == [str(self.chunks[0][0])] else "copies ") + ", ".join(ranges)
        seeds = [seed for _, chunk in self.chunks for seed in chunk]
        return f"env worker {self.index} (pid {self.process.pid}, {copies}, seeds {seeds})"


def shutdown(workers: list[WorkerHandle], shared: SharedArrays, timeout: float = 5.0) -> None:
    """Ask every worker to close, join them (terminate / kill stragglers), free the shared block.

    A module-level function holding no reference to the `ProcessVecEnv`, so it can run
    from ``weakref.finalize`` when the vector is garbage-collected or the interpreter exits.
    """
    for w in workers:
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(("close", None))
    deadline = time.monotonic() + timeout
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.process.is_alive():
            log.warning("%s did not exit within %.0f s of close(); terminating it", w.describe(), timeout)
            w.process.terminate()
            w.process.join(1.0)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(1.0)
        w.conn.close()
    shared.release(unlink=True)


@contextlib.contextmanager
def single_threaded_children() -> Iterator[None]:
    """Children started inside inherit 1-thread BLAS / OpenMP settings (unless the user set them)."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    added = [n for n in names if n not in os.environ]
    for n in added:
        os.environ[n] = "1"
    try:
        yield
    finally:
        for n in added:
            os.environ.pop(n, None)


@contextlib.contextmanager
def skip_main_reimport(env_fn: str) -> Iterator[None]:
    """Children started inside do not re-import the parent's ``__main__``.

    ``spawn`` / ``forkserver`` children normally re-run the parent's main script or module
    (``lightmarl``'s CLI, a benchmark, pytest) so that objects defined there unpickle; the
    workers need nothing from it (the env comes by import path), and re-running it would
    import torch, Lightning and the rest in every worker: about 5 s and a few hundred MB
    each. An ``env_fn`` under ``__main__.`` keeps the re-import. Multiprocessing reads
    ``__main__.__spec__`` / ``__file__`` only while ``Process.start()`` runs.
    """
    main = sys.modules.get("__main__")
    if main is None or env_fn.startswith("__main__."):
        yield
        return
    missing = object()
    saved = {attr: main.__dict__.get(attr, missing) for attr in ("__spec__", "__file__")}
    main.__dict__["__spec__"] = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        for attr, value in saved.items():
            if value is missing:
                main.__dict__.pop(attr, None)
            else:
                main.__dict__[attr] = value


def split_evenly(count: int, parts: int) -> list[int]:
    """``parts`` sizes summing to ``count``, the first ``count % parts`` one larger."""
    return [count // parts + (k < count % parts) for k in range(parts)]
