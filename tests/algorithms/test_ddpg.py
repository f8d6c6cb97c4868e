"""DDPG UnitTrainer and DeterministicActorCritic: update, targets, replay rows, MADDPG, noise, policy checks."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl import keys
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
from lightmarl.algorithms.ddpg import DDPG, DDPGUnitTrainer
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.spec import GroupSpec
from lightmarl.evaluation import evaluate_episodes
from lightmarl.policies import (
    DeterministicActorCritic,
    MLPActorCritic,
    MultiAgentPolicy,
    SACActorCritic,
    UniformRandomPolicy,
)
from lightmarl.policies.qnet import QNetworkPolicy
from lightmarl.population import BindingTable, PolicyBinding

SPREAD = "mpe2.simple_spread_v3.parallel_env"


@pytest.fixture
def one_thread():
    """Small networks on a shared machine step fastest on one intra-op thread (as MARLModule's cpu_threads=1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def continuous_spread() -> PettingZooEnvConfig:
    """3-agent simple_spread with continuous actions (5 forces in [0, 1]) and short episodes, 4 copies."""
    return PettingZooEnvConfig(
        env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 5, "continuous_actions": True}, num_envs=4
    )


def setup(config, agent_map=("ppo", "ddpg", "npc"), critic="local", steps=10, critic_value="per_agent", **ddpg_kwargs):
    """A DDPG binding next to a continuous PPO binding and a frozen deterministic policy ``npc``."""
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [
            PolicyBinding("ppo", class_path="x.y"),
            PolicyBinding("ddpg", class_path="x.y"),
            PolicyBinding("npc", class_path="x.y", trainable=False),
        ],
        spec,
        list(agent_map),
    )
    policies = {
        "ppo": MLPActorCritic(group, critic="local"),
        "ddpg": DeterministicActorCritic(group, hidden_sizes=(32, 32), critic=critic, critic_value=critic_value),
        "npc": DeterministicActorCritic(group, hidden_sizes=(32, 32)),
    }
    policies["npc"].requires_grad_(False)
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy(policies, table), steps)
    kwargs = {"batch_size": 16, "learning_starts": 16, "updates_per_iteration": 1, **ddpg_kwargs}
    trainer = IndependentMARLTrainer(table, policies, {"ppo": PPO(minibatch_size=8), "ddpg": DDPG(**kwargs)})
    unit = trainer.unit_trainers["ddpg"]
    assert isinstance(unit, DDPGUnitTrainer)
    return table, policies, collector, unit, unit.make_optimizer()


def test_one_update_changes_the_ddpg_binding_only_and_soft_updates_both_targets(continuous_spread):
    _, policies, collector, unit, optimizer = setup(continuous_spread)
    before = {b: copy.deepcopy(p.state_dict()) for b, p in policies.items()}
    target_before = [t.clone() for t in unit.target_parameters()]
    metrics = unit.update(collector.collect(), optimizer, PlainStepper())
    collector.close()
    assert metrics["grad_steps"] == 1 and unit.flavour == "IDDPG"
    assert math.isfinite(metrics["loss_actor"]) and math.isfinite(metrics["loss_value"])
    changed = {k for k, v in policies["ddpg"].state_dict().items() if not torch.equal(v, before["ddpg"][k])}
    assert any(k.startswith("actor.") for k in changed) and any(k.startswith("qvalue.") for k in changed)
    for binding in ("ppo", "npc"):
        for key, value in policies[binding].state_dict().items():
            assert torch.equal(value, before[binding][key]), (binding, key)
    # Target actor and target critic: separate copies, moved by the soft update only.
    online = [*unit.loss.actor_network_params.values(True, True), *unit.loss.value_network_params.values(True, True)]
    targets = unit.target_parameters()
    assert len(targets) == len(online) == len(target_before)
    tau = unit.config.tau
    for t, old, p in zip(targets, target_before, online):
        assert t.data_ptr() != p.data_ptr()
        assert torch.allclose(t, (1 - tau) * old + tau * p.detach(), atol=1e-6)


@pytest.mark.parametrize("delay_actor", [True, False])
def test_the_td_targets_next_action_comes_from_the_target_actor_or_the_actor(continuous_spread, delay_actor):
    # delay_actor=False (TorchRL DDPGLoss's default, BenchMARL's MADDPG): no target actor; the next action
    # of the TD target is the online actor's, so moving the actor moves the critic's loss at once.
    torch.manual_seed(0)
    _, _, collector, unit, optimizer = setup(continuous_spread, learning_starts=8, delay_actor=delay_actor)
    unit.update(collector.collect(), optimizer, PlainStepper())
    collector.close()
    names = [name for name, _ in unit.loss.named_children() if name.startswith("target_")]
    assert names == (["target_actor_network_params"] if delay_actor else []) + ["target_value_network_params"]
    batch = unit.replay[:16].clone()
    before = unit.loss(batch.clone())["loss_value"].detach()
    with torch.no_grad():
        for p in unit.loss.actor_network_params.values(True, True):
            p.add_(torch.randn_like(p))
    after = unit.loss(batch.clone())["loss_value"].detach()
    assert torch.equal(before, after) == delay_actor
    state = unit.state_dict()
    unit.load_state_dict(state)
    torch.testing.assert_close(unit.state_dict(), state, rtol=0, atol=0)


def test_replay_holds_only_the_bindings_valid_rows(continuous_spread):
    table, _, collector, unit, optimizer = setup(continuous_spread, learning_starts=10**6)
    experience = collector.collect()
    collector.close()
    experience["agent", keys.VALID][1, 2, 1] = False
    metrics = unit.update(experience, optimizer, PlainStepper())
    assert len(unit.replay) == metrics["rows"] == 4 * 10 - 1 and "loss_actor" not in metrics
    rows = unit.replay[:]["agent"]
    assert (rows[keys.BINDING_ID] == table.index["ddpg"]).all()
    assert rows[keys.AGENT_ID].unique().tolist() == [1] and rows[keys.VALID].all()


def test_maddpg_stores_joint_steps_and_trains_on_the_masked_rows(continuous_spread):
    _, _, collector, unit, optimizer = setup(
        continuous_spread, agent_map=("ddpg", "ddpg", "ddpg"), critic="centralized", learning_starts=8
    )
    assert unit.flavour == "MADDPG"
    experience = collector.collect()
    collector.close()
    experience["agent", keys.VALID][..., 2] = False  # agent_2 absent throughout
    metrics = unit.update(experience, optimizer, PlainStepper())
    assert math.isfinite(metrics["loss_value"])
    stored = unit.replay[:]
    assert stored["agent"].batch_size == (40, 3)
    assert stored["agent", "loss_mask"][:, :2].all() and not stored["agent", "loss_mask"][:, 2].any()
    batch = stored[:8].clone()
    reference = unit.loss(batch.clone())
    batch["next", "agent", "reward"][:, 2] = 1e6  # the absent agent's rows reach no loss term
    perturbed = unit.loss(batch)
    for key in ("loss_value", "loss_actor"):
        assert torch.equal(reference[key], perturbed[key]), key


@pytest.mark.parametrize("critic_value", ["per_agent", "group"])
def test_maddpgs_critic_learns_each_agents_return_or_the_groups_mean(continuous_spread, one_thread, critic_value):
    # Terminal transitions whose rewards differ between agents: a critic with a value per agent learns each
    # agent's reward; one with a value for the group (BenchMARL's shared centralized critic) learns their mean.
    torch.manual_seed(0)
    _, _, collector, unit, _ = setup(
        continuous_spread, agent_map=("ddpg",) * 3, critic="centralized", critic_value=critic_value
    )
    batch = unit.transitions(collector.collect())[:32]
    collector.close()
    after = batch["next", "agent"]
    after["reward"] = torch.tensor([0.0, 1.0, 2.0]).expand(32, 3).unsqueeze(-1).clone()
    after["done"] = torch.ones_like(after["done"])
    after["terminated"] = torch.ones_like(after["terminated"])
    critic = unit.loss.value_network_params.values(True, True)
    optimizer = torch.optim.Adam(list(critic), lr=3e-3)
    for _ in range(300):
        optimizer.zero_grad()
        unit.loss(batch.clone())["loss_value"].backward()
        optimizer.step()
    with torch.no_grad(), unit.loss.value_network_params.to_module(unit.loss.value_network):
        values = unit.loss.value_network(batch.clone())["agent", keys.STATE_ACTION_VALUE].squeeze(-1)
    expected = torch.tensor([0.0, 1.0, 2.0]) if critic_value == "per_agent" else torch.ones(3)
    assert torch.allclose(values.mean(0), expected, atol=0.1), values.mean(0)
    if critic_value == "group":
        assert torch.equal(values[:, 0], values[:, 2])  # one value, given to every agent


def test_a_group_value_needs_a_centralized_critic_and_bad_values_are_named(continuous_spread):
    group = continuous_spread.spec().groups["agent"]
    for policy_class in (DeterministicActorCritic, SACActorCritic):
        with pytest.raises(ValueError, match=r"critic_value: 'group' .* needs critic: centralized; a local critic"):
            policy_class(group, critic="local", critic_value="group")
        with pytest.raises(ValueError, match=r"critic_value: 'shared' is not one of \['per_agent', 'group'\]"):
            policy_class(group, critic="centralized", critic_value="shared")
        values = policy_class(group, hidden_sizes=(16,), critic="centralized", critic_value="group").qvalue
        assert values.module.net[-1].out_features == 1  # one output for the group


def test_maddpg_needs_the_binding_to_control_the_whole_group(continuous_spread):
    group = continuous_spread.spec().groups["agent"]
    table = BindingTable(
        [PolicyBinding("ddpg", class_path="x.y"), PolicyBinding("npc", class_path="x.y", trainable=False)],
        continuous_spread.spec(),
        {"default": ["ddpg", "ddpg", "ddpg"], "per_env": {1: ["npc", "ddpg", "ddpg"]}},
    )
    policy = DeterministicActorCritic(group, critic="centralized")
    with pytest.raises(ValueError, match=r"binding 'ddpg': algorithm DDPG .*per_env\[1\] gives 'agent_0' to 'npc'"):
        DDPG().make_unit_trainer("ddpg", policy, table)
    DDPG().make_unit_trainer("ddpg", DeterministicActorCritic(group, critic="local"), table)


def test_noise_schedule_follows_frames_seen_and_survives_a_state_round_trip(continuous_spread):
    config = DDPG(noise_start=0.5, noise_end=0.1, noise_decay_frames=100)
    assert [config.noise_at(f) for f in (0, 50, 100, 1000)] == pytest.approx([0.5, 0.3, 0.1, 0.1])
    _, policies, collector, unit, optimizer = setup(
        continuous_spread, noise_start=0.5, noise_end=0.1, noise_decay_frames=100, learning_starts=10**6
    )
    assert float(policies["ddpg"].exploration_noise) == 0.5
    metrics = unit.update(collector.collect(), optimizer, PlainStepper())  # 4 envs x 10 steps
    collector.close()
    assert metrics["exploration_noise"] == 0.5  # what the consumed rollout was collected with
    assert float(policies["ddpg"].exploration_noise) == pytest.approx(config.noise_at(40))
    state = unit.state_dict()
    policies["ddpg"].set_exploration_noise(0.0)
    unit.load_state_dict(state)
    torch.testing.assert_close(unit.state_dict(), state, rtol=0, atol=0)
    assert float(policies["ddpg"].exploration_noise) == pytest.approx(config.noise_at(40))


def test_exploration_adds_clipped_gaussian_noise_and_evaluation_is_the_actor():
    group = GroupSpec("walker", ("walker_0",), (0,), (4,), "continuous", action_shape=(2,),
                      action_low=(-1.0, 0.0), action_high=(1.0, 4.0))  # fmt: skip
    policy = DeterministicActorCritic(group, hidden_sizes=(16,), exploration_noise=0.1)
    td = TensorDict({"walker": TensorDict({"observation": torch.randn(4000, 1, 4)}, [4000, 1])}, [])
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        greedy = policy(td.clone())["walker"]
    assert (greedy["action_log_prob"] == 0).all()
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        noisy = policy(td.clone())["walker"]
    action = noisy["action"]
    assert (action[..., 0] >= -1).all() and (action[..., 0] <= 1).all()
    assert (action[..., 1] >= 0).all() and (action[..., 1] <= 4).all()
    noise = action - greedy["action"]
    inside = (action[..., 1] > 0) & (action[..., 1] < 4)  # not clipped
    # Standard deviation: 0.1 x the action range (2 and 4).
    assert 0.17 < float(noise[..., 0][(action[..., 0].abs() < 1)].std()) < 0.23
    assert 0.35 < float(noise[..., 1][inside].std()) < 0.45
    assert torch.isfinite(noisy["action_log_prob"]).all()


def test_ddpg_names_the_binding_the_algorithm_and_the_missing_output(continuous_spread, spread_config):
    discrete = spread_config.spec().groups["agent"]
    continuous = continuous_spread.spec().groups["agent"]
    with pytest.raises(ValueError, match=r"binding 'q': algorithm DDPG needs a deterministic `actor` writing"):
        DDPG().check_policy("q", QNetworkPolicy(discrete))
    with pytest.raises(ValueError, match=r"binding 's': algorithm DDPG needs a deterministic `actor` \(it has a stoch"):
        DDPG().check_policy("s", SACActorCritic(continuous))
    with pytest.raises(ValueError, match=r"binding 'p': algorithm DDPG needs .*a Q critic \(`qvalue` reading"):
        DDPG().check_policy("p", MLPActorCritic(continuous))
    with pytest.raises(ValueError, match=r"binding 'r': algorithm DDPG needs"):
        DDPG().check_policy("r", UniformRandomPolicy(continuous))
    with pytest.raises(ValueError, match=r"DeterministicActorCritic needs continuous \(Box\) actions"):
        DeterministicActorCritic(discrete)
    DDPG().check_policy("d", DeterministicActorCritic(continuous))


@pytest.mark.parametrize("field", ["actor_lr", "critic_lr", "batch_size", "updates_per_iteration", "tau"])
def test_bad_hyperparameters_are_named(field):
    with pytest.raises(ValueError, match=f"algorithm.{field}"):
        DDPG(**{field: 0})


@pytest.mark.slow  # under a minute on the shared 2-core machine (one thread)
def test_maddpg_beats_random_on_continuous_spread(one_thread):
    """MADDPG on simple_spread (N=3, continuous actions) beats uniform-random actions within 40k frames."""
    config = PettingZooEnvConfig(
        env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 25, "continuous_actions": True}, num_envs=32
    )
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding("m", class_path="x.y")], spec, ["m"] * 3)
    policy = DeterministicActorCritic(group, hidden_sizes=(64, 64), critic="centralized")
    algorithm = DDPG(gamma=0.95, tau=0.01, learning_starts=500, updates_per_iteration=16, noise_decay_frames=30_000)
    trainer = IndependentMARLTrainer(table, {"m": policy}, {"m": algorithm})
    optimizers = trainer.make_optimizers()
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy({"m": policy}, table), 25)
    for iteration in range(50):  # 40k frames
        trainer.update(collector.collect(), optimizers, PlainStepper(), iteration=iteration)
    collector.close()
    trained = evaluate_episodes(MultiAgentPolicy({"m": policy}, table), config, 32, seed=123)["m"]["episode_return"]
    baseline_policy = MultiAgentPolicy({"m": UniformRandomPolicy(group, seed=0)}, table)
    baseline = evaluate_episodes(baseline_policy, config, 32, seed=123)["m"]["episode_return"]
    # Random scores about -27 per agent on these seeds; 40k frames of MADDPG reach about -22.
    assert trained > baseline + 3.0, (trained, baseline)
