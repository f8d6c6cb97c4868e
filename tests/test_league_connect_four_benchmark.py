"""The connect-four league benchmark's counting: seats swapped, draws half, the right snapshot file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmark_scripts import load_benchmark
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[1]
ENV = PettingZooEnvConfig(env_fn="pettingzoo.classic.connect_four_v3.env", num_envs=2)


bench = load_benchmark("league_connect_four.py")


class StackColumn(ScriptedPolicy):
    """Drops every piece in one column: four in a column after its fourth move unless blocked."""

    column = 3

    def act(self, observation, action_mask=None, agent_id=None):
        return torch.full(observation.shape[:-3], self.column, dtype=torch.int64)


class StackLeft(StackColumn):
    column = 0


def test_seats_are_swapped_and_counted_from_the_players_side():
    # Two stackers in different columns: whoever moves first completes four first.
    group = ENV.spec().groups["player"]
    result = bench.play_match(StackColumn(group), StackLeft(group), games=8, seed=0, env_config=ENV)
    assert result.seats == ["player_0"] * 4 + ["player_1"] * 4
    assert result.outcomes == ["win"] * 4 + ["loss"] * 4
    rates = result.rates
    assert rates.by_seat["player_0"].win.rate == 1.0 and rates.by_seat["player_1"].loss.rate == 1.0
    assert result.score.mean == 0.5 and rates.n == 8


def test_a_draw_scores_half_and_the_score_interval_stays_in_range():
    result = bench.MatchResult(["win", "draw", "draw", "loss"], ["player_0", "player_1"] * 2)
    assert result.score.mean == pytest.approx(0.5)
    assert result.rates.draw.count == 2
    sure = bench.MatchResult(["win"] * 20, ["player_0"] * 20).score
    assert sure.mean == 1.0 and sure.ci_high <= 1.0


def test_the_heuristic_beats_random_from_both_seats():
    group = ENV.spec().groups["player"]
    players = bench.opponents(group, StackLeft(group), seed=0)
    result = bench.play_match(players["heuristic"], players["random"], games=40, seed=0, env_config=ENV)
    assert len(result.outcomes) == 40
    assert result.rates.by_seat["player_0"].win.rate > 0.7 and result.rates.by_seat["player_1"].win.rate > 0.7


def test_games_must_split_evenly_between_seats():
    group = ENV.spec().groups["player"]
    with pytest.raises(ValueError, match="games: expected an even number"):
        bench.play_match(StackColumn(group), StackLeft(group), games=3, seed=0, env_config=ENV)


def test_first_snapshot_is_the_earliest_of_that_player(tmp_path):
    for name in ("main_default_0_init.pt", "main_default_0_120000.pt", "main_default_0_41008.pt", "other_0_10.pt"):
        (tmp_path / name).write_bytes(b"")
    assert bench.first_snapshot(tmp_path, "main_default_0").name == "main_default_0_41008.pt"
    with pytest.raises(ValueError, match="no snapshot of 'ghost'"):
        bench.first_snapshot(tmp_path, "ghost")


def test_a_checkpoint_naming_the_examples_encoder_loads(tmp_path, monkeypatch):
    # A file naming a class of examples/ loads only because the benchmark allows the league recipe's encoder.
    from lightmarl.policies import PolicyDict
    from lightmarl.policies.registry import build_policy

    group = ENV.spec().groups["player"]
    kwargs = {"hidden_sizes": [8], "encoder": {"class_path": "lightmarl_examples.connect_four.ThreatFeaturesEncoder"}}
    policy = build_policy("lightmarl.policies.MLPActorCritic", kwargs, group, field="test")
    PolicyDict({"main": policy}, {"main": group}).export(tmp_path / "population")
    loaded = bench.load_policy(tmp_path / "population", "main")
    assert type(loaded.encoder).__name__ == "ThreatFeaturesEncoder"
    monkeypatch.setattr(bench, "ALLOWED_CLASSES", ())
    with pytest.raises(ValueError, match=r"names 'lightmarl_examples\.connect_four\.ThreatFeaturesEncoder'"):
        bench.load_policy(tmp_path / "population", "main")
