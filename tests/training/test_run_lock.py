"""One `fit` per run directory: a live holder keeps a second run out, a stale lock is taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from lightmarl.errors import ConfigError
from lightmarl.training.run_lock import IGNORE_LOCK_ENV, LOCK_NAME, RunLock, _start_time


def _hold(run_dir, pid: int, start_time: str | None = None, host: str | None = None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    holder = {
        "pid": pid,
        "host": host or socket.gethostname(),
        "start_time": start_time if start_time is not None else _start_time(pid),
        "since": "then",
        "command": "lightmarl fit --config other.yaml",
    }
    (run_dir / LOCK_NAME).write_text(json.dumps(holder))


@pytest.fixture
def live_pid():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


def test_a_lock_is_taken_and_released(tmp_path):
    lock = RunLock(tmp_path)
    lock.acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_live_holder_keeps_a_second_run_out(tmp_path, live_pid):
    _hold(tmp_path, live_pid)
    with pytest.raises(
        ConfigError, match=rf"in use by `lightmarl fit --config other.yaml` \(pid {live_pid} on .*{IGNORE_LOCK_ENV}=1"
    ):
        RunLock(tmp_path).acquire()
    _hold(tmp_path, live_pid, host="another-host")  # cannot be checked from here: refused too
    with pytest.raises(ConfigError, match="in use"):
        RunLock(tmp_path).acquire()


def test_the_override_takes_over_a_live_lock(tmp_path, live_pid, monkeypatch):
    _hold(tmp_path, live_pid)
    monkeypatch.setenv(IGNORE_LOCK_ENV, "1")
    RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_a_stale_lock_of_a_dead_or_reused_pid_is_taken_over(tmp_path, live_pid):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _hold(tmp_path, int(finished.stdout))  # that process is gone
    RunLock(tmp_path).acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    if _start_time(live_pid) is not None:  # Linux: a live pid that started at another time is a reused pid
        _hold(tmp_path, live_pid, start_time="1")
        RunLock(tmp_path).acquire()
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_other_ranks_take_no_lock(tmp_path, live_pid, monkeypatch):
    _hold(tmp_path, live_pid)
    monkeypatch.setenv("LOCAL_RANK", "1")
    lock = RunLock(tmp_path)
    lock.acquire()  # a DDP child process of the run that holds it: neither refused nor taking over
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == live_pid
    lock.release()  # and its release leaves rank 0's lock in place
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == live_pid
