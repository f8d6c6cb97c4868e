"""benchmarks/average_network_offline.py: a league checkpoint's mixture distilled offline and measured beside it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("pyspiel")

from benchmark_scripts import load_benchmark
from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]
offline = load_benchmark("average_network_offline.py")


def test_a_kuhn_league_checkpoint_is_distilled_and_measured_beside_its_mixture(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "fit"
    main(
        [
            "fit", "--config", str(ROOT / "recipes" / "league_kuhn_poker.yaml"), "--model.env.num_envs=32",
            "--model.rollout_steps=16", "--model.max_frames=4096", "--trainer.callbacks=[]",
            "--model.league.roles=[{class_path: lightmarl.league.MetaStrategyPlayer, binding: main, settings: "
            "{one_phase_step: 512, meta_solver: {class_path: lightmarl.league.NashMetaSolver}}}]",
            "--trainer.enable_progress_bar=false", "--evaluation.validation.episodes=2",
            f"--trainer.default_root_dir={run_dir}",
        ]
    )  # fmt: skip
    checkpoint = offline.fit_league("unused.yaml", 4096, 0, run_dir)  # reused: nothing is trained again
    found = offline.distil(checkpoint, "main", explore=0.5, epochs=1, frames=2048, seed=0)
    assert found["members"] >= 1 and 0 < found["rows"] <= 2048 * 2
    assert 0 <= found["mixture"] < 1.5 and 0 <= found["student"] < 1.5
    assert math.isclose(found["gap"], found["student"] - found["mixture"])
