"""The private TorchRL methods lightmarl relies on keep the shape and meaning it relies on.

`lightmarl.algorithms.torchrl_private` is their one owner: these tests check each signature
against the installed TorchRL, what each returns on a real rollout, and that no other module of
``src/lightmarl`` reaches for them.
"""

from __future__ import annotations

import inspect
import math
import re
from pathlib import Path

import pytest
import torch

from lightmarl import keys
from lightmarl.algorithms import PPO
from lightmarl.algorithms.torchrl_private import (
    PRIVATE_METHODS,
    PRIVATE_PROPERTIES,
    clip_bounds,
    loss_mask,
    value_and_next_value,
)
from lightmarl.data.collector import RolloutCollector
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding

SRC = Path(__file__).resolve().parents[2] / "src" / "lightmarl"


@pytest.mark.parametrize(("owner", "name", "parameters"), PRIVATE_METHODS, ids=[m[1] for m in PRIVATE_METHODS])
def test_each_private_method_keeps_its_parameters(owner, name, parameters):
    method = getattr(owner, name, None)
    assert callable(method), f"TorchRL's {owner.__name__} has no {name} any more"
    assert tuple(inspect.signature(method).parameters) == parameters


@pytest.mark.parametrize(("owner", "name"), PRIVATE_PROPERTIES, ids=[p[1] for p in PRIVATE_PROPERTIES])
def test_each_private_property_is_still_a_property(owner, name):
    assert isinstance(inspect.getattr_static(owner, name, None), property)


def test_no_other_module_reaches_for_them():
    names = [name for _, name, _ in PRIVATE_METHODS] + [name for _, name in PRIVATE_PROPERTIES]
    pattern = re.compile(r"\.(" + "|".join(map(re.escape, names)) + r")\b|def (" + "|".join(names) + r")\b")
    users = [
        f"{path.relative_to(SRC)}:{line_no}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "torchrl_private.py"
        for line_no, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert users == []


@pytest.fixture
def rollout(spread_config):
    spec = spread_config.spec()
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    policy = MLPActorCritic(spec.groups["agent"], hidden_sizes=(16,), critic="local")
    data = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 6).collect()
    unit = PPO(clip_epsilon=0.2).make_unit_trainer("main", policy, table)
    return policy, unit, data


def test_value_and_next_value_are_the_critics_values_of_each_row_and_its_next_observation(rollout):
    policy, unit, data = rollout
    with torch.no_grad():
        value, next_value = value_and_next_value(unit.loss.value_estimator, data.copy())
        expected = policy.critic(data.copy()).get(("agent", keys.STATE_VALUE))
        expected_next = policy.critic(data.get(keys.NEXT).copy()).get(("agent", keys.STATE_VALUE))
    assert value.shape == expected.shape == (4, 6, 3, 1)
    assert torch.allclose(value, expected) and torch.allclose(next_value, expected_next)
    assert not torch.allclose(value, next_value)


def test_the_tap_records_the_ppo_intermediates_of_a_pass(rollout):
    policy, unit, data = rollout
    loss = unit.loss
    batch = data.reshape(-1)
    rows = batch.get("agent")
    torch.manual_seed(0)
    target = torch.randn(*rows.shape, 1)
    mask = torch.rand(rows.shape) < 0.5
    rows.set(keys.ADVANTAGE, torch.randn(*rows.shape, 1))
    rows.set(keys.VALUE_TARGET, target)
    rows.set(keys.LOSS_MASK, mask)
    assert torch.equal(loss_mask(loss, batch), mask)
    low, high = clip_bounds(loss)
    assert float(low) == pytest.approx(math.log(0.8)) and float(high) == pytest.approx(math.log(1.2))
    out, seen = loss.forward_with_intermediates(batch)
    assert "loss_objective" in out.keys()
    # The collecting policy itself: the new/old log-ratio and its KL vanish on every row.
    assert seen.log_weight is not None and seen.log_weight.shape[:2] == rows.shape
    assert seen.log_weight.abs().max() < 1e-5 and seen.kl is not None and seen.kl.abs().max() < 1e-5
    assert seen.entropy is not None and bool((seen.entropy > 0).all())
    with torch.no_grad():
        values = policy.critic(batch.copy()).get(("agent", keys.STATE_VALUE))
    assert torch.allclose(seen.value, values) and torch.allclose(seen.value_target, target)
    # Outside forward_with_intermediates a pass records nothing (and still works).
    assert "loss_objective" in loss(batch).keys()
