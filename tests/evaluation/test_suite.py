"""Playing scenarios: replace-one-agent with a known effect, reports that validate, figures and GIFs written,
and evaluations that repeat exactly."""

from __future__ import annotations

import pytest
import torch

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation.report import validate_report
from lightmarl.evaluation.scenarios import EvaluationConfig, HeadToHeadConfig, ReplaceOneAgentConfig, ScenarioConfig
from lightmarl.evaluation.suite import EvaluationSuite, write_outputs
from lightmarl.policies import ScriptedPolicy
from lightmarl.population import PolicyBinding

HERE = __name__
# MatchTarget with two choices, no mask: an agent is paid 1 per step for naming the target, 8 steps an episode.
MATCH = PettingZooEnvConfig(
    env_fn="lightmarl.envs.testing.match.parallel_env",
    env_kwargs={"num_agents": 3, "nvec": [2], "action_mask": False, "max_cycles": 8},
    num_envs=4,
)


class Hit(ScriptedPolicy):
    def act(self, observation, action_mask=None, agent_id=None):
        return observation.argmax(-1)


class Miss(ScriptedPolicy):
    def act(self, observation, action_mask=None, agent_id=None):
        return 1 - observation.argmax(-1)


def binding(binding_id: str, cls: type, trainable: bool = False) -> PolicyBinding:
    return PolicyBinding(binding_id, class_path=f"{HERE}.{cls.__name__}", trainable=trainable)


def test_replace_one_agent_reports_the_known_change_of_the_team_return(tmp_path):
    config = EvaluationConfig(
        bindings=[{"id": "miss", "class_path": f"{HERE}.Miss"}],
        replace_one_agent=[ReplaceOneAgentConfig(name="swap", replacement="miss", agents=["agent_1"], episodes=6)],
    )
    suite = EvaluationSuite(config, MATCH, [binding("hit", Hit)], ["hit", "hit", "hit"])
    result = suite.run({})
    validate_report(result.report)
    base, swapped = result.report["scenarios"]["swap"], result.report["scenarios"]["swap/agent_1_by_miss"]
    # The full team scores 8 per agent; with one agent always missing, (8 + 0 + 8) / 3.
    assert base["team"]["episode_return"]["mean"] == pytest.approx(8.0)
    assert swapped["team"]["episode_return"]["mean"] == pytest.approx(16 / 3)
    change = swapped["team"]["change"]
    assert change["difference"] == pytest.approx(-8 / 3)
    assert change["ci_low"] == change["ci_high"] == pytest.approx(-8 / 3)  # no spread: scripted play
    assert (change["n"], change["n_reference"]) == (6, 6)
    assert swapped["bindings"]["miss"]["episode_return"]["mean"] == 0.0
    assert result.logs["eval/swap/agent_1_by_miss/team/return_change"] == pytest.approx(-8 / 3)
    assert result.logs["eval/swap/hit/episode_return"] == pytest.approx(8.0)
    written = write_outputs(result, tmp_path)
    assert {p.name for p in written} == {"report.json", "summary.md", "returns.png"}
    assert (
        "| swap/agent_1_by_miss | agent_1 | 5.33 | -2.67 [-2.67, -2.67] | 6 |" in (tmp_path / "summary.md").read_text()
    )


def test_head_to_head_report_has_a_payoff_heatmap_and_a_gif_is_written(tmp_path):
    # simple_spread draws RGB frames; two agents, scripted sides: the figures and the video are the point here.
    spread = PettingZooEnvConfig(env_kwargs={"N": 2, "max_cycles": 5}, num_envs=2)
    config = EvaluationConfig(
        bindings=[
            {"id": "seek", "class_path": "lightmarl_examples.simple_spread.SpreadToLandmarkPolicy"},
            {"id": "idle", "class_path": "lightmarl.policies.NoOpPolicy"},
        ],
        head_to_head=[HeadToHeadConfig(name="duel", players=["seek", "idle"], episodes=2, video=True)],
    )
    suite = EvaluationSuite(config, spread, [binding("hit", Hit)])
    result = suite.run({}, video_dir=tmp_path / "videos")
    validate_report(result.report)
    names = {p.name for p in write_outputs(result, tmp_path)}
    assert names == {"report.json", "summary.md", "returns.png", "payoff_duel.png"}
    gif = result.videos["duel"]
    assert gif == tmp_path / "videos" / "duel.gif" and gif.stat().st_size > 0
    h2h = result.report["scenarios"]["duel"]["head_to_head"]
    assert h2h["games"] == [[0, 4], [4, 0]]


def test_an_evaluation_repeats_exactly_and_leaves_the_live_policies_untouched():
    from lightmarl.policies import MLPActorCritic

    group = MATCH.spec().groups["agent"]
    live = MLPActorCritic(group, hidden_sizes=[8])
    before = {k: v.clone() for k, v in live.state_dict().items()}
    config = EvaluationConfig(
        bindings=[
            {"id": "random", "class_path": "lightmarl.policies.UniformRandomPolicy", "policy_kwargs": {"seed": 3}}
        ],
        scenarios=[
            ScenarioConfig(
                name="sampled", agent_binding_map=["main", "random", "main"], episodes=5, deterministic=False
            )
        ],
    )
    suite = EvaluationSuite(config, MATCH, [PolicyBinding("main", class_path="lightmarl.policies.MLPActorCritic")])
    first, second = suite.run({"main": live}), suite.run({"main": live})
    assert first.report["scenarios"] == second.report["scenarios"]
    assert all(torch.equal(before[k], v) for k, v in live.state_dict().items())
    assert all(p.requires_grad for p in live.parameters()), "the live policy keeps training"


def test_bad_mixes_fail_when_the_suite_is_built():
    config = EvaluationConfig(
        scenarios=[
            ScenarioConfig(
                name="x", agent_binding_map={"default": ["hit"] * 3, "per_env": {9: ["hit"] * 3}}, num_envs=2
            )
        ]
    )
    with pytest.raises(
        ValueError, match=r"evaluation scenario 'x': agent_binding_map\.per_env: env index 9 is out of range"
    ):
        EvaluationSuite(config, MATCH, [binding("hit", Hit)])
    clash = EvaluationConfig(bindings=[{"id": "hit", "class_path": f"{HERE}.Miss"}])
    with pytest.raises(ValueError, match=r"evaluation.bindings: ids \['hit'\] are already bindings of the recipe"):
        EvaluationSuite(clash, MATCH, [binding("hit", Hit)])
