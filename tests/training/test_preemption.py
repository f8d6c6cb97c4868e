"""SIGTERM and Ctrl-C stop a real `lightmarl fit` at an iteration boundary with a checkpoint, a
non-zero exit, no env worker left behind, and a run that resumes from `--ckpt_path last`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from cli_runner import run_in_process
from lightmarl.training.preemption import PREEMPTED_EXIT_CODES

pytestmark = pytest.mark.two_processes  # xdist workers run one such test at a time (tests/worker_lock.py)

ROOT = Path(__file__).resolve().parents[2]
RUN = [
    "--config",
    str(ROOT / "recipes/quickstart.yaml"),
    "--model.env.num_envs=4",
    "--model.env.num_workers=2",
    "--model.rollout_steps=10",
    "--model.iterations_per_epoch=100000",  # the stop, not an epoch end, must write the checkpoint
    "--trainer.enable_progress_bar=false",
    "--model.algorithm.init_args.minibatch_size=40",  # one rollout: 4 copies x 10 steps
]


def lightmarl() -> str:
    return str(Path(sys.executable).with_name("lightmarl"))


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment carries ``marker`` (the run and every process it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_for_iterations(run_dir: Path, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:  # the run creates and fills its folders meanwhile: a folder listed may be gone when read
            metrics = list(run_dir.rglob("metrics.csv"))
            if metrics and len(metrics[0].read_text().splitlines()) > count:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the run logged fewer than {count} iterations in {timeout} s")


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find leftover processes")
@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGINT, True)],
    ids=["SIGTERM-to-the-run", "SIGTERM-to-its-group", "Ctrl-C"],
)
def test_a_signal_stops_fit_with_a_checkpoint_and_the_run_resumes(signum, to_group, tmp_path):
    """A scheduler may signal the run alone or its whole process group (workers included), as Ctrl-C does."""
    marker = f"LIGHTMARL_TEST_RUN={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    run = subprocess.Popen(
        [lightmarl(), "fit", *RUN, "--model.max_frames=10000000"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, so killpg reaches the run and its workers only
    )
    try:
        wait_for_iterations(tmp_path / "runs", 2)
        if to_group:
            os.killpg(run.pid, signum)
        else:
            run.send_signal(signum)
        _, err = run.communicate(timeout=120)
    finally:
        run.kill()
    name = signal.Signals(signum).name
    assert run.returncode == PREEMPTED_EXIT_CODES[name], err[-2000:]
    assert f"lightmarl: stopped by {name} after a final checkpoint" in err
    assert "Traceback" not in err, err[-2000:]
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(marker), "env workers outlived the run"

    last = tmp_path / "runs/quickstart/checkpoints/last.ckpt"
    stopped = torch.load(last, map_location="cpu", weights_only=True)["lightmarl"]["population"]["counters"]
    assert stopped["iterations"] >= 2 and stopped["frames"] == stopped["iterations"] * 40
    # Resume for two more iterations: the counters go on from the checkpoint (the signal was the
    # stopped process's business; the resume runs in this one).
    more = f"--model.max_frames={stopped['frames'] + 80}"
    resumed = run_in_process("fit", *RUN, more, "--ckpt_path", "last", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        torch.load(last, map_location="cpu", weights_only=True)["lightmarl"]["population"]["counters"]["iterations"]
        == stopped["iterations"] + 2
    )


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find leftover processes")
def test_a_second_sigterm_stops_at_once_with_one_lightmarl_line(tmp_path):
    """The second signal stops without a final checkpoint: one `lightmarl: error:` line and the signal's
    exit code, not Lightning's "Detected KeyboardInterrupt" and exit 1."""
    marker = f"LIGHTMARL_TEST_RUN={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    slow = ["--model.rollout_steps=400", "--model.algorithm.init_args.minibatch_size=1600"]  # iterations of seconds
    run = subprocess.Popen(
        [lightmarl(), "fit", *RUN, *slow, "--model.max_frames=10000000"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_iterations(tmp_path / "runs", 1)
        run.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=120)
    finally:
        run.kill()
    errors = [line for line in err.splitlines() if line.startswith("lightmarl: error:")]
    assert errors == [
        "lightmarl: error: stopped at once by a second SIGTERM, without a final checkpoint; "
        "resume from the last one with --ckpt_path last"
    ], err[-2000:]
    assert run.returncode == PREEMPTED_EXIT_CODES["SIGTERM"], err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(marker), "env workers outlived the run"
