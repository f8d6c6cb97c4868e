"""``lightmarl sweep --submit`` with submitit's local executor: one job per run, and a preempted job requeued
that resumes its run from its last.ckpt."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from tiny_sweeps import QUICKSTART, TINY, write_sweep

from lightmarl.cli import main
from lightmarl.experiments.launcher import SweepJob
from lightmarl.experiments.runner import STATE_FILE, last_checkpoint, read_state
from lightmarl.experiments.spec import load_sweep

submitit = pytest.importorskip("submitit")


@pytest.mark.two_processes
def test_a_sweep_submitted_to_the_local_executor_runs_each_run_as_a_job(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sweep = write_sweep(
        tmp_path / "sweep.yaml",
        name="jobs",
        seeds=[0, 1],
        validate=False,
        overrides=TINY,
        configs=[{"name": "mappo", "recipe": QUICKSTART}],
        launcher={"cluster": "local", "parameters": {"timeout_min": 10}},
    )
    main(["sweep", "--config", str(sweep), "--submit"])
    out = tmp_path / "sweeps" / "jobs"
    for seed in (0, 1):
        state = read_state(out / "runs" / "mappo" / f"seed_{seed}")
        assert state is not None and state["status"] == "done", state
        assert state["frames"] == 160.0 and "eval/main/episode_return" in state["metrics"]
    assert sorted(p.name for p in (out / "submitit").glob("*_result.pkl"))  # submitit's own job files
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"done": 2}
    # Submitted again: nothing is left to run.
    main(["sweep", "--config", str(sweep), "--submit"])
    assert "submitted as job" not in capsys.readouterr().err


@pytest.mark.slow  # a submitit job preempted and requeued: minutes on 2 cores
def test_a_preempted_job_is_requeued_and_resumes_its_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = write_sweep(
        tmp_path / "sweep.yaml",
        name="preempt",
        seeds=[0],
        validate=False,
        overrides={**TINY, "model.max_frames": 800},
        configs=[{"name": "mappo", "recipe": QUICKSTART}],
    )
    spec = load_sweep(sweep)
    (run,) = spec.runs()
    run_dir = spec.out_dir / "runs" / run.run_id
    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="local")
    executor.update_parameters(timeout_min=20)
    job = executor.submit(SweepJob(str(sweep), run.run_id, str(tmp_path)))
    deadline = time.monotonic() + 600
    while last_checkpoint(run_dir) is None:
        assert time.monotonic() < deadline and not job.done(), "no checkpoint before the job ended"
        time.sleep(0.5)
    # SLURM preempts by signalling the job's task (USR2 by default); submitit's handler there calls
    # SweepJob.checkpoint and requeues. The task is the parent of the run's `lightmarl fit` (its lock names it).
    fit_pid = json.loads((run_dir / ".lightmarl.lock").read_text())["pid"]
    task_pid = int(Path(f"/proc/{fit_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(task_pid, signal.SIGUSR2)
    deadline = time.monotonic() + 600
    while not (run_dir / STATE_FILE).is_file() or read_state(run_dir)["status"] != "done":
        assert time.monotonic() < deadline, read_state(run_dir)
        time.sleep(1.0)
    state = read_state(run_dir)
    assert state["frames"] == 800.0
    assert len(state["attempts"]) == 2 and state["attempts"][1]["resumed"]
    second_fit = (run_dir / "sweep.log").read_text().split("# lightmarl sweep: fit: ")[2]
    assert "Restoring states from the checkpoint" in second_fit
