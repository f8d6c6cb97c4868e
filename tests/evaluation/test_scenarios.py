"""Scenario expansion: named mixes, head-to-head pairs with seats swapped, trained vs frozen, replace one agent;
and bad scenarios failing with the field named."""

from __future__ import annotations

import pytest

from lightmarl.evaluation.scenarios import (
    EvaluationConfig,
    HeadToHeadConfig,
    ReplaceOneAgentConfig,
    ScenarioConfig,
    plan_scenarios,
)

TWO = ["player_0", "player_1"]
THREE = ["agent_0", "agent_1", "agent_2"]
BINDINGS = {"main": True, "other": True, "heuristic": False, "random": False}


def plan(agents=TWO, default_map=None, **sections):
    return plan_scenarios(EvaluationConfig(**sections), BINDINGS, agents, default_map)


def seatings(scenario):
    return [(mix.home, mix.away, mix.agent_binding_map) for mix in scenario.mixes]


def test_a_named_mix_is_played_as_written_per_env_maps_included():
    per_env = {"default": ["main", "heuristic"], "per_env": {1: ["heuristic", "main"]}}
    (scenario,) = plan(scenarios=[ScenarioConfig(name="mix", agent_binding_map=per_env, episodes=5, seed=3)])
    assert scenario.kind == "mix" and scenario.episodes == 5 and scenario.seed == 3
    assert [mix.agent_binding_map for mix in scenario.mixes] == [per_env]
    assert scenario.bindings == ["main", "heuristic"]


def test_head_to_head_plays_every_pair_from_both_seats():
    (scenario,) = plan(head_to_head=[HeadToHeadConfig(name="rr", players=["main", "heuristic", "random"])])
    assert seatings(scenario) == [
        ("main", "heuristic", ["main", "heuristic"]),
        ("heuristic", "main", ["heuristic", "main"]),
        ("main", "random", ["main", "random"]),
        ("random", "main", ["random", "main"]),
        ("heuristic", "random", ["heuristic", "random"]),
        ("random", "heuristic", ["random", "heuristic"]),
    ]
    assert scenario.winner == "highest_return"


def test_every_trained_binding_against_every_frozen_one():
    (scenario,) = plan(head_to_head=[HeadToHeadConfig(name="vs", opponents="frozen")])
    pairs = [(home, away) for home, away, _ in seatings(scenario)]
    assert pairs == [
        ("main", "heuristic"),
        ("heuristic", "main"),
        ("main", "random"),
        ("random", "main"),
        ("other", "heuristic"),
        ("heuristic", "other"),
        ("other", "random"),
        ("random", "other"),
    ]


def test_head_to_head_sides_seat_teams():
    agents = ["red_0", "red_1", "blue_0", "blue_1"]
    (scenario,) = plan(
        agents=agents,
        head_to_head=[
            HeadToHeadConfig(name="teams", players=["main", "random"], sides=[["red_0", "red_1"], ["blue_0", "blue_1"]])
        ],
    )
    assert [mix.agent_binding_map for mix in scenario.mixes] == [
        ["main", "main", "random", "random"],
        ["random", "random", "main", "main"],
    ]


def test_replace_one_agent_swaps_each_team_agent_in_turn():
    planned = plan(
        agents=THREE,
        default_map=["main", "main", "main"],
        replace_one_agent=[ReplaceOneAgentConfig(name="swap", replacement="random", episodes=4)],
    )
    assert [(s.name, s.baseline, s.replaced, s.mixes[0].agent_binding_map) for s in planned] == [
        ("swap", None, None, ["main", "main", "main"]),
        ("swap/agent_0_by_random", "swap", "agent_0", ["random", "main", "main"]),
        ("swap/agent_1_by_random", "swap", "agent_1", ["main", "random", "main"]),
        ("swap/agent_2_by_random", "swap", "agent_2", ["main", "main", "random"]),
    ]
    assert all(s.team_agents == tuple(THREE) and s.episodes == 4 for s in planned)
    only = plan(
        agents=THREE,
        replace_one_agent=[
            ReplaceOneAgentConfig(
                name="s", replacement="main", team=["other"] * 3, agents=["agent_2"], team_agents=["agent_1", "agent_2"]
            )
        ],
    )
    assert [(s.mixes[0].agent_binding_map, s.team_agents) for s in only] == [
        (["other"] * 3, ("agent_1", "agent_2")),
        (["other", "other", "main"], ("agent_1", "agent_2")),
    ]


def test_a_quick_check_overrides_every_episode_count():
    planned = plan(
        scenarios=[ScenarioConfig(name="a", agent_binding_map=["main", "main"], episodes=100)],
        head_to_head=[HeadToHeadConfig(name="b", players=["main", "random"], episodes=50)],
        episodes=2,
    )
    assert [s.episodes for s in planned] == [2, 2]


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"head_to_head": [HeadToHeadConfig(name="x", players=["main", "ghost"])]},
            r"evaluation.head_to_head\[0\].players: unknown binding 'ghost'; bindings are",
        ),
        (
            {"scenarios": [ScenarioConfig(name="x", agent_binding_map=["main", "ghost"])]},
            r"evaluation.scenarios\[0\].agent_binding_map: unknown binding 'ghost'",
        ),
        (
            {"scenarios": [ScenarioConfig(name="x", agent_binding_map=["main"])]},
            r"expected one binding id per agent \(2 agents",
        ),
        (
            {
                "head_to_head": [
                    HeadToHeadConfig(name="x", players=["main", "random"], sides=[["player_0"], ["player_9"]])
                ]
            },
            r"evaluation.head_to_head\[0\].sides: agent 'player_9' is not in the env; its agents are",
        ),
        (
            {
                "replace_one_agent": [
                    ReplaceOneAgentConfig(name="x", replacement="random", team=["main"] * 2, agents=["agent_7"])
                ]
            },
            r"evaluation.replace_one_agent\[0\].agents: agent 'agent_7' is not in the env",
        ),
        (
            {"head_to_head": [HeadToHeadConfig(name="x", players=["main", "random"], episodes=0)]},
            r"evaluation.head_to_head\[0\].episodes: expected a positive number of episodes, got 0",
        ),
        ({"head_to_head": [HeadToHeadConfig(name="x", players=["main"])]}, "a head-to-head needs two bindings"),
        ({"scenarios": [ScenarioConfig(name="a b", agent_binding_map=["main"] * 2)]}, "is not a scenario name"),
        (
            {"scenarios": [ScenarioConfig(name="a", agent_binding_map=["main"] * 2)] * 2},
            r"scenario names \['a'\] are used twice",
        ),
        ({"every_n_frames": 0}, "evaluation.every_n_frames: expected a positive integer, got 0"),
    ],
)
def test_bad_scenarios_name_the_field(sections, message):
    with pytest.raises(ValueError, match=message):
        plan(**sections)
