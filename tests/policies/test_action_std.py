"""MLPActorCritic's ``action_std``: where a tanh-normal actor's standard deviation comes from, its start and bound."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies import MLPActorCritic

WALKERS = GroupSpec(
    name="walker",
    agents=("walker_0", "walker_1", "walker_2"),
    agent_ids=(0, 1, 2),
    observation_shape=(31,),
    action_kind="continuous",
    action_shape=(4,),
    action_low=(-1.0,) * 4,
    action_high=(1.0,) * 4,
)


def loc_and_scale(policy: MLPActorCritic, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    td = TensorDict({"walker": TensorDict({"observation": observation}, observation.shape[:2])}, observation.shape[:1])
    td = policy(td)
    return td["walker", "loc"], td["walker", "scale"]


@pytest.mark.parametrize("init", [1.0, 0.3])
def test_learned_std_is_one_parameter_per_action_dimension_independent_of_the_observation(init):
    policy = MLPActorCritic(WALKERS, hidden_sizes=[16], action_std="learned", init_action_std=init)
    (log_std,) = [p for n, p in policy.named_parameters() if n.endswith("state_independent_scale")]
    assert log_std.shape == (4,)
    _, scale = loc_and_scale(policy, torch.randn(5, 3, 31))
    assert torch.allclose(scale, torch.full((5, 3, 4), init))
    _, other = loc_and_scale(policy, 10 * torch.randn(5, 3, 31))
    assert torch.equal(scale, other)
    # It learns: a loss on the scale moves the parameter, and the scale follows it.
    scale.sum().backward()
    assert log_std.grad is not None and (log_std.grad > 0).all()
    with torch.no_grad():
        log_std.fill_(math.log(2.0))
    assert torch.allclose(loc_and_scale(policy, torch.randn(2, 3, 31))[1], torch.full((2, 3, 4), 2.0))


def test_learned_std_is_bounded_below():
    policy = MLPActorCritic(WALKERS, hidden_sizes=[16], action_std="learned", init_action_std=0.5, min_action_std=0.05)
    with torch.no_grad():
        next(p for n, p in policy.named_parameters() if n.endswith("state_independent_scale")).fill_(-20.0)
    assert torch.allclose(loc_and_scale(policy, torch.randn(2, 3, 31))[1], torch.full((2, 3, 4), 0.05))


def test_state_std_depends_on_the_observation_and_starts_near_init():
    policy = MLPActorCritic(WALKERS, hidden_sizes=[16], init_action_std=0.5, min_action_std=0.05)
    assert not [n for n, _ in policy.named_parameters() if n.endswith("state_independent_scale")]
    observation = torch.randn(64, 3, 31)
    _, scale = loc_and_scale(policy, observation)
    assert not torch.allclose(scale, scale[0, 0])  # per observation
    assert (scale >= 0.05).all()
    # A zero network output maps to init_action_std: zero the last layer.
    last = [m for m in policy.actor.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.zero_()
    assert torch.allclose(loc_and_scale(policy, observation)[1], torch.full((64, 3, 4), 0.5))


def test_default_state_std_keeps_its_old_mapping():
    """Recipes and checkpoints from before ``action_std``: TorchRL's default extractor, the same numbers."""
    from tensordict.nn import NormalParamExtractor

    torch.manual_seed(0)
    policy = MLPActorCritic(WALKERS, hidden_sizes=[16])
    observation = torch.randn(8, 3, 31)
    _, scale = loc_and_scale(policy, observation)
    net = policy.actor.module[0].module.net.net  # Encoded -> _NormalParams -> MLP
    _, expected = NormalParamExtractor()(net(observation))
    assert torch.allclose(scale, expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"action_std": "global"}, "action_std: 'global' is not one of"),
        ({"init_action_std": 0.0}, "0 < min_action_std < init_action_std"),
        ({"init_action_std": 0.5, "min_action_std": 0.5}, "0 < min_action_std < init_action_std"),
        ({"min_action_std": -1.0}, "0 < min_action_std < init_action_std"),
    ],
)
def test_bad_action_std_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MLPActorCritic(WALKERS, **kwargs)


def test_learned_std_on_discrete_actions_is_refused(spread_config):
    group = spread_config.spec().groups["agent"]
    with pytest.raises(ValueError, match="applies to continuous actions"):
        MLPActorCritic(group, action_std="learned")
