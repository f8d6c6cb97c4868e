"""SAC UnitTrainer and SACActorCritic: update, replay rows, joint transitions, state, policy checks."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl import keys
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
from lightmarl.algorithms.sac import SAC, SACUnitTrainer
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation import evaluate_episodes
from lightmarl.policies import (
    DeterministicActorCritic,
    MLPActorCritic,
    MultiAgentPolicy,
    SACActorCritic,
    UniformRandomPolicy,
)
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


def setup(config, agent_map=("ppo", "sac", "npc"), critic="local", steps=10, **sac_kwargs):
    """A SAC binding next to a continuous PPO binding and a frozen SAC policy ``npc``."""
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [
            PolicyBinding("ppo", class_path="x.y"),
            PolicyBinding("sac", class_path="x.y"),
            PolicyBinding("npc", class_path="x.y", trainable=False),
        ],
        spec,
        list(agent_map),
    )
    policies = {
        "ppo": MLPActorCritic(group, critic="local"),
        "sac": SACActorCritic(group, hidden_sizes=(32, 32), critic=critic),
        "npc": SACActorCritic(group, hidden_sizes=(32, 32)),
    }
    policies["npc"].requires_grad_(False)
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy(policies, table), steps)
    kwargs = {"batch_size": 16, "learning_starts": 16, "updates_per_iteration": 1, **sac_kwargs}
    trainer = IndependentMARLTrainer(table, policies, {"ppo": PPO(minibatch_size=8), "sac": SAC(**kwargs)})
    unit = trainer.unit_trainers["sac"]
    assert isinstance(unit, SACUnitTrainer)
    return table, policies, collector, unit, unit.make_optimizer()


def test_one_update_changes_the_sac_binding_only_and_the_loss_is_finite(continuous_spread):
    _, policies, collector, unit, optimizer = setup(continuous_spread)
    before = {b: copy.deepcopy(p.state_dict()) for b, p in policies.items()}
    target_before = [t.clone() for t in unit.target_parameters()]
    alpha_before = unit.alpha
    metrics = unit.update(collector.collect(), optimizer, PlainStepper())
    collector.close()
    assert metrics["grad_steps"] == 1 and unit.flavour == "ISAC"
    for name in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
        assert math.isfinite(metrics[name]), name
    changed = {k for k, v in policies["sac"].state_dict().items() if not torch.equal(v, before["sac"][k])}
    assert any(k.startswith("actor.") for k in changed) and any(k.startswith("qvalue_params.") for k in changed)
    for binding in ("ppo", "npc"):
        for key, value in policies[binding].state_dict().items():
            assert torch.equal(value, before[binding][key]), (binding, key)
    assert unit.alpha != alpha_before  # the temperature is tuned too
    # The target critics are separate copies that move by the soft update only.
    online = list(policies["sac"].qvalue_params.values(True, True))
    assert len(online) == len(target_before)
    tau = unit.config.tau
    for t, old, p in zip(unit.target_parameters(), target_before, online):
        assert t.data_ptr() != p.data_ptr()
        assert torch.allclose(t, (1 - tau) * old + tau * p.detach(), atol=1e-6)


def test_replay_holds_only_the_bindings_valid_rows(continuous_spread):
    table, _, collector, unit, optimizer = setup(continuous_spread, learning_starts=10**6)
    experience = collector.collect()
    collector.close()
    experience["agent", keys.VALID][0, 3, 1] = False  # a SAC row where the agent was absent
    metrics = unit.update(experience, optimizer, PlainStepper())
    assert len(unit.replay) == metrics["rows"] == 4 * 10 - 1 and "loss_actor" not in metrics  # still filling
    stored = unit.replay[:]
    rows = stored["agent"]
    assert (rows[keys.BINDING_ID] == table.index["sac"]).all()
    assert rows[keys.AGENT_ID].unique().tolist() == [1]
    assert rows[keys.VALID].all() and rows[keys.IS_TRAINABLE_AGENT].all()
    expected = experience["next", "agent", "reward"][..., 1, :][experience["agent", keys.VALID][..., 1]]
    assert torch.equal(stored["next", "agent", "reward"], expected)
    assert rows[keys.ACTION].shape == (39, 5)


def test_centralized_critic_stores_joint_steps_and_learns_from_the_masked_rows_only(continuous_spread):
    _, _, collector, unit, optimizer = setup(
        continuous_spread, agent_map=("sac", "sac", "sac"), critic="centralized", learning_starts=10**6
    )
    assert unit.flavour == "MASAC"
    experience = collector.collect()
    collector.close()
    experience["agent", keys.VALID][0, 3, 1] = False
    unit.update(experience, optimizer, PlainStepper())
    stored = unit.replay[:]
    assert stored.batch_size == (4 * 10,) and stored["agent"].batch_size == (40, 3)
    mask = stored["agent", "loss_mask"]
    assert int((~mask).sum()) == 1 and not bool(mask[3, 1])  # env 0, step 3 is the 4th stored step
    # A masked row's reward does not reach any loss term.
    batch = stored[:8].clone()
    torch.manual_seed(1)
    reference = unit.loss(batch.clone())
    batch["next", "agent", "reward"][3, 1] = 1e6
    torch.manual_seed(1)
    perturbed = unit.loss(batch)
    for key in ("loss_qvalue", "loss_actor", "loss_alpha"):
        assert torch.equal(reference[key], perturbed[key]), key


def test_centralized_critic_values_every_agent_and_needs_the_whole_group(continuous_spread):
    group = continuous_spread.spec().groups["agent"]
    policy = SACActorCritic(group, hidden_sizes=(16,), critic="centralized")
    td = TensorDict(
        {"agent": TensorDict({"observation": torch.randn(7, 3, 18), "action": torch.rand(7, 3, 5)}, [7, 3])}, [7]
    )
    values = policy.state_action_values(td)
    assert values.shape == (2, 7, 3, 1)
    assert not torch.allclose(values[0], values[1])  # two critics with their own weights
    assert not torch.allclose(values[..., 0, :], values[..., 1, :])  # one value per agent
    table = BindingTable(
        [PolicyBinding("sac", class_path="x.y"), PolicyBinding("npc", class_path="x.y", trainable=False)],
        continuous_spread.spec(),
        ["sac", "sac", "npc"],
    )
    with pytest.raises(ValueError, match=r"binding 'sac': algorithm SAC with a centralized critic needs .* 'agent_2'"):
        SAC().make_unit_trainer("sac", policy, table)


def test_state_round_trip_restores_temperature_counters_and_weights(continuous_spread):
    _, policies, collector, unit, optimizer = setup(continuous_spread)
    unit.update(collector.collect(), optimizer, PlainStepper())
    collector.close()
    state = unit.state_dict()
    assert state["grad_steps"] == 1 and state["log_alpha"] != 0.0
    group = continuous_spread.spec().groups["agent"]
    fresh_policy = SACActorCritic(group, hidden_sizes=(32, 32))
    fresh_policy.load_state_dict(policies["sac"].state_dict())
    fresh = SAC().make_unit_trainer("sac", fresh_policy, unit.table)
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh.state_dict(), state, rtol=0, atol=0)
    assert fresh.alpha == pytest.approx(unit.alpha)
    td = TensorDict(
        {"agent": TensorDict({"observation": torch.randn(5, 3, 18), "action": torch.rand(5, 3, 5)}, [5, 3])}, [5]
    )
    assert torch.equal(fresh_policy.state_action_values(td), policies["sac"].state_action_values(td))
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        assert torch.equal(fresh_policy(td.clone())["agent", "action"], policies["sac"](td.clone())["agent", "action"])


def test_actions_stay_in_bounds_sampled_while_exploring_and_fixed_when_evaluating():
    from lightmarl.envs.spec import GroupSpec

    group = GroupSpec("walker", ("walker_0",), (0,), (4,), "continuous", action_shape=(2,),
                      action_low=(-1.0, 0.0), action_high=(1.0, 2.0))  # fmt: skip
    policy = SACActorCritic(group, hidden_sizes=(16,))
    td = TensorDict({"walker": TensorDict({"observation": torch.randn(500, 1, 4)}, [500, 1])}, [])
    with set_exploration_type(ExplorationType.RANDOM):
        first = policy(td.clone())["walker"]
        second = policy(td.clone())["walker", "action"]
    action = first["action"]
    assert action.shape == (500, 1, 2) and first["action_log_prob"].shape == (500, 1)
    assert (action[..., 0] >= -1).all() and (action[..., 0] <= 1).all()
    assert (action[..., 1] >= 0).all() and (action[..., 1] <= 2).all()
    assert torch.isfinite(first["action_log_prob"]).all() and not torch.equal(action, second)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        greedy = policy(td.clone())["walker", "action"]
        assert torch.equal(greedy, policy(td.clone())["walker", "action"])


def test_sac_names_the_binding_the_algorithm_and_the_missing_output(continuous_spread, spread_config):
    discrete = spread_config.spec().groups["agent"]
    continuous = continuous_spread.spec().groups["agent"]
    with pytest.raises(ValueError, match=r"binding 'ppo_policy': algorithm SAC needs Q critics \(`qvalue` writing"):
        SAC().check_policy("ppo_policy", MLPActorCritic(discrete))
    with pytest.raises(ValueError, match=r"binding 'd': algorithm SAC needs a stochastic `actor`.* and Q critics"):
        SAC().check_policy("d", DeterministicActorCritic(continuous))
    with pytest.raises(ValueError, match=r"binding 'r': algorithm SAC needs"):
        SAC().check_policy("r", UniformRandomPolicy(continuous))
    with pytest.raises(
        ValueError, match=r"SACActorCritic needs continuous \(Box\) actions; group 'agent' has discrete"
    ):
        SACActorCritic(discrete)
    SAC().check_policy("s", SACActorCritic(continuous))


@pytest.mark.parametrize("field", ["actor_lr", "critic_lr", "alpha_lr", "batch_size", "updates_per_iteration", "tau"])
def test_bad_hyperparameters_are_named(field):
    with pytest.raises(ValueError, match=f"algorithm.{field}"):
        SAC(**{field: 0})


@pytest.mark.slow  # about a minute on the shared 2-core machine (one thread)
def test_isac_beats_random_on_continuous_spread(one_thread):
    """ISAC on simple_spread (N=3, continuous actions) beats uniform-random actions within 32k frames."""
    config = PettingZooEnvConfig(
        env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 25, "continuous_actions": True}, num_envs=32
    )
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding("s", class_path="x.y")], spec, ["s"] * 3)
    policy = SACActorCritic(group, hidden_sizes=(64, 64))
    algorithm = SAC(
        actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3, gamma=0.95, tau=0.01, alpha_init=0.01, updates_per_iteration=32
    )
    trainer = IndependentMARLTrainer(table, {"s": policy}, {"s": algorithm})
    optimizers = trainer.make_optimizers()
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy({"s": policy}, table), 25)
    for iteration in range(40):  # 32k frames
        trainer.update(collector.collect(), optimizers, PlainStepper(), iteration=iteration)
    collector.close()
    trained = evaluate_episodes(MultiAgentPolicy({"s": policy}, table), config, 32, seed=123)["s"]["episode_return"]
    baseline_policy = MultiAgentPolicy({"s": UniformRandomPolicy(group, seed=0)}, table)
    baseline = evaluate_episodes(baseline_policy, config, 32, seed=123)["s"]["episode_return"]
    # Random scores about -27 per agent on these seeds; 32k frames of ISAC reach about -21.
    assert trained > baseline + 3.0, (trained, baseline)


@pytest.mark.parametrize("clip_each_network", [False, True])
def test_clip_each_network_clips_actor_critics_and_temperature_apart(continuous_spread, clip_each_network):
    _, _, collector, unit, optimizer = setup(continuous_spread, max_grad_norm=1e-3, clip_each_network=clip_each_network)
    options_seen, clipped_norms = [], []
    zero_grad = optimizer.zero_grad

    def read_clipped_norms_then_zero(set_to_none=True):
        # step_finite zeroes the gradients after its step: read each group's clipped norm first.
        for group in optimizer.param_groups:
            grads = [p.grad for p in group["params"] if p.grad is not None]
            clipped_norms.append(float(torch.nn.utils.get_total_norm(grads)))
        zero_grad(set_to_none=set_to_none)

    optimizer.zero_grad = read_clipped_norms_then_zero

    class RecordingStepper(PlainStepper):
        def step(self, optimizer, parameters, max_grad_norm, **options):
            options_seen.append(options)
            return super().step(optimizer, parameters, max_grad_norm, **options)

    unit.update(collector.collect(), optimizer, RecordingStepper())
    collector.close()
    # Passed only when asked for, so that steppers written before the option keep working.
    assert options_seen == [{"clip_each_group": True} if clip_each_network else {}]
    assert len(clipped_norms) == 3  # actor, critics, temperature
    if clip_each_network:
        assert clipped_norms == pytest.approx([1e-3] * 3, rel=1e-3)
    else:
        assert math.hypot(*clipped_norms) == pytest.approx(1e-3, rel=1e-3)
