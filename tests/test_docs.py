"""The code on docs/extending.md runs and does what the page says."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from lightmarl.algorithms import PlainStepper
from lightmarl.data.collector import RolloutCollector
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def doc_namespace() -> dict:
    namespace: dict = {}
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S):
        exec(compile(block, str(DOC), "exec"), namespace)
    return namespace


def test_scripted_policy_example_acts_through_the_population(spread_config):
    ns = doc_namespace()
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("learner", class_path="x.y"), PolicyBinding("npc", class_path="x.y")],
        spec,
        ["learner", "npc", "learner"],
    )
    population = MultiAgentPolicy({"learner": MLPActorCritic(group), "npc": ns["AlwaysUp"](group)}, table)
    experience = RolloutCollector(spread_config.make_vector(0), population, 4).collect()
    assert experience["agent", "action"][..., 1].eq(4).all()


def test_algorithm_example_learns_to_stand_still(spread_config):
    ns = doc_namespace()
    spec = spread_config.spec()
    policy = MLPActorCritic(spec.groups["agent"])
    table = BindingTable(None, spec)
    unit = ns["SupervisedNoOp"](lr=0.01).make_unit_trainer("main", policy, table)
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 5)
    optimizer = unit.make_optimizer()
    experience = collector.collect()
    # As the MARLTrainer calls it: with the share of the budget spent, passed on to the example's update.
    losses = [unit.learn(experience, optimizer, PlainStepper(), fraction_done=i / 30)["loss_noop"] for i in range(30)]
    assert losses[-1] < 0.5 * losses[0]
    probability_of_noop = policy.actor.get_dist(experience).probs[..., 0].mean()
    assert probability_of_noop > 0.5
    assert torch.isfinite(torch.tensor(losses)).all()
