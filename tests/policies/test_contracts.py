"""The written policy contracts: each shipped policy satisfies the ones its algorithms read, and no other."""

from __future__ import annotations

import pytest

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import (
    DeterministicActorCritic,
    MLPActorCritic,
    QNetworkPolicy,
    RecurrentActorCritic,
    SACActorCritic,
    UniformRandomPolicy,
)
from lightmarl.policies.contracts import (
    DeterministicActor,
    QCritic,
    QValues,
    Recurrent,
    StochasticActor,
    TwinQCritics,
    ValueCritic,
    missing_capabilities,
    satisfies,
)

CONTRACTS = (StochasticActor, ValueCritic, QValues, DeterministicActor, QCritic, TwinQCritics)


@pytest.fixture
def groups(spread_config):
    continuous = PettingZooEnvConfig(
        env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 3, "continuous_actions": True}
    )
    return spread_config.spec().groups["agent"], continuous.spec().groups["agent"]


@pytest.mark.parametrize(
    ("make", "continuous", "satisfied"),
    [
        (lambda g: MLPActorCritic(g), False, {StochasticActor, ValueCritic}),
        (lambda g: MLPActorCritic(g, critic="none"), False, {StochasticActor}),
        (lambda g: MLPActorCritic(g, critic="local"), True, {StochasticActor, ValueCritic}),
        (lambda g: RecurrentActorCritic(g), False, {StochasticActor, ValueCritic}),
        (lambda g: QNetworkPolicy(g), False, {QValues}),
        (lambda g: DeterministicActorCritic(g, hidden_sizes=[8]), True, {DeterministicActor, QCritic}),
        # Its critics' template is a Q critic too; DDPG still refuses it (its actor is stochastic).
        (lambda g: SACActorCritic(g, hidden_sizes=[8]), True, {StochasticActor, TwinQCritics, QCritic}),
        (lambda g: UniformRandomPolicy(g), False, set()),
    ],
)
def test_each_policy_satisfies_exactly_its_contracts(groups, make, continuous, satisfied):
    policy = make(groups[continuous])
    assert {c for c in CONTRACTS if satisfies(policy, c)} == satisfied


def test_recurrence_is_an_optional_capability(groups):
    assert isinstance(RecurrentActorCritic(groups[0]), Recurrent)
    assert not isinstance(MLPActorCritic(groups[0]), Recurrent)


def test_missing_capabilities_say_what_is_missing(groups):
    discrete, continuous = groups
    assert missing_capabilities(MLPActorCritic(discrete), (StochasticActor, ValueCritic)) == []
    missing = missing_capabilities(MLPActorCritic(continuous), (DeterministicActor, QCritic))
    assert missing == [
        "a deterministic `actor` (it has a stochastic one)",
        "an `exploration_noise` buffer",
        "a Q critic (`qvalue` reading ('agent', 'action'), writing ('agent', 'state_action_value'))",
    ]
    with pytest.raises(TypeError, match="is not a policy contract"):
        missing_capabilities(MLPActorCritic(discrete), (int,))
