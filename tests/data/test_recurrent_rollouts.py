"""Recurrent policies in rollouts: the state stored with each row is the one used to act."""

from __future__ import annotations

import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from expectations import assert_finite_metrics
from lightmarl import keys
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, RecurrentActorCritic
from lightmarl.population import BindingTable, PolicyBinding

# 3 agents, episodes of delay + 2 = 4 steps.
MEMORY = PettingZooEnvConfig(
    env_fn="lightmarl.envs.testing.memory.parallel_env", env_kwargs={"num_agents": 3, "delay": 2}, num_envs=3
)


def mixed_population():
    spec = MEMORY.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("rnn", class_path="x.y"), PolicyBinding("ff", class_path="x.y")], spec, ["rnn", "ff", "rnn"]
    )
    policies = {"rnn": RecurrentActorCritic(group, hidden_size=8, cell="lstm"), "ff": MLPActorCritic(group)}
    return table, policies


def test_state_is_stored_reset_at_episode_starts_and_rerun_exactly():
    table, policies = mixed_population()
    collector = RolloutCollector(MEMORY.make_vector(seed=0), MultiAgentPolicy(policies, table), rollout_steps=6)
    collector.collect()  # the second rollout starts mid-episode, from a carried state
    exp = collector.collect()
    rows = exp["agent"]
    assert keys.NEXT_RECURRENT_STATE not in rows.keys()
    is_init = rows[keys.IS_INIT][..., 0]
    done = exp["next", "agent", "done"][..., 0, 0]
    # Episodes are 4 steps: rollout 2 covers steps 6..11, so episodes start at steps 8 (t=2) and 12.
    assert is_init.tolist() == [[False, False, True, False, False, False]] * 3
    assert torch.equal(is_init[:, 1:], done[:, :-1])
    state = rows[keys.RECURRENT_STATE]
    assert state.shape == (3, 6, 3, 2, 1, 8)  # [envs, time, agents, (h, c), layers, hidden]
    assert state[:, 0, [0, 2]].abs().sum() > 0, "the carried state of an episode in progress is stored"
    assert state[:, :, 1].abs().sum() == 0, "the feed-forward binding's rows carry no state"
    # Rerunning whole sequences from the stored state reproduces the collected log-probs.
    with policies["rnn"].sequence_mode(), set_exploration_type(ExplorationType.RANDOM):
        rerun = policies["rnn"].actor.get_dist(exp).log_prob(rows["action"])
    assert torch.allclose(rerun[..., [0, 2]], rows["action_log_prob"][..., [0, 2]], atol=1e-5)


def test_ppo_trains_a_recurrent_binding_on_sequences():
    table, policies = mixed_population()
    collector = RolloutCollector(MEMORY.make_vector(seed=0), MultiAgentPolicy(policies, table), rollout_steps=8)
    trainer = IndependentMARLTrainer(table, policies, {"rnn": PPO(minibatch_size=16), "ff": PPO()})
    before = {k: v.clone() for k, v in policies["rnn"].state_dict().items()}
    metrics = trainer.update(collector.collect(), trainer.make_optimizers(), PlainStepper())
    assert metrics["rnn"]["rows"] == 3 * 8 * 2
    assert_finite_metrics(metrics["rnn"])
    assert any(not torch.equal(v, before[k]) for k, v in policies["rnn"].state_dict().items())


def test_state_restarts_when_the_binding_map_changes():
    table, policies = mixed_population()
    collector = RolloutCollector(MEMORY.make_vector(seed=0), MultiAgentPolicy(policies, table), rollout_steps=3)
    collector.collect()
    assert not collector.collect()["agent"][keys.IS_INIT][:, 0].any()  # mid-episode: state carried on
    table.set_agent_binding_map(["ff", "rnn", "rnn"])
    restarted = collector.collect()["agent"]
    assert restarted[keys.IS_INIT][:, 0].all()
    assert restarted["action_log_prob"].isfinite().all()


def test_recurrent_critic_values_agree_between_stored_states_and_sequence_rerun():
    spec = MEMORY.spec()
    policy = RecurrentActorCritic(spec.groups["agent"], hidden_size=8, cell="gru", critic="recurrent")
    table = BindingTable(None, spec)
    collector = RolloutCollector(MEMORY.make_vector(seed=1), MultiAgentPolicy({"main": policy}, table), rollout_steps=7)
    collector.collect()
    exp = collector.collect()
    with torch.no_grad():
        stepwise = policy.critic(exp.clone())["agent", "state_value"]  # from each row's stored state
        following = policy.critic(exp["next"].clone())["agent", "state_value"]  # from the stored next states
        with policy.sequence_mode():
            rerun = policy.critic(exp.clone())["agent", "state_value"]
    assert torch.allclose(stepwise, rerun, atol=1e-5)
    done = exp["next", "agent", "done"][..., 0, 0]
    for t in range(6):
        same_episode = ~done[:, t]
        assert torch.allclose(following[same_episode, t], stepwise[same_episode, t + 1], atol=1e-5)


def test_ppo_with_a_recurrent_critic_updates_the_shared_memory():
    spec = MEMORY.spec()
    policy = RecurrentActorCritic(spec.groups["agent"], hidden_size=8, critic="recurrent")
    table = BindingTable(None, spec)
    collector = RolloutCollector(MEMORY.make_vector(seed=0), MultiAgentPolicy({"main": policy}, table), rollout_steps=8)
    trainer = IndependentMARLTrainer(table, {"main": policy}, {"main": PPO(minibatch_size=16)})
    rnn_before = policy.core.rnn.weight_hh_l0.clone()
    metrics = trainer.update(collector.collect(), trainer.make_optimizers(), PlainStepper())
    assert torch.isfinite(torch.tensor(metrics["main"]["loss_critic"]))
    assert not torch.equal(policy.core.rnn.weight_hh_l0, rnn_before)
