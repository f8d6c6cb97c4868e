"""`lightmarl evaluate` end to end on a tiny battle env: fit, then the recipe's head-to-head through the real CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from lightmarl.cli import main
from lightmarl.evaluation.report import load_report, validate_report

# Rock-paper-scissors, one round per episode: a trainable binding, a scripted "always rock" and
# a seeded uniform random player from the evaluation section.
RECIPE = {
    "seed_everything": 0,
    "model": {
        "env": {
            "env_fn": "lightmarl.envs.pettingzoo.one_hot.one_hot_parallel_env",
            "env_kwargs": {"env_fn": "pettingzoo.classic.rps_v2.parallel_env", "max_cycles": 1},
            "num_envs": 8,
        },
        "policy_bindings": [
            {"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [8]}},
            {"id": "rock", "class_path": "lightmarl.policies.NoOpPolicy", "trainable": False},
        ],
        "agent_binding_map": ["main", "rock"],
        "algorithm": {"class_path": "lightmarl.algorithms.PPO", "init_args": {"minibatch_size": 16, "epochs": 1}},
        "rollout_steps": 4,
        "max_frames": 64,
        "iterations_per_epoch": 2,
    },
    "trainer": {"enable_progress_bar": False, "enable_model_summary": False},
    "evaluation": {
        "bindings": [
            {"id": "random", "class_path": "lightmarl.policies.UniformRandomPolicy", "policy_kwargs": {"seed": 0}}
        ],
        "head_to_head": [{"name": "round_robin", "players": ["main", "rock", "random"], "episodes": 12}],
        "every_n_frames": 32,
    },
}


@pytest.fixture
def recipe(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "rps_eval.yaml"
    path.write_text(yaml.safe_dump(RECIPE))
    return path


def test_head_to_head_through_the_cli_gives_an_antisymmetric_payoff_matrix(recipe, tmp_path, capsys):
    main(["fit", "--config", str(recipe)])
    # Periodic evaluation during fit logged the scenario's metrics beside training's.
    (fit_csv,) = (tmp_path / "runs/rps_eval/csv").glob("version_0/metrics.csv")
    rows = list(csv.DictReader(fit_csv.open()))
    assert sum(bool(row.get("eval/round_robin/main/win_rate")) for row in rows) == 2  # at 32 and 64 frames
    capsys.readouterr()

    main(["evaluate", "--config", str(recipe)])
    printed = capsys.readouterr().out
    out = tmp_path / "runs/rps_eval/evaluation"
    report = load_report(out / "report.json")
    validate_report(report)
    assert report["metadata"]["checkpoint"].endswith("last.ckpt") and report["step_count"] == 64
    h2h = report["scenarios"]["round_robin"]["head_to_head"]
    assert h2h["players"] == ["main", "rock", "random"]
    games, score = np.array(h2h["games"]), np.array(h2h["score"], dtype=float)
    # Every pair played 12 games from each seat; every game counts once from each side.
    assert (games == 24 * (1 - np.eye(3))).all()
    played = games > 0
    assert np.allclose((score + score.T)[played], 1.0)
    seats = report["scenarios"]["round_robin"]["bindings"]["rock"]["outcomes"]["by_seat"]
    assert set(seats) == {"player_0", "player_1"} and all(s["n"] == 24 for s in seats.values())
    assert {p.name for p in out.iterdir()} >= {"report.json", "summary.md", "returns.png", "payoff_round_robin.png"}
    assert "Head-to-head `round_robin`" in printed and "lightmarl: wrote" in printed
    assert json.loads((out / "report.json").read_text())["schema_version"] == 2
    # The metrics also went to the run's loggers.
    logged = {
        row_key
        for path in (tmp_path / "runs/rps_eval/csv").glob("version_*/metrics.csv")
        for row_key in next(csv.reader(path.open()))
    }
    assert "eval/round_robin/rock/elo" in logged


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("--evaluation.head_to_head=[{name: x, players: [main, ghost]}]", "unknown binding 'ghost'"),
        (
            "--evaluation.head_to_head=[{name: x, players: [main, rock], episodes: 0}]",
            "expected a positive number of episodes",
        ),
    ],
)
def test_bad_scenarios_fail_in_one_line_before_a_checkpoint_is_read(recipe, override, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--config", str(recipe), override])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("lightmarl: error: evaluation.head_to_head[0]") and message in err[-1]


def test_evaluate_without_a_checkpoint_says_what_to_do(recipe, capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--config", str(recipe)])
    assert "--ckpt_path last: no last checkpoint in" in capsys.readouterr().err
