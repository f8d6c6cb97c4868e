"""One ``fit`` per run directory: a lock file that keeps a second run out while the first is alive.

Two ``lightmarl fit`` processes writing into one run directory would overwrite each other's
``last.ckpt``, logs and league snapshots. ``fit`` therefore creates ``<run dir>/.lightmarl.lock``
(its pid, host, process start time and command) before the first env step and removes it when
it ends, however it ends. A second ``fit`` into that directory stops with one line naming the
process that holds it. A lock left by a process that is gone (killed with SIGKILL, a machine
that rebooted) is stale: on the same host it is detected (the pid is not running, or runs a
process started at another time) and taken over with a log line. A lock held from another host,
or one you know to be stale, is overridden with ``LIGHTMARL_IGNORE_LOCK=1``.

Only the first process of a run takes the lock (under DDP the other ranks write nothing there).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from lightmarl.errors import ConfigError

log = logging.getLogger(__name__)

LOCK_NAME = ".lightmarl.lock"
#: set to 1 to take over a run directory whose lock another (or a stale) process holds.
IGNORE_LOCK_ENV = "LIGHTMARL_IGNORE_LOCK"
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux ``/proc``), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22 of stat; the command name may hold spaces


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _first_process() -> bool:
    return all(int(os.environ.get(name, "0") or 0) == 0 for name in _RANK_VARIABLES)


class RunLock:
    """The lock of one run directory.

    Args:
        run_dir: the run directory (``trainer.default_root_dir``).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.held = False

    def _mine(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "start_time": _start_time(os.getpid()),
            "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "command": " ".join(["lightmarl", *sys.argv[1:]])[:300],
        }

    def _holder(self) -> dict[str, Any] | None:
        try:
            holder = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # unreadable or half written: nobody we can name
        return holder if isinstance(holder, dict) else {}

    def _stale(self, holder: dict[str, Any]) -> bool:
        pid = holder.get("pid")
        if not isinstance(pid, int) or holder.get("host") != socket.gethostname():
            return not isinstance(pid, int)  # another host's process cannot be checked from here
        if pid == os.getpid():
            return True  # an earlier run of this process that did not release it
        if not _alive(pid):
            return True
        started = _start_time(pid)
        return started is not None and holder.get("start_time") not in (None, started)

    def acquire(self) -> None:
        """Take the lock, or raise a [`ConfigError`][lightmarl.errors.ConfigError] naming the process that holds it.

        Raises:
            ConfigError: a live process (or one on another host) holds the lock, and
                ``LIGHTMARL_IGNORE_LOCK`` is not set.
        """
        if not _first_process():
            return
        mine = json.dumps(self._mine())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a holder that goes away between our looks: try again
            try:
                handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is None:
                    continue
                if os.environ.get(IGNORE_LOCK_ENV) == "1":
                    log.warning("lightmarl: %s: taking over the lock of %s (%s=1)", self.path, holder, IGNORE_LOCK_ENV)
                elif self._stale(holder):
                    log.warning("lightmarl: %s: removing a stale lock (pid %s is gone)", self.path, holder.get("pid"))
                else:
                    raise ConfigError(
                        f"trainer.default_root_dir: the run directory {str(self.path.parent)!r} is in use by "
                        f"`{holder.get('command', 'lightmarl fit')}` (pid {holder.get('pid')} on "
                        f"{holder.get('host')}, since {holder.get('since')}); wait for it to end, give this run "
                        f"another --run_name, or, if that process is gone, set {IGNORE_LOCK_ENV}=1 "
                        f"(the lock is {str(self.path)!r})"
                    ) from None
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(handle, "w") as file:
                file.write(mine)
            self.held = True
            return
        raise ConfigError(f"trainer.default_root_dir: could not take the run lock {str(self.path)!r}")

    def release(self) -> None:
        """Remove the lock if this process holds it."""
        if not self.held:
            return
        self.held = False
        holder = self._holder()
        if holder and holder.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)
