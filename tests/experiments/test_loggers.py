"""W&B (offline) and MLflow (a file store) through Lightning's own loggers, from the fragments of configs/logger/."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lightmarl.cli import main
from lightmarl.experiments.runner import lightmarl_command

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--model.env.num_envs=4",
    "--model.rollout_steps=10",
    "--model.max_frames=160",  # 4 iterations: the 25-step episodes end once
    "--model.iterations_per_epoch=2",
    "--evaluation.validation.episodes=2",
    "--model.algorithm.init_args.minibatch_size=40",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]
#: per-binding metric names as lightmarl logs them: <section>/<binding>/<name> (docs/reference/metrics.md).
NAMES = ["train/main/loss_objective", "collect/main/episode_return", "eval/main/episode_return", "counters/frames"]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fit(fragment: str) -> None:
    main(["fit", "--config", str(ROOT / "recipes/quickstart.yaml"), "--config", str(ROOT / fragment), *TINY])


def test_wandb_offline_logs_every_metric_under_its_binding(in_tmp, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    # A process of its own: W&B completes its offline run file when the process that logged ends.
    command = [*lightmarl_command(), "fit", "--config", str(ROOT / "recipes/quickstart.yaml")]
    command += ["--config", str(ROOT / "configs/logger/wandb.yaml"), *TINY]
    done = subprocess.run(command, cwd=in_tmp, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_file,) = (in_tmp / "runs/quickstart/wandb").glob("offline-run-*/run-*.wandb")
    # The offline run file holds each history row as protobuf records whose keys are the metric names as
    # given: W&B groups charts by their first path part (train, collect, eval), the binding's name next.
    data = run_file.read_bytes()
    for name in NAMES:
        assert name.encode() in data, name
    assert (in_tmp / "runs/quickstart/csv/version_0/metrics.csv").is_file()  # the CSV log beside it


def test_mlflow_file_store_keeps_metrics_grouped_by_binding(in_tmp, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    fit("configs/logger/mlflow.yaml")
    (run_dir,) = [p for p in (in_tmp / "mlruns").glob("*/*") if (p / "metrics").is_dir()]
    for name in NAMES:
        lines = (run_dir / "metrics" / name).read_text().split("\n")  # "<timestamp> <value> <step>" per log call
        assert len(lines[0].split()) == 3, name
    frames = [float(line.split()[1]) for line in (run_dir / "metrics/counters/frames").read_text().split("\n") if line]
    assert frames == [40.0, 80.0, 120.0, 160.0]  # one row per iteration
    assert (run_dir / "tags" / "mlflow.runName").read_text() == "quickstart"
