"""Env info fields (``env.info_fields``): recorded by every vector at every step, in process and in
worker processes, left out of experience, and reported per binding by evaluation and its report."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_suite import Hit, Miss  # scripted: always name the target / never
from torchrl.envs.utils import ExplorationType

from lightmarl import keys
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.checks import check_vec_env
from lightmarl.evaluation import evaluate_episodes
from lightmarl.evaluation.episodes import play_episodes
from lightmarl.evaluation.report import markdown_summary, validate_report
from lightmarl.evaluation.scenarios import EvaluationConfig, ScenarioConfig
from lightmarl.evaluation.suite import EvaluationSuite
from lightmarl.policies import MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding

HERE = __name__
SCRIPTS = Hit.__module__
# MatchTarget, two choices, no mask: each agent reports `t` every step, `score` (its return so far) at
# its last step, and a string `label`; agents leave early with probability 0.3 per step.
MATCH = PettingZooEnvConfig(
    env_fn="lightmarl.envs.testing.match.parallel_env",
    env_kwargs={"num_agents": 3, "nvec": [2], "action_mask": False, "max_cycles": 6, "leave_probability": 0.3},
    num_envs=4,
    info_fields=["t", "score"],
)


def population(config: PettingZooEnvConfig, agent_map: list[str]) -> MultiAgentPolicy:
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("hit", class_path="x.y"), PolicyBinding("miss", class_path="x.y")], spec, agent_map
    )
    return MultiAgentPolicy({"hit": Hit(group), "miss": Miss(group)}, table)


def test_the_reported_score_is_each_bindings_return_episode_by_episode():
    policy = population(MATCH, ["hit", "hit", "miss"])
    records = play_episodes(policy, MATCH, num_episodes=12, seed=3)
    left_early = 0
    for record in records:
        for binding, ret in record.returns.items():
            # `score` is each agent's return at its last step: the binding's mean is its return.
            assert record.info[binding]["score"] == pytest.approx(ret)
            # `t` at an agent's last step is the steps it played; the longest is the binding's length.
            assert record.info[binding]["t"] <= record.lengths[binding]
            left_early += record.info[binding]["t"] < record.lengths[binding]
        assert record.info["hit"]["score"] > 0 and record.info["miss"]["score"] == 0
    assert left_early > 0  # agents did leave early: `t` is each agent's own last report

    summary = evaluate_episodes(policy, MATCH, num_episodes=12, seed=3)
    for stats in summary.values():
        assert stats["info/score"] == pytest.approx(stats["episode_return"])
        assert stats["info/t"] <= stats["episode_length"]


def test_an_episode_without_the_field_is_nan_and_left_out_of_the_mean():
    config = dataclasses.replace(MATCH, info_fields=["score", "absent"])
    records = play_episodes(population(config, ["hit", "hit", "miss"]), config, num_episodes=4, seed=0)
    assert all(math.isnan(r.info["hit"]["absent"]) for r in records)
    summary = evaluate_episodes(population(config, ["hit", "hit", "miss"]), config, num_episodes=4, seed=0)
    assert "info/absent" not in summary["hit"] and "info/score" in summary["hit"]


def test_without_info_fields_nothing_is_recorded():
    config = dataclasses.replace(MATCH, info_fields=[])
    records = play_episodes(population(config, ["hit", "hit", "miss"]), config, num_episodes=2, seed=0)
    assert all(r.info == {} for r in records)
    vector = config.make_vector(seed=0, num_envs=2)
    vector.reset()
    nxt, _ = vector.step({"agent": torch.zeros(2, 3, dtype=torch.int64)})
    assert not any(k.startswith(keys.INFO_PREFIX) for k in nxt["agent"])
    vector.close()


def _info_trace(config: PettingZooEnvConfig, steps: int) -> list[dict[str, np.ndarray]]:
    vector = config.make_vector(seed=11, num_envs=4)
    rng = np.random.default_rng(0)
    trace = []
    try:
        vector.reset()
        for _ in range(steps):
            actions = torch.as_tensor(rng.integers(0, 2, size=(4, 3)), dtype=torch.int64)
            nxt, _ = vector.step({"agent": actions})
            trace.append({k: v.clone().numpy() for k, v in nxt["agent"].items() if k.startswith(keys.INFO_PREFIX)})
    finally:
        vector.close()
    return trace


def test_worker_processes_record_the_same_info_fields_as_the_training_process():
    in_process = _info_trace(MATCH, steps=14)
    in_workers = _info_trace(dataclasses.replace(MATCH, num_workers=2), steps=14)
    assert set(in_process[0]) == {"info/t", "info/score"}
    for a, b in zip(in_process, in_workers):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])  # NaN where not reported, in both
    scores = np.stack([step["info/score"] for step in in_process])
    assert np.isnan(scores).any() and not np.isnan(scores).all()


def test_vectors_with_info_fields_keep_the_env_contract():
    for config in (MATCH, dataclasses.replace(MATCH, num_workers=2)):
        vector = config.make_vector(seed=0)
        try:
            check_vec_env(vector, num_steps=12)
        finally:
            vector.close()


def test_a_field_that_is_not_a_number_fails_naming_it():
    config = dataclasses.replace(MATCH, info_fields=["label"])
    vector = config.make_vector(seed=0, num_envs=1)
    vector.reset()
    with pytest.raises(
        RuntimeError, match=r"\(copy 0, seed 0\): info field 'label' of agent 'agent_0' is 'match', not one number"
    ):
        vector.step({"agent": torch.zeros(1, 3, dtype=torch.int64)})
    vector.close()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("score", "expected a list of info field names"),
        (["score", ""], "expected a list"),
        (["t", "t"], "more than once"),
    ],
)
def test_bad_info_fields_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(MATCH, info_fields=fields)


def test_experience_leaves_the_info_fields_out():
    config = dataclasses.replace(MATCH, env_kwargs={**MATCH.env_kwargs, "leave_probability": 0.0})
    spec = config.spec()
    table = BindingTable([PolicyBinding("random", class_path="x.y")], spec, None)
    policy = MultiAgentPolicy({"random": UniformRandomPolicy(spec.groups["agent"])}, table)
    collector = RolloutCollector(
        config.make_vector(seed=0), policy, rollout_steps=4, exploration=ExplorationType.RANDOM
    )
    try:
        batch = collector.collect()
    finally:
        collector.close()
    names = ["/".join(k) if isinstance(k, tuple) else k for k in batch.keys(include_nested=True, leaves_only=True)]
    assert not [n for n in names if "info/" in n]


def test_the_report_carries_info_fields_in_json_markdown_and_logs():
    config = EvaluationConfig(
        scenarios=[ScenarioConfig(name="mixed", episodes=6, agent_binding_map=["hit", "miss", "hit"])]
    )
    bindings = [
        PolicyBinding("hit", class_path=f"{SCRIPTS}.Hit", trainable=False),
        PolicyBinding("miss", class_path=f"{SCRIPTS}.Miss", trainable=False),
    ]
    result = EvaluationSuite(config, MATCH, bindings, ["hit", "miss", "hit"]).run({})
    validate_report(result.report)
    summary = result.report["scenarios"]["mixed"]["bindings"]
    assert summary["hit"]["info"]["score"]["mean"] == pytest.approx(summary["hit"]["episode_return"]["mean"])
    assert summary["miss"]["info"]["score"]["mean"] == 0.0
    assert result.logs["eval/mixed/hit/info/score"] == pytest.approx(result.logs["eval/mixed/hit/episode_return"])
    table = markdown_summary(result.report)
    assert "| mixed | hit | score |" in table and "| mixed | miss | t |" in table


class CountedTicTacToe:
    """tictactoe whose ``infos`` give each player its ``moves`` so far (a turn-based env reporting a field)."""

    def __init__(self, **kwargs):
        from pettingzoo.classic import tictactoe_v3

        self.env = tictactoe_v3.env(**kwargs)
        self.moves: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self.env, name)

    @property
    def infos(self):
        return {a: {**info, "moves": self.moves.get(a, 0)} for a, info in self.env.infos.items()}

    def reset(self, seed=None, options=None):
        self.moves = {}
        self.env.reset(seed=seed, options=options)

    def step(self, action):
        if action is not None:
            agent = self.env.agent_selection
            self.moves[agent] = self.moves.get(agent, 0) + 1
        self.env.step(action)


def test_turn_based_envs_report_info_fields_after_each_turn():
    config = PettingZooEnvConfig(env_fn=f"{HERE}.CountedTicTacToe", num_envs=2, info_fields=["moves"])
    spec = config.spec()
    group = spec.groups["player"]
    table = BindingTable([PolicyBinding("x", class_path="x.y"), PolicyBinding("o", class_path="x.y")], spec, ["x", "o"])
    policy = MultiAgentPolicy({"x": UniformRandomPolicy(group), "o": UniformRandomPolicy(group)}, table)
    torch.manual_seed(0)
    records = play_episodes(policy, config, num_episodes=6, seed=0, deterministic=False)
    for record in records:
        # Each binding plays one seat: the moves its player reported are the turns it took.
        assert record.info["x"]["moves"] == record.lengths["x"] >= 3
        assert record.info["o"]["moves"] == record.lengths["o"]


def test_validate_logs_the_info_fields_of_the_recipes_env(tmp_path, monkeypatch):
    from lightmarl.cli import main

    monkeypatch.chdir(tmp_path)
    main(
        [
            "validate",
            "--config",
            str(Path(__file__).resolve().parents[2] / "recipes/quickstart.yaml"),
            "--model.env.env_fn=lightmarl.envs.testing.match.parallel_env",
            "--model.env.env_kwargs={num_agents: 3, nvec: [2], action_mask: false, max_cycles: 4}",
            "--model.env.info_fields=[score, never_reported]",
            f"--model.policy_bindings=[{{id: hit, class_path: {SCRIPTS}.Hit}}]",
            "--evaluation.validation.episodes=4",
        ]
    )
    (metrics,) = tmp_path.glob("runs/quickstart/csv/version_*/metrics.csv")
    (row,) = list(csv.DictReader(metrics.open()))
    assert float(row["eval/hit/info/score"]) == pytest.approx(4.0)  # hits every step: 4 steps, 1 each
    assert math.isnan(float(row["eval/hit/info/never_reported"]))
