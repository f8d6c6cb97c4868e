"""Win, draw and loss per seat in every ``evaluation.validation.winner`` mode: scripted draws, always-wins and
mirror matches, with seats swapped between env copies (a draw counted as a loss for both sides, or seats never swapped, would make payoff and PFSP weights wrong)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from gymnasium import spaces
from pettingzoo import ParallelEnv

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation import evaluate_episodes
from lightmarl.evaluation.episodes import seat_outcomes
from lightmarl.policies import MultiAgentPolicy, NoOpPolicy, ScriptedPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl_examples.simple_spread import SpreadToLandmarkPolicy

HERE = __name__


def test_outcome_rules():
    assert seat_outcomes([("a", 1.0), ("b", -1.0)], "highest_return") == [("a", "win"), ("b", "loss")]
    assert seat_outcomes([("a", 2.0), ("b", 2.0), ("c", 0.0)], "highest_return") == [
        ("a", "draw"),
        ("b", "draw"),
        ("c", "loss"),
    ]
    # Teams: sides are bindings, by the mean return of their seats.
    assert seat_outcomes([("a", 3.0), ("a", -1.0), ("b", 0.5)], "highest_return") == [
        ("a", "win"),
        ("a", "win"),
        ("b", "loss"),
    ]
    # One binding in every seat: the seats are the sides.
    assert seat_outcomes([("a", 1.0), ("a", -1.0)], "highest_return") == [("a", "win"), ("a", "loss")]
    assert seat_outcomes([("a", 0.0), ("a", 0.0)], "highest_return") == [("a", "draw"), ("a", "draw")]
    assert seat_outcomes([("a", 1.0), ("b", -1.0)], "positive_return") == [("a", "win"), ("b", "loss")]
    assert seat_outcomes([("a", 0.0), ("b", 0.0)], "positive_return") == [("a", "draw"), ("b", "draw")]
    assert seat_outcomes([("a", -1.0), ("b", 1.0)], "positive_return") == [("a", "loss"), ("b", "win")]
    assert seat_outcomes([("a", 1.0)], "none") == []


class DuelEnv(ParallelEnv):
    """Two players, one move each: striking (1) beats resting (0), +1 / -1; equal moves draw, 0 / 0."""

    metadata: ClassVar[dict[str, Any]] = {"name": "duel_v0", "render_modes": []}
    possible_agents: ClassVar[list[str]] = ["player_0", "player_1"]

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: np.zeros(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        edge = float(np.sign(int(actions["player_0"]) - int(actions["player_1"])))
        rewards = {"player_0": edge, "player_1": -edge}
        observations = {a: np.zeros(1, np.float32) for a in self.agents}
        ends = dict.fromkeys(self.agents, True)
        self.agents = []
        return observations, rewards, ends, dict.fromkeys(ends, False), {a: {} for a in ends}


class Strike(ScriptedPolicy):
    def act(self, observation, action_mask=None, agent_id=None):
        return torch.ones(observation.shape[:-1], dtype=torch.int64)


class Rest(ScriptedPolicy):
    def act(self, observation, action_mask=None, agent_id=None):
        return torch.zeros(observation.shape[:-1], dtype=torch.int64)


class FirstSeatStrikes(ScriptedPolicy):
    """Seat 0 strikes, seat 1 rests: against itself, seat 0 always wins."""

    def act(self, observation, action_mask=None, agent_id=None):
        return (agent_id == 0).long()


DUEL = PettingZooEnvConfig(env_fn=f"{HERE}.DuelEnv", num_envs=4)
SWAPPED = {"default": ["a", "b"], "per_env": {1: ["b", "a"], 3: ["b", "a"]}}  # b has seat 0 in copies 1 and 3


def rates(policies: dict, winner: str, agent_map: Any = SWAPPED) -> dict[str, tuple[float, float]]:
    spec = DUEL.spec()
    group = spec.groups["player"]
    table = BindingTable([PolicyBinding(b, class_path="x.y") for b in policies], spec, agent_map, num_envs=4)
    population = MultiAgentPolicy({b: make(group) for b, make in policies.items()}, table)
    results = evaluate_episodes(population, DUEL, num_episodes=8, seed=0, winner=winner)
    return {b: (r["win_rate"], r["draw_rate"]) for b, r in results.items()}


@pytest.mark.parametrize("winner", ["positive_return", "highest_return"])
def test_an_always_win_is_a_win_from_either_seat_and_the_loser_never_wins(winner):
    assert rates({"a": Strike, "b": Rest}, winner) == {"a": (1.0, 0.0), "b": (0.0, 0.0)}


@pytest.mark.parametrize("winner", ["positive_return", "highest_return"])
def test_a_scripted_draw_is_a_draw_for_both_not_a_loss(winner):
    assert rates({"a": Strike, "b": Strike}, winner) == {"a": (0.0, 1.0), "b": (0.0, 1.0)}


@pytest.mark.parametrize("winner", ["positive_return", "highest_return"])
def test_a_binding_against_itself_wins_one_seat_and_loses_the_other(winner):
    assert rates({"a": FirstSeatStrikes}, winner, agent_map=None) == {"a": (0.5, 0.0)}
    assert rates({"a": Strike}, winner, agent_map=None) == {"a": (0.0, 1.0)}


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
