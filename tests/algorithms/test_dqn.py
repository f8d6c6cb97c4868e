"""DQN UnitTrainer and QNetworkPolicy: contract, off-policy data path, target network, exploration."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl import keys
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
from lightmarl.algorithms.dqn import DQN, DQNUnitTrainer
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.spec import GroupSpec
from lightmarl.evaluation import evaluate_episodes
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, UniformRandomPolicy
from lightmarl.policies.qnet import QNetworkPolicy
from lightmarl.population import BindingTable, PolicyBinding


def population(spread_config, agent_map=("ppo", "dqn", "dqn")):
    """PPO + DQN bindings (both trainable) and a frozen Q-network ``npc``."""
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [
            PolicyBinding("ppo", class_path="x.y"),
            PolicyBinding("dqn", class_path="x.y"),
            PolicyBinding("npc", class_path="x.y", trainable=False),
        ],
        spec,
        list(agent_map),
    )
    policies = {
        "ppo": MLPActorCritic(group, critic="local"),
        "dqn": QNetworkPolicy(group),
        "npc": QNetworkPolicy(group),
    }
    policies["npc"].requires_grad_(False)
    return table, policies


def setup(spread_config, agent_map=("ppo", "dqn", "dqn"), steps=10, **dqn_kwargs):
    table, policies = population(spread_config, agent_map)
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), steps)
    kwargs = {"batch_size": 32, "learning_starts": 32, "updates_per_iteration": 1, **dqn_kwargs}
    trainer = IndependentMARLTrainer(table, policies, {"ppo": PPO(minibatch_size=8), "dqn": DQN(**kwargs)})
    unit = trainer.unit_trainers["dqn"]
    assert isinstance(unit, DQNUnitTrainer)
    optimizer = unit.make_optimizer()
    return table, policies, collector, unit, optimizer


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return copy.deepcopy(module.state_dict())


def test_one_update_changes_the_dqn_binding_only_and_the_loss_is_finite(spread_config):
    _, policies, collector, unit, optimizer = setup(spread_config, agent_map=("ppo", "dqn", "npc"))
    before = {b: snapshot(p) for b, p in policies.items()}
    target_before = [t.clone() for t in unit.target_parameters()]
    metrics = unit.update(collector.collect(), optimizer, PlainStepper())
    assert math.isfinite(metrics["loss"]) and metrics["grad_steps"] == 1
    changed = [k for k, v in policies["dqn"].state_dict().items() if not torch.equal(v, before["dqn"][k])]
    assert any(k.startswith("qvalue.") for k in changed), changed
    for binding in ("ppo", "npc"):
        for key, value in policies[binding].state_dict().items():
            assert torch.equal(value, before[binding][key]), (binding, key)
    # The target network is a separate copy: it did not take the gradient step...
    online = unit.parameters()
    assert all(t.data_ptr() != p.data_ptr() for t, p in zip(unit.target_parameters(), online))
    assert any(not torch.equal(t, p) for t, p in zip(unit.target_parameters(), online))
    # ... it moved by the soft update only: target = (1 - tau) * target + tau * online.
    tau = unit.config.tau
    for t, old, p in zip(unit.target_parameters(), target_before, online):
        assert torch.allclose(t, (1 - tau) * old + tau * p.detach(), atol=1e-6)


def test_hard_target_update_copies_every_interval_steps(spread_config):
    _, _, collector, unit, optimizer = setup(spread_config, target_update="hard", target_update_interval=2)
    initial = [t.clone() for t in unit.target_parameters()]
    experience = collector.collect()
    unit.update(experience, optimizer, PlainStepper())
    assert all(torch.equal(t, i) for t, i in zip(unit.target_parameters(), initial)), "copied after 1 step"
    unit.update(experience, optimizer, PlainStepper())
    assert unit.grad_steps == 2
    assert all(torch.equal(t, p.detach()) for t, p in zip(unit.target_parameters(), unit.parameters()))
    unit.update(experience, optimizer, PlainStepper())
    assert any(not torch.equal(t, p.detach()) for t, p in zip(unit.target_parameters(), unit.parameters()))


def test_replay_holds_only_the_bindings_valid_rows(spread_config):
    table, _, collector, unit, optimizer = setup(spread_config, agent_map=("ppo", "dqn", "npc"), learning_starts=10**6)
    experience = collector.collect()
    experience["agent", keys.VALID][0, 3, 1] = False  # a DQN row where the agent was absent
    metrics = unit.update(experience, optimizer, PlainStepper())
    stored = unit.replay[:]
    assert len(unit.replay) == metrics["rows"] == 4 * 10 - 1 and "loss" not in metrics  # still filling
    rows = stored["agent"]
    assert (rows[keys.BINDING_ID] == table.index["dqn"]).all()
    assert rows[keys.AGENT_ID].unique().tolist() == [1]
    assert rows[keys.VALID].all() and rows[keys.IS_TRAINABLE_AGENT].all()
    # Transitions pair each row with its own next observation, reward and done flags.
    expected = experience["next", "agent", "reward"][..., 1, :][experience["agent", keys.VALID][..., 1]]
    assert torch.equal(stored["next", "agent", "reward"], expected)
    assert stored["next", "agent", "observation"].shape == rows[keys.OBSERVATION].shape


def test_epsilon_follows_frames_seen_and_survives_a_state_round_trip(spread_config):
    config = DQN(eps_start=1.0, eps_end=0.1, eps_decay_frames=100)
    assert [config.epsilon_at(f) for f in (0, 50, 100, 1000)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    _, policies, collector, unit, optimizer = setup(
        spread_config, eps_start=1.0, eps_end=0.1, eps_decay_frames=100, learning_starts=10**6
    )
    assert float(policies["dqn"].epsilon) == 1.0
    metrics = unit.update(collector.collect(), optimizer, PlainStepper())  # 4 envs x 10 steps
    assert metrics["epsilon"] == 1.0  # the rate the consumed rollout was collected with
    assert float(policies["dqn"].epsilon) == pytest.approx(config.epsilon_at(40))
    state = unit.state_dict()
    policies["dqn"].set_epsilon(1.0)
    unit.load_state_dict(state)
    assert float(policies["dqn"].epsilon) == pytest.approx(config.epsilon_at(40))


def masked_group() -> GroupSpec:
    return GroupSpec("player", ("player_0",), (0,), (4,), "discrete", num_actions=5, has_action_mask=True)


def act(policy, observation, mask=None, exploration=ExplorationType.RANDOM):
    entries = {"observation": observation}
    if mask is not None:
        entries["action_mask"] = mask
    td = TensorDict({policy.group.name: TensorDict(entries, batch_size=observation.shape[:-1])}, batch_size=[])
    with set_exploration_type(exploration):
        policy(td)
    return td[policy.group.name]


def test_greedy_and_epsilon_greedy_actions_and_log_probs(spread_config):
    group = spread_config.spec().groups["agent"]
    policy = QNetworkPolicy(group, epsilon=0.0)
    obs = torch.randn(2000, group.num_agents, group.observation_shape[0])
    greedy = act(policy, obs, exploration=ExplorationType.DETERMINISTIC)
    assert torch.equal(greedy["action"], greedy["action_value"].argmax(-1))
    assert (greedy["action_log_prob"] == 0).all()
    assert torch.equal(act(policy, obs)["action"], greedy["action"])  # epsilon 0: greedy while exploring
    policy.set_epsilon(0.5)
    out = act(policy, obs)
    is_greedy = out["action"] == greedy["action"]
    # P(greedy) = 0.5 + 0.5 / 5 = 0.6; every other action 0.1.
    assert 0.55 < is_greedy.float().mean() < 0.65
    expected = torch.where(is_greedy, torch.tensor(0.6).log(), torch.tensor(0.1).log())
    assert torch.allclose(out["action_log_prob"], expected)
    assert set(out["action"].unique().tolist()) == set(range(5))
    # Evaluation stays greedy whatever epsilon is.
    policy.set_epsilon(1.0)
    assert torch.equal(act(policy, obs, exploration=ExplorationType.DETERMINISTIC)["action"], greedy["action"])


def test_action_mask_is_respected_greedy_and_exploring():
    policy = QNetworkPolicy(masked_group(), epsilon=1.0)
    obs = torch.randn(1000, 1, 4)
    mask = torch.zeros(1000, 1, 5, dtype=torch.bool)
    mask[..., 1] = mask[..., 3] = True
    exploring = act(policy, obs, mask)
    assert set(exploring["action"].unique().tolist()) == {1, 3}
    assert torch.allclose(exploring["action_log_prob"], torch.tensor(0.5).log())
    greedy = act(policy, obs, mask, ExplorationType.DETERMINISTIC)
    assert set(greedy["action"].unique().tolist()) <= {1, 3}


def test_dqn_needs_q_values_and_names_the_binding(spread_config):
    group = spread_config.spec().groups["agent"]
    with pytest.raises(ValueError, match=r"binding 'ppo_policy': algorithm DQN needs a policy with Q-values"):
        DQN().check_policy("ppo_policy", MLPActorCritic(group))
    with pytest.raises(ValueError, match=r"binding 'r': algorithm DQN"):
        DQN().make_unit_trainer("r", UniformRandomPolicy(group), population(spread_config)[0])
    DQN().check_policy("q", QNetworkPolicy(group))


@pytest.mark.parametrize("field", ["lr", "batch_size", "updates_per_iteration", "tau", "target_update_interval"])
def test_bad_hyperparameters_are_named(field):
    with pytest.raises(ValueError, match=f"algorithm.{field}"):
        DQN(**{field: 0})


@pytest.mark.slow  # 7 s on an idle core, about a minute on the shared 2-core machine
def test_dqn_beats_random_on_single_agent_spread():
    """Independent Q-learning on simple_spread N=1 (one agent, one landmark) beats uniform-random."""
    config = PettingZooEnvConfig(
        env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 1, "max_cycles": 25}, num_envs=16
    )
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding("q", class_path="x.y")], spec, ["q"])
    policy = QNetworkPolicy(group, hidden_sizes=(64, 64))
    algorithm = DQN(
        lr=1e-3,
        gamma=0.95,
        batch_size=128,
        learning_starts=256,
        updates_per_iteration=8,
        tau=0.05,
        eps_decay_frames=6_000,
    )
    trainer = IndependentMARLTrainer(table, {"q": policy}, {"q": algorithm})
    optimizers = trainer.make_optimizers()
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy({"q": policy}, table), 25)
    for iteration in range(30):  # 12k frames
        trainer.update(collector.collect(), optimizers, PlainStepper(), iteration=iteration)
    collector.close()
    trained = evaluate_episodes(MultiAgentPolicy({"q": policy}, table), config, 32, seed=123)["q"]["episode_return"]
    baseline_policy = MultiAgentPolicy({"q": UniformRandomPolicy(group, seed=0)}, table)
    baseline = evaluate_episodes(baseline_policy, config, 32, seed=123)["q"]["episode_return"]
    # Random scores about -15 on these seeds; 12k frames of DQN reach about -7.
    assert trained > baseline + 5.0, (trained, baseline)


@pytest.mark.parametrize("bootstrap_truncated", [True, False])
def test_bootstrap_truncated_decides_whether_a_cut_off_episode_is_bootstrapped(spread_config, bootstrap_truncated):
    # simple_spread never terminates: every episode end here is max_cycles' truncation.
    _, _, collector, unit, optimizer = setup(
        spread_config, steps=12, learning_starts=10**6, bootstrap_truncated=bootstrap_truncated
    )
    unit.update(collector.collect(), optimizer, PlainStepper())
    stored = unit.replay.storage[: len(unit.replay)]
    after = stored.get((keys.NEXT, "agent"))
    done, terminated = after.get(keys.DONE), after.get(keys.TERMINATED)
    assert done.any() and not done.all()
    assert torch.equal(terminated, done if not bootstrap_truncated else torch.zeros_like(done))
    # The TD target at the episode ends: the reward alone when they are terminal, else reward + gamma * max Q'.
    with torch.no_grad():
        target = unit.loss.value_estimator.value_estimate(
            stored.clone(), target_params=unit.loss.target_value_network_params
        )
    reward = after.get(keys.REWARD)
    ends = done.squeeze(-1)
    assert torch.allclose(target[ends], reward[ends]) is (not bootstrap_truncated)
