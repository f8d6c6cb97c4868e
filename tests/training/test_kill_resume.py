"""SIGKILL a real `lightmarl fit` at random moments, several times in a row, resuming each time from `last`.

A checkpoint is written at every iteration (one iteration per epoch) while the harness watches
``last.ckpt``: after each kill it must load (weights-only) and hold at least the newest
iteration the harness saw checkpointed, so a resume loses at most the one interval in progress;
no partial file may pass for a checkpoint; and a final resume finishes the budget. The kills land
anywhere: in a rollout, an update, or in the middle of writing a checkpoint.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cli_runner import run_in_process

ROOT = Path(__file__).resolve().parents[2]
ITERATIONS = 40
RUN = [
    "fit",
    "--config", str(ROOT / "recipes/quickstart.yaml"),
    "--model.env.num_envs=2",
    "--model.rollout_steps=5",
    f"--model.max_frames={2 * 5 * ITERATIONS}",
    "--model.iterations_per_epoch=1",  # a checkpoint per iteration
    "--model.algorithm.init_args.minibatch_size=10",
    "--trainer.limit_val_batches=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.logger=false",
    "--ckpt_path=last",
]  # fmt: skip


def _lightmarl() -> str:
    return str(Path(sys.executable).with_name("lightmarl"))


def _iterations(path: Path) -> int:
    return int(
        torch.load(path, map_location="cpu", weights_only=True)["lightmarl"]["population"]["counters"]["iterations"]
    )


def _run_and_kill(cwd: Path, rng: random.Random) -> tuple[int, int]:
    """Start (or resume) the run, SIGKILL it at a random moment after it wrote a checkpoint;
    ``(newest iteration seen checkpointed, iteration in last.ckpt after the kill)``."""
    last = cwd / "runs/quickstart/checkpoints/last.ckpt"
    seen, version = -1, None
    run = subprocess.Popen([_lightmarl(), *RUN], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_at = None
    try:
        deadline = time.monotonic() + 180
        while run.poll() is None and time.monotonic() < deadline:
            try:
                stat = last.stat()
                if (stat.st_ino, stat.st_mtime_ns) != version:
                    version = (stat.st_ino, stat.st_mtime_ns)
                    seen = max(seen, _iterations(last))  # every version the run leaves is whole
                    if kill_at is None and seen > 0:
                        kill_at = time.monotonic() + rng.uniform(0.0, 1.5)
            except FileNotFoundError:
                pass
            if kill_at is not None and time.monotonic() >= kill_at:
                break
            time.sleep(0.005)
        assert run.poll() is None, "the run ended before it was killed: raise ITERATIONS"
        run.send_signal(signal.SIGKILL)
        run.wait(30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    return seen, _iterations(last)


def _kill_and_resume(cwd: Path, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    previous = 0
    for _ in range(kills):
        seen, kept = _run_and_kill(cwd, rng)
        assert kept >= seen >= previous, (previous, seen, kept)  # nothing checkpointed was lost
        previous = kept
    # The kills need a process of their own; the final resume runs in this one.
    final = run_in_process(*RUN, cwd=cwd)
    assert final.returncode == 0, final.stderr[-4000:]
    checkpoints = cwd / "runs/quickstart/checkpoints"
    assert _iterations(checkpoints / "last.ckpt") == ITERATIONS
    assert not list(checkpoints.glob(".*.partial")), "a partial file was left behind after a successful write"
    assert "resumed 2 env copies mid-episode" in final.stderr


def test_a_killed_run_resumes_from_a_whole_last_checkpoint(tmp_path: Path) -> None:
    _kill_and_resume(tmp_path, kills=1, seed=os.getpid())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_at_random_moments_several_times_in_a_row(tmp_path: Path) -> None:
    _kill_and_resume(tmp_path, kills=4, seed=12345)
