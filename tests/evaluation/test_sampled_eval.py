"""Greedy evaluation of continuous policies also reports sampled play: ``eval/<binding>/episode_return_sampled``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lightmarl.cli import main

SPREAD = [
    "--model.env.env_fn=mpe2.simple_spread_v3.parallel_env",
    "--model.env.num_envs=4",
    "--evaluation.validation.episodes=8",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--seed_everything=0",
]
# A stochastic (untrained) tanh-normal policy: sampled and mean actions play differently.
CONTINUOUS = [
    "--model.env.env_kwargs={N: 3, max_cycles: 10, continuous_actions: true}",
    "--model.policy_bindings=[{id: main, class_path: lightmarl.policies.MLPActorCritic, "
    "policy_kwargs: {hidden_sizes: [16], action_std: learned, init_action_std: 1.0}}]",
]


def validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, float]:
    """``lightmarl validate`` without a checkpoint; the logged evaluation metrics."""
    monkeypatch.chdir(tmp_path)
    main(["validate", *SPREAD, *args])
    (metrics,) = list(tmp_path.rglob("metrics.csv"))
    rows = list(csv.DictReader(metrics.open()))
    return {k: float(v) for row in rows for k, v in row.items() if v and k.startswith("eval/")}


def test_continuous_policy_reports_sampled_return_next_to_greedy(tmp_path, monkeypatch):
    logged = validate(tmp_path, monkeypatch, *CONTINUOUS)
    for name in ("episode_return", "episode_return_std", "episode_length", "episodes"):
        assert f"eval/main/{name}_sampled" in logged, sorted(logged)
    assert logged["eval/main/episodes_sampled"] == logged["eval/main/episodes"] == 8
    # Same seeded start states, different actions: the returns differ.
    assert logged["eval/main/episode_return_sampled"] != pytest.approx(logged["eval/main/episode_return"], abs=1e-3)


def test_sampled_evaluation_alone_adds_no_second_pass(tmp_path, monkeypatch):
    logged = validate(tmp_path, monkeypatch, *CONTINUOUS, "--evaluation.validation.deterministic=false")
    assert "eval/main/episode_return" in logged
    assert not [k for k in logged if k.endswith("_sampled")]


def test_discrete_policy_has_no_sampled_metrics(tmp_path, monkeypatch):
    logged = validate(tmp_path, monkeypatch, "--model.env.env_kwargs={N: 3, max_cycles: 10}")
    assert "eval/main/episode_return" in logged
    assert not [k for k in logged if k.endswith("_sampled")]
