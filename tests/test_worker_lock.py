"""Tests marked ``two_processes`` never overlap across pytest-xdist workers (tests/worker_lock.py)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from worker_lock import WorkerLock

TESTS = Path(__file__).resolve().parent
HOLDER = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from worker_lock import WorkerLock
lock = WorkerLock(Path(sys.argv[2]))
lock.acquire()
print("held", flush=True)
sys.stdin.readline()
lock.release()
"""


def _holder(lock: Path) -> subprocess.Popen[str]:
    """Another process holding the lock until a line arrives on its stdin."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(TESTS), str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _stop(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.communicate()


def _acquire_in_thread(lock: WorkerLock) -> threading.Event:
    acquired = threading.Event()

    def acquire() -> None:
        lock.acquire()
        acquired.set()

    threading.Thread(target=acquire, daemon=True).start()
    return acquired


@pytest.mark.parametrize("how", ["released", "killed"])
def test_a_second_process_waits_until_the_holder_releases_or_dies(tmp_path, how):
    holder = _holder(tmp_path / "lock")
    lock = WorkerLock(tmp_path / "lock")
    acquired = _acquire_in_thread(lock)
    try:
        assert not acquired.wait(0.5) and not lock.held
        if how == "released":
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.flush()
        else:
            os.kill(holder.pid, signal.SIGKILL)
        assert acquired.wait(10) and lock.held
    finally:
        _stop(holder)
    lock.release()
    assert not lock.held
    _stop(_holder(tmp_path / "lock"))  # released: another process takes it at once


SUITE = {
    "conftest.py": f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        import worker_lock

        def pytest_configure(config):
            worker_lock.install(config)
        """,
    "record.py": """
        import json, os, time

        def record(directory, name, seconds):
            start = time.monotonic()
            time.sleep(seconds)
            entry = {"name": name, "worker": os.environ["PYTEST_XDIST_WORKER"], "start": start, "end": time.monotonic()}
            (directory / f"{name}.json").write_text(json.dumps(entry))
        """,
    # A module marked as a whole: its module fixture (a DDP run its tests share) is inside the lock.
    "test_whole_module.py": """
        import pytest
        from record import record

        pytestmark = pytest.mark.two_processes

        @pytest.fixture(scope="module")
        def shared_run(out):
            record(out, "whole_module_fixture", 1.0)

        @pytest.mark.parametrize("i", range(2))
        def test_shares_the_run(shared_run, out, i):
            record(out, f"whole_module_{i}", 0.3)
        """,
    # Marked tests with a timeout shorter than the wait for another worker's lock: the wait is not theirs.
    "test_marked_tests.py": """
        import pytest
        from record import record

        @pytest.mark.two_processes
        @pytest.mark.timeout(1)
        @pytest.mark.parametrize("i", range(4))
        def test_marked(out, i):
            record(out, f"marked_{i}", 0.3)

        @pytest.mark.parametrize("i", range(4))
        def test_unmarked(i):
            pass
        """,
}


def test_marked_tests_and_marked_modules_never_overlap_on_two_workers(tmp_path):
    for name, text in SUITE.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "conftest.py").write_text(
        (tmp_path / "conftest.py").read_text()
        + f"\nimport pathlib, pytest\n\n@pytest.fixture(scope='session')\ndef out():\n    return pathlib.Path({str(out)!r})\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    two_processes: a test of the lock\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "2",
            "--dist",
            "worksteal",
            "-p",
            "no:importnb",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "10 passed" in run.stdout
    entries = sorted((json.loads(p.read_text()) for p in out.glob("*.json")), key=lambda e: e["start"])
    assert len(entries) == 7
    assert len({e["worker"] for e in entries}) == 2, entries  # both workers ran marked tests: the lock had work
    for before, after in itertools.pairwise(entries):
        assert before["end"] <= after["start"], (before, after)
    # The module's fixture and its tests hold the lock as one: nothing of another worker comes between.
    module = [i for i, e in enumerate(entries) if e["name"].startswith("whole_module")]
    assert module == list(range(module[0], module[0] + 3)), entries
