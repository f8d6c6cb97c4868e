"""MLPActorCritic(agent_id_input=True): a one-hot of the row's agent appended to what the actor reads."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from lightning.pytorch import Trainer
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from expectations import assert_finite_metrics
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
from lightmarl.data.collector import RolloutCollector
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.policies.mlp import AgentIdInput
from lightmarl.policies.multi_agent import _StackedActors
from lightmarl.policies.registry import PolicyRegistry, build_policy, load_policy_from_uri
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl.training import MARLModule

MLP_PATH = "lightmarl.policies.MLPActorCritic"


def same_observation_rows(group, batch=2):
    """Every agent of every env copy sees one and the same observation; only ``agent_id`` differs."""
    observation = torch.randn(*group.observation_shape).expand(batch, group.num_agents, -1).clone()
    agent_id = torch.tensor(group.agent_ids).expand(batch, group.num_agents)
    rows = TensorDict({"observation": observation, "agent_id": agent_id}, [batch, group.num_agents])
    return TensorDict({group.name: rows}, [batch])


def logits(policy, td):
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        return policy(td.clone())[policy.group.name, "logits"]


def test_identical_observations_get_per_agent_logits_only_with_the_option(spread_config):
    group = spread_config.spec().groups["agent"]
    td = same_observation_rows(group)
    off = logits(MLPActorCritic(group, hidden_sizes=[16]), td)
    on = logits(MLPActorCritic(group, hidden_sizes=[16], agent_id_input=True), td)
    for a in range(1, group.num_agents):
        assert torch.allclose(off[:, 0], off[:, a], atol=1e-6)
        assert (on[:, 0] - on[:, a]).abs().max() > 1e-3, f"agent {a} got agent 0's logits"
    # Rows of the same agent still agree (the one-hot is the only difference).
    assert torch.allclose(on[0], on[1], atol=1e-6)


def test_one_hot_is_over_the_groups_own_positions(spread_config):
    group = dataclasses.replace(spread_config.spec().groups["agent"], agent_ids=(4, 6, 9))
    policy = MLPActorCritic(group, hidden_sizes=[16], critic="local", agent_id_input=True)
    first = next(m for m in policy.actor.modules() if isinstance(m, torch.nn.Linear))
    assert first.in_features == 18 + 3
    wrapper = next(m for m in policy.actor.modules() if isinstance(m, AgentIdInput))
    assert wrapper.position[[4, 6, 9]].tolist() == [0, 1, 2]
    td = same_observation_rows(group)
    on = logits(policy, td)
    assert not torch.allclose(on[:, 0], on[:, 1])
    # A row of the group's agent 6 (position 1) alone gets position 1's logits.
    single = TensorDict({group.name: td[group.name][:, 1:2].clone()}, [2])
    assert torch.allclose(logits(policy, single)[:, 0], on[:, 1], atol=1e-6)
    # The local critic reads the one-hot too.
    values = policy.critic(td.clone())[group.name, "state_value"]
    assert not torch.allclose(values[:, 0], values[:, 1])
    bad = td.clone()
    bad[group.name, "agent_id"][:, 0] = 5  # not an agent of the group
    with pytest.raises(RuntimeError):
        logits(policy, bad)


def test_rows_without_agent_id_are_refused(spread_config):
    group = spread_config.spec().groups["agent"]
    policy = MLPActorCritic(group, hidden_sizes=[16], agent_id_input=True)
    td = same_observation_rows(group)
    del td[group.name, "agent_id"]
    with pytest.raises(KeyError, match="agent_id"):
        policy(td)


def test_stacked_forward_is_not_used_for_agent_id_policies(spread_config):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    plain = [MLPActorCritic(group, hidden_sizes=[16]) for _ in range(2)]
    with_id = [MLPActorCritic(group, hidden_sizes=[16], agent_id_input=True) for _ in range(2)]
    assert _StackedActors.signature(plain[0]) is not None
    assert _StackedActors.build(plain) is not None
    assert _StackedActors.signature(with_id[0]) is None
    assert _StackedActors.build(with_id) is None
    assert _StackedActors.build([plain[0], with_id[0]]) is None
    # Through the population: each binding acts on its own rows with their agent ids.
    table = BindingTable(
        [PolicyBinding("a", class_path="x.y"), PolicyBinding("b", class_path="x.y")], spec, ["a", "b", "a"]
    )
    population = MultiAgentPolicy({"a": with_id[0], "b": with_id[1]}, table)
    td = same_observation_rows(group, batch=3)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        actions = population(td.clone())[group.name, "action"]
    expected = torch.stack(
        [logits(with_id[0], td)[:, 0], logits(with_id[1], td)[:, 1], logits(with_id[0], td)[:, 2]], dim=1
    ).argmax(-1)
    assert torch.equal(actions, expected)


@pytest.mark.parametrize("critic", ["centralized", "local"])
def test_ppo_update_runs_with_agent_id_input(spread_config, critic):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("learner", class_path="x.y"), PolicyBinding("npc", class_path="x.y", trainable=False)],
        spec,
        ["learner", "npc", "learner"],
    )
    policies = {
        "learner": MLPActorCritic(group, hidden_sizes=[16], critic=critic, agent_id_input=True),
        "npc": MLPActorCritic(group, hidden_sizes=[16]).requires_grad_(False),
    }
    before = {k: v.clone() for k, v in policies["learner"].state_dict().items()}
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 10)
    trainer = IndependentMARLTrainer(table, policies, {"learner": PPO(minibatch_size=8, epochs=2)})
    optimizers = trainer.make_optimizers()
    metrics = trainer.update(collector.collect(), optimizers, PlainStepper())["learner"]
    assert metrics["rows"] == 4 * 10 * 2
    assert_finite_metrics(metrics)
    changed = [k for k, v in policies["learner"].state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "the learner's parameters did not change"


def test_build_policy_and_state_dict_round_trip_keep_the_option(spread_config, tmp_path):
    group = spread_config.spec().groups["agent"]
    policy = build_policy(MLP_PATH, {"hidden_sizes": [16], "agent_id_input": True}, group, field="binding 's'")
    assert policy.agent_id_input and policy.origin["policy_kwargs"]["agent_id_input"] is True
    path = tmp_path / "weights.pt"
    torch.save(policy.state_dict(), path)
    loaded = load_policy_from_uri(f"{path}?class_path={MLP_PATH}", "s", group, policy.origin["policy_kwargs"])
    assert loaded.agent_id_input
    td = same_observation_rows(group)
    assert torch.equal(logits(loaded, td), logits(policy, td))
    # Weights of a policy with the option do not fit one without it (wider first layer).
    with pytest.raises(ValueError, match="do not fit"):
        load_policy_from_uri(f"{path}?class_path={MLP_PATH}", "s", group, {"hidden_sizes": [16]})


def test_checkpoint_rebuild_keeps_the_option(tmp_path):
    from lightmarl.envs import PettingZooEnvConfig

    env = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 5}, num_envs=2)
    module = MARLModule(
        env=env,
        policy_bindings=[
            {"id": "student", "class_path": MLP_PATH, "policy_kwargs": {"hidden_sizes": [16], "agent_id_input": True}}
        ],
        agent_binding_map=["student", "student", "student"],
        algorithm=PPO(minibatch_size=10),
        rollout_steps=5,
        max_frames=10,
    )
    trainer = Trainer(
        max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0
    )
    trainer.fit(module)
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    group = env.spec().groups["agent"]
    loaded = PolicyRegistry().get(PolicyBinding("rival", policy_uri=f"{path}#student", trainable=False), group)
    assert isinstance(loaded, MLPActorCritic) and loaded.agent_id_input
    td = same_observation_rows(group)
    assert torch.equal(logits(loaded, td), logits(module.policies["student"], td))
