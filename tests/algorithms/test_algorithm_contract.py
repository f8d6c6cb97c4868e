"""The contract every algorithm passes (docs/architecture.md, "Contracts").

One update changes the learner's trainable parameters and only them, its losses are finite,
its loss keys name the env's group (never a hard-coded ``"agent"``) and its trainer state
survives a ``state_dict`` round-trip. The learner controls the *adversaries* of mpe2
simple_tag (group ``"adversary"``); the prey is a frozen binding that must not move.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from tensordict.nn import TensorDictModuleBase
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.objectives import LossModule

from lightmarl.algorithms import DDPG, DQN, PPO, QMIX, SAC, VDN, Algorithm, PlainStepper
from lightmarl.algorithms.off_policy import OffPolicyUnitTrainer
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies.contracts import missing_capabilities
from lightmarl.training.module import MARLModule

LEARNER_GROUP = "adversary"


@dataclass
class Case:
    """One algorithm with a policy that suits it, on discrete or continuous simple_tag."""

    algorithm: Any  # () -> Algorithm
    class_path: str
    policy_kwargs: dict = field(default_factory=dict)
    continuous: bool = False
    updates: int = 1  # off-policy learners may need a second rollout before their first step


CASES = {
    "ppo-mappo": Case(lambda: PPO(epochs=1, minibatch_size=64), "lightmarl.policies.MLPActorCritic"),
    "ppo-ippo-continuous": Case(
        lambda: PPO(epochs=1, minibatch_size=64),
        "lightmarl.policies.MLPActorCritic",
        {"critic": "local"},
        continuous=True,
    ),
    "ppo-recurrent": Case(
        lambda: PPO(epochs=1, minibatch_size=64), "lightmarl.policies.RecurrentActorCritic", {"critic": "local"}
    ),
    "dqn": Case(
        lambda: DQN(learning_starts=1, batch_size=32, updates_per_iteration=2), "lightmarl.policies.QNetworkPolicy"
    ),
    "sac-isac": Case(
        lambda: SAC(learning_starts=1, batch_size=32, updates_per_iteration=2),
        "lightmarl.policies.SACActorCritic",
        {"hidden_sizes": [32, 32]},
        continuous=True,
    ),
    "sac-masac": Case(
        lambda: SAC(learning_starts=1, batch_size=8, updates_per_iteration=2),
        "lightmarl.policies.SACActorCritic",
        {"hidden_sizes": [32, 32], "critic": "centralized"},
        continuous=True,
    ),
    "ddpg-iddpg": Case(
        lambda: DDPG(learning_starts=1, batch_size=32, updates_per_iteration=2),
        "lightmarl.policies.DeterministicActorCritic",
        {"hidden_sizes": [32, 32]},
        continuous=True,
    ),
    "ddpg-maddpg": Case(
        lambda: DDPG(learning_starts=1, batch_size=8, updates_per_iteration=2),
        "lightmarl.policies.DeterministicActorCritic",
        {"hidden_sizes": [32, 32], "critic": "centralized"},
        continuous=True,
    ),
    # Value decomposition: the learner controls every adversary, so its mixer sees the whole team.
    "qmix": Case(
        lambda: QMIX(learning_starts=1, batch_size=32, updates_per_iteration=2), "lightmarl.policies.QNetworkPolicy"
    ),
    "vdn": Case(
        lambda: VDN(learning_starts=1, batch_size=32, updates_per_iteration=2), "lightmarl.policies.QNetworkPolicy"
    ),
}


def make_module(case: Case) -> MARLModule:
    env = PettingZooEnvConfig(
        env_fn="mpe2.simple_tag_v3.parallel_env",
        env_kwargs={"num_good": 1, "num_adversaries": 2, "num_obstacles": 0, "max_cycles": 10,
                    "continuous_actions": case.continuous},
        num_envs=4,
    )  # fmt: skip
    return MARLModule(
        env=env,
        policy_bindings=[
            {"id": "learner", "class_path": case.class_path, "policy_kwargs": dict(case.policy_kwargs)},
            {"id": "prey", "class_path": "lightmarl.policies.MLPActorCritic", "trainable": False},
        ],
        agent_binding_map=["learner", "learner", "prey"],
        algorithm=case.algorithm(),
    )


def loss_modules(unit: Any) -> list[LossModule]:
    return [v for v in vars(unit).values() if isinstance(v, LossModule)]


def nested_keys(loss: LossModule) -> list[tuple]:
    keys = []
    for name in loss.tensor_keys._fields if hasattr(loss.tensor_keys, "_fields") else vars(loss.tensor_keys):
        value = getattr(loss.tensor_keys, name)
        if isinstance(value, tuple):
            keys.append(value)
    return keys


@pytest.mark.parametrize("name", sorted(CASES))
def test_algorithm_contract(name: str) -> None:
    torch.manual_seed(0)
    case = CASES[name]
    module = make_module(case)
    module.setup("fit")
    assert isinstance(module.algorithm, Algorithm)
    trainer = module.marl_trainer
    assert list(trainer.unit_trainers) == ["learner"], "frozen bindings get no UnitTrainer"
    unit = trainer.unit_trainers["learner"]
    assert unit.group.name == LEARNER_GROUP
    # The trainer writes down what it reads from the policy and which losses profiles may name.
    assert unit.requires and missing_capabilities(module.policies["learner"], unit.requires) == []
    assert unit.loss_names and all(name.islower() for name in unit.loss_names)

    # Keys honour the env's group names.
    losses = loss_modules(unit)
    assert losses, f"{type(unit).__name__} keeps its TorchRL LossModule(s) as attributes"
    for loss in losses:
        for key in nested_keys(loss):
            if key[0] == "next":
                key = key[1:]
            assert key[0] == LEARNER_GROUP, (type(loss).__name__, key)

    collector = RolloutCollector(module.env_config.make_vector(seed=0), module.population, rollout_steps=10)
    before = {n: p.detach().clone() for n, p in module.policies.named_parameters()}
    optimizers = trainer.make_optimizers()
    metrics: dict = {}
    try:
        for _ in range(case.updates):
            metrics = trainer.update(collector.collect(), optimizers, PlainStepper())
    finally:
        collector.close()

    # Losses are finite.
    learner_metrics = metrics["learner"]
    assert any(k.startswith("loss") for k in learner_metrics), learner_metrics
    assert all(math.isfinite(v) for v in learner_metrics.values()), learner_metrics
    # One update changes the learner's parameters, and only them.
    after = dict(module.policies.named_parameters())
    changed = {n for n in before if not torch.equal(before[n], after[n].detach())}
    assert any(n.startswith("learner.") for n in changed), "the learner learnt nothing"
    assert not {n for n in changed if not n.startswith("learner.")}, "a frozen binding moved"
    trainable = {n for n, p in after.items() if n.startswith("learner.") and p.requires_grad}
    assert changed <= trainable

    # Trainer state survives a state_dict round-trip (into a fresh trainer of the same algorithm).
    state = unit.state_dict()
    fresh = make_module(case)
    fresh.setup("fit")
    fresh_unit = fresh.marl_trainer.unit_trainers["learner"]
    fresh_unit.load_state_dict(state)
    assert_same_state(fresh_unit.state_dict(), state)
    if isinstance(unit, OffPolicyUnitTrainer):  # target networks are checkpointed (a resumed run builds them anew)
        assert state["networks"], "no target network in the trainer state"
        for restored, saved in zip(fresh_unit.target_parameters(), unit.target_parameters(), strict=True):
            assert torch.equal(restored, saved)
    # The learner's weights survive a checkpoint round-trip: a fresh module starts elsewhere (so the
    # comparison can fail), and after loading it acts exactly as the trained one on the same rows.
    trained = module.policies.state_dict()
    assert any(not torch.equal(v, trained[k]) for k, v in fresh.policies.state_dict().items())
    fresh.policies.load_state_dict(trained)
    assert fresh.policies.state_dict().keys() == trained.keys()
    rows = RolloutCollector(module.env_config.make_vector(seed=1), module.population, rollout_steps=3).collect()
    learner = module.policies["learner"]
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        expected = learner(rows.exclude("next").clone())
        actual = fresh.policies["learner"](rows.exclude("next").clone())
    for key in expected.keys(True, True):
        if expected.get(key).is_floating_point():
            assert torch.equal(actual.get(key), expected.get(key)), key


def assert_same_state(actual: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys()
        for key in expected:
            assert_same_state(actual[key], expected[key])
    elif isinstance(expected, torch.Tensor):
        assert torch.equal(actual, expected)
    elif isinstance(expected, TensorDictModuleBase):
        assert type(actual) is type(expected)
    else:
        assert actual == expected
