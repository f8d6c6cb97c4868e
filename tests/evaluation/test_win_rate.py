from __future__ import annotations

import pytest

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation import evaluate_episodes
from lightmarl.evaluation.episodes import _outcomes
from lightmarl.policies import MultiAgentPolicy, NoOpPolicy, SpreadToLandmarkPolicy
from lightmarl.population import BindingTable, PolicyBinding


def test_outcome_rules():
    assert _outcomes({"a": 1.0, "b": -1.0}, "highest_return") == {"a": "win", "b": "loss"}
    assert _outcomes({"a": 2.0, "b": 2.0, "c": 0.0}, "highest_return") == {"a": "draw", "b": "draw", "c": "loss"}
    assert _outcomes({"a": 1.0, "b": -1.0}, "positive_return") == {"a": "win", "b": "loss"}
    # A drawn board game (both sides 0) is a draw for each side, not a loss for both.
    assert _outcomes({"a": 0.0, "b": 0.0}, "positive_return") == {"a": "draw", "b": "draw"}
    assert _outcomes({"a": -1.0, "b": 1.0}, "positive_return") == {"a": "loss", "b": "win"}
    assert _outcomes({"a": 1.0}, "none") == {}


def test_head_to_head_win_rates_per_binding():
    config = PettingZooEnvConfig(env_kwargs={"N": 2, "max_cycles": 25}, num_envs=4)
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("script", class_path="x.y"), PolicyBinding("idle", class_path="x.y")], spec, ["script", "idle"]
    )
    population = MultiAgentPolicy({"script": SpreadToLandmarkPolicy(group), "idle": NoOpPolicy(group)}, table)
    results = evaluate_episodes(population, config, num_episodes=8, seed=0, winner="highest_return")
    assert set(results) == {"script", "idle"}
    for stats in results.values():
        assert 0.0 <= stats["win_rate"] <= 1.0 and stats["episodes"] == 8
    # One winner per episode unless tied: the win rates and the draws account for every episode.
    total = results["script"]["win_rate"] + results["idle"]["win_rate"] + results["script"]["draw_rate"]
    assert total == pytest.approx(1.0)
    without = evaluate_episodes(population, config, num_episodes=8, seed=0)
    assert "win_rate" not in without["script"]
    with pytest.raises(ValueError, match="winner"):
        evaluate_episodes(population, config, num_episodes=1, seed=0, winner="elo")
