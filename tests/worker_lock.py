"""One ``two_processes`` test at a time across the pytest-xdist workers of a session.

A test marked ``two_processes`` keeps two CPU-bound processes busy at once: DDP ranks, a sweep's
parallel runs, two trainers side by side. `make test` runs the suite on one xdist worker per core
(scripts/test.sh); two such tests on the two workers of a 2-core machine would make four busy
processes on two cores, each slower than its timeouts allow for. In each worker, `install`
registers `TwoProcessesTests`, which runs a marked test while the worker holds a `WorkerLock`,
an exclusive ``flock`` on a file all workers of the session share: a second worker waits while
the first one's test has both cores, and the kernel releases the lock of a worker that dies.

xdist's own grouping (``xdist_group`` with ``--dist loadgroup``) would keep such tests on one
worker by scheduling, but under pytest 9.2 it silently stops grouping
(https://github.com/pytest-dev/pytest-xdist/issues/1386); a lock does not depend on how the
tests are distributed.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

MARKER = "two_processes"


class WorkerLock:
    """An exclusive lock on ``path`` shared by processes.

    Args:
        path: the lock file (created if missing); every process that should exclude the others
            opens the same path.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self._file is not None

    def acquire(self) -> None:
        """Block until no other process holds the lock, then hold it (nothing to do if this one does)."""
        if self._file is None:
            file = self.path.open("a")
            fcntl.flock(file, fcntl.LOCK_EX)
            self._file = file

    def release(self) -> None:
        if self._file is not None:
            # Unlocked before the close: a forked child may still hold a copy of the descriptor.
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class TwoProcessesTests:
    """The plugin: a test marked ``two_processes`` runs while this worker holds ``lock``.

    The lock is taken outside pytest-timeout's timer (this wrapper is the outer one): waiting for
    another worker's test is not the test's time. A module marked as a whole keeps the lock while
    its tests follow one another, since its module fixtures (a DDP run its tests share) live from
    the first test's setup to the last one's teardown.
    """

    def __init__(self, lock: WorkerLock) -> None:
        self.lock = lock

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        if item.get_closest_marker(MARKER) is None:
            return (yield)
        self.lock.acquire()
        try:
            return (yield)
        finally:
            module = item.getparent(pytest.Module)
            whole_module = module is not None and module.get_closest_marker(MARKER) is not None
            if not (whole_module and nextitem is not None and nextitem.getparent(pytest.Module) is module):
                self.lock.release()


def install(config: pytest.Config) -> None:
    """Register `TwoProcessesTests` in an xdist worker; a single process runs one test at a time anyway."""
    if hasattr(config, "workerinput"):
        # A worker's base temp directory is `popen-gwN` in the session's, which all its workers share.
        lock = WorkerLock(Path(config.option.basetemp).parent / f"{MARKER}.lock")
        config.pluginmanager.register(TwoProcessesTests(lock), "two_processes_lock")
