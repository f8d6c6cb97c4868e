from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, NoOpPolicy, ScriptedPolicy, UniformRandomPolicy
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.population import BindingTable, PolicyBinding


def obs_td(group, batch=4, mask=None):
    data = {"observation": torch.randn(batch, group.num_agents, *group.observation_shape)}
    if mask is not None:
        data["action_mask"] = mask
    return TensorDict({group.name: TensorDict(data, [batch, group.num_agents])}, [batch])


class ConstantPolicy(ScriptedPolicy):
    """Always plays `value`: lets a test see whose action landed where."""

    def __init__(self, group, value: int = 0) -> None:
        super().__init__(group)
        self.value = value

    def act(self, observation, action_mask=None):
        return torch.full(observation.shape[:-1], self.value, dtype=torch.int64)


def test_mlp_actor_critic_outputs(spread_config):
    group = spread_config.spec().groups["agent"]
    policy = MLPActorCritic(group, hidden_sizes=[16])
    td = policy(obs_td(group))
    assert td["agent", "action"].shape == (4, 3)
    assert td["agent", "action_log_prob"].shape == (4, 3)
    assert (td["agent", "action_log_prob"] <= 0).all()
    value = policy.critic(td)["agent", "state_value"]
    assert value.shape == (4, 3, 1)


def test_deterministic_mode_takes_the_argmax(spread_config):
    group = spread_config.spec().groups["agent"]
    policy = MLPActorCritic(group)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        td = policy(obs_td(group))
    assert torch.equal(td["agent", "action"], td["agent", "logits"].argmax(-1))


def test_centralized_critic_reads_other_agents(spread_config):
    group = spread_config.spec().groups["agent"]
    central, local = MLPActorCritic(group, critic="centralized"), MLPActorCritic(group, critic="local")
    td = obs_td(group, batch=1)
    changed = td.clone()
    changed["agent", "observation"][0, 2] += 1.0  # only agent 2's observation changes
    for critic, agent0_changes in ((central.critic, True), (local.critic, False)):
        v0 = critic(td.clone())["agent", "state_value"][0, 0]
        v1 = critic(changed.clone())["agent", "state_value"][0, 0]
        assert (not torch.allclose(v0, v1)) == agent0_changes


def test_uniform_random_respects_the_action_mask(spread_config):
    group = spread_config.spec().groups["agent"]
    policy = UniformRandomPolicy(group, seed=0)
    mask = torch.zeros(64, 3, 5, dtype=torch.bool)
    mask[..., 1] = mask[..., 3] = True
    actions = policy.act(torch.zeros(64, 3, 18), mask)
    assert set(actions.unique().tolist()) == {1, 3}
    assert NoOpPolicy(group).act(torch.zeros(2, 3, 18), mask).eq(1).all()


def test_grouped_forward_puts_each_action_back_on_its_agent(spread_config):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    bindings = [PolicyBinding("two", class_path="x.y"), PolicyBinding("four", class_path="x.y")]
    table = BindingTable(bindings, spec, ["four", "two", "four"])
    population = MultiAgentPolicy({"two": ConstantPolicy(group, 2), "four": ConstantPolicy(group, 4)}, table)
    td = population(obs_td(group, batch=5))
    assert td["agent", "action"].tolist() == [[4, 2, 4]] * 5


def test_registry_builds_by_class_path_and_checks_kwargs(spread_config):
    group = spread_config.spec().groups["agent"]
    registry = PolicyRegistry()
    binding = PolicyBinding("a", class_path="lightmarl.policies.MLPActorCritic", policy_kwargs={"hidden_sizes": [8]})
    policy = registry.get(binding, group)
    assert isinstance(policy, MLPActorCritic) and policy.hidden_sizes == (8,)
    assert registry.get(binding, group) is policy  # cached by descriptor
    other = PolicyBinding("b", class_path="lightmarl.policies.MLPActorCritic", policy_kwargs={"hidden_sizes": [8]})
    assert registry.get(other, group) is not policy  # a different binding gets its own weights
    with pytest.raises(ValueError, match=r"binding 'c'.policy_kwargs"):
        registry.get(PolicyBinding("c", class_path="lightmarl.policies.MLPActorCritic", policy_kwargs={"x": 1}), group)
    with pytest.raises(ValueError, match=r"not a lightmarl.policies.Policy subclass"):
        registry.get(PolicyBinding("d", class_path="torch.nn.Linear"), group)


def test_policy_built_for_other_spaces_is_rejected(spread_config):
    from lightmarl.envs import PettingZooEnvConfig

    spread = spread_config.spec().groups["agent"]
    tag = PettingZooEnvConfig(env_fn="mpe2.simple_tag_v3.parallel_env").spec().groups["agent"]
    with pytest.raises(ValueError, match=r"was built for observations \(18,\)"):
        MLPActorCritic(spread).initialize_to_environment(tag)
