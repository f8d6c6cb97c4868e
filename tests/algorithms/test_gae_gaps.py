"""GAE over each agent's own valid rows (:func:`lightmarl.algorithms.gae.valid_row_gae`).

With every row valid it is TorchRL's GAE, bit for bit; with gaps (turn-based envs, agents that
left) rewards and episode ends on the gaps belong to the agent's preceding turn.
"""

from __future__ import annotations

import pytest
import torch
from torchrl.objectives.value.functional import vec_generalized_advantage_estimate

from lightmarl import keys
from lightmarl.algorithms import PPO
from lightmarl.algorithms.gae import valid_row_gae
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, RecurrentActorCritic
from lightmarl.population import BindingTable, PolicyBinding


def column(values, dtype=torch.float32) -> torch.Tensor:
    """One sequence ``[1 env, T, 1 agent, 1]``."""
    return torch.tensor(values, dtype=dtype).view(1, -1, 1, 1)


def gapped_sequence() -> tuple[torch.Tensor, ...]:
    """``valid, value, next_value, reward, done`` of one agent in a turn-based env.

    The agent acts at t = 0, 2, 5, 6, 7. A reward arrives on its gap at t = 1; its episode ends
    (terminated) on the gap at t = 3, where a reward also arrives; the reward at t = 4 (its next
    episode, before its first turn there) belongs to no transition of it. t = 7 is the last
    row: it bootstraps from the value of the agent's next observation there. Transitions (reward,
    next value): t0 (0.5 + 1, V'1 = 6), t2 (0 - 2, terminated), t5 (0.25, 7.5), t6 (0, 7), t7 (1, 8).
    """
    valid = column([1, 0, 1, 0, 0, 1, 1, 1], torch.bool).squeeze(-1)
    value = column([1.0, 0, 2.0, 0, 0, 3.0, 4.0, 5.0])
    next_value = column([0, 6.0, 0, 99.0, 0, 7.5, 7.0, 8.0])
    reward = column([0.5, 1.0, 0, -2.0, 100.0, 0.25, 0, 1.0])
    done = column([0, 0, 0, 1, 0, 0, 0, 0], torch.bool)
    return valid, value, next_value, reward, done


def test_all_valid_rows_give_torchrls_gae_exactly():
    torch.manual_seed(0)
    shape = (3, 11, 4, 1)  # envs, time, agents, 1
    value, next_value, reward = torch.randn(shape), torch.randn(shape), torch.randn(shape)
    done = torch.rand(shape) < 0.25
    terminated = done & (torch.rand(shape) < 0.5)
    valid = torch.ones(shape[:-1], dtype=torch.bool)
    advantage, target = valid_row_gae(0.9, 0.8, value, next_value, reward, done, terminated, valid, time_dim=1)
    expected_advantage, expected_target = vec_generalized_advantage_estimate(
        0.9, 0.8, value, next_value, reward, done, terminated, time_dim=1
    )
    assert torch.equal(advantage, expected_advantage) and torch.equal(target, expected_target)


def test_a_hand_computed_sequence_with_gaps():
    gamma, lmbda = 0.5, 0.5
    valid, value, next_value, reward, done = gapped_sequence()
    advantage, target = valid_row_gae(gamma, lmbda, value, next_value, reward, done, done, valid)
    a7 = 1 + gamma * 8 - 5
    a6 = 0 + gamma * 7 - 4 + gamma * lmbda * a7
    a5 = 0.25 + gamma * 7.5 - 3 + gamma * lmbda * a6
    a2 = -2 - 2.0
    a0 = 1.5 + gamma * 6 - 1 + gamma * lmbda * a2
    expected = torch.tensor([a0, 0, a2, 0, 0, a5, a6, a7])
    assert torch.allclose(advantage.flatten(), expected)
    rows = valid.flatten()
    assert torch.allclose(target.flatten()[rows], (expected + value.flatten())[rows])
    assert torch.equal(target.flatten()[~rows], value.flatten()[~rows])


@pytest.mark.parametrize(("gamma", "lmbda"), [(0.0, 0.95), (0.5, 0.0), (0.0, 0.0)])
def test_a_zero_decay_gives_the_one_step_td_error(gamma, lmbda):
    # TorchRL's vectorized estimator fails when gamma * lmbda is 0 (contextual bandits, gamma 0;
    # TD(0) advantages, lmbda 0): each transition's advantage is then its own TD error.
    valid, value, next_value, reward, done = gapped_sequence()
    advantage, target = valid_row_gae(gamma, lmbda, value, next_value, reward, done, done, valid)
    expected = torch.tensor(
        [1.5 + gamma * 6 - 1, 0, -2 - 2.0, 0, 0, 0.25 + gamma * 7.5 - 3, gamma * 7 - 4, 1 + gamma * 8 - 5]
    )
    assert torch.allclose(advantage.flatten(), expected)
    assert torch.allclose(target.flatten(), torch.where(valid.flatten(), expected + value.flatten(), value.flatten()))


def test_rows_after_an_agent_left_carry_no_signal_and_no_nan():
    # Parallel-env dead agent: valid until it terminates at t = 2, absent until its env copy
    # resets at t = 5. Garbage on the absent rows (NaN, huge values) must change nothing.
    valid = column([1, 1, 1, 0, 0, 1, 1], torch.bool).squeeze(-1)
    done = column([0, 0, 1, 0, 0, 0, 0], torch.bool)
    value, next_value = column([1.0, 2, 3, 0, 0, 4, 5]), column([2.0, 3, 0, 0, 0, 5, 6])
    reward = column([1.0, 1, 1, 0, 0, 1, 1])
    clean = valid_row_gae(0.9, 0.9, value, next_value, reward, done, done, valid)
    absent = ~valid.unsqueeze(-1)
    garbage = [x.clone() for x in (value, next_value, reward)]
    for x in garbage:
        x[absent] = float("nan")
    garbage[2][0, 4, 0, 0] = 1e9
    dirty = valid_row_gae(0.9, 0.9, *garbage, done, done, valid)
    assert torch.equal(clean[0], dirty[0])
    assert torch.equal(clean[1][valid], dirty[1][valid])
    assert torch.isfinite(dirty[0]).all()
    # And it is exactly per-episode GAE over the valid rows alone.
    rows = valid.flatten()
    expected, _ = vec_generalized_advantage_estimate(
        0.9, 0.9, value[:, rows], next_value[:, rows], reward[:, rows], done[:, rows], done[:, rows], time_dim=1
    )
    assert torch.allclose(clean[0][:, rows], expected)


def test_sequences_without_any_valid_row_get_nothing():
    valid = torch.zeros(2, 5, 3, dtype=torch.bool)
    valid[0, :, 1] = True
    ones = torch.ones(2, 5, 3, 1)
    advantage, target = valid_row_gae(0.99, 0.95, ones, ones, ones, ones.bool(), ones.bool(), valid)
    assert not advantage[~valid].any() and torch.equal(target[~valid], ones[~valid])
    assert torch.allclose(advantage[valid], torch.zeros(5))  # r + 0 - V = 0 with every row terminated


SPREAD = PettingZooEnvConfig(
    env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 2, "max_cycles": 6}, num_envs=3
)


@pytest.mark.parametrize("critic", ["local", "centralized", "recurrent"])
def test_the_ppo_trainer_matches_torchrls_gae_on_a_parallel_env_rollout(critic):
    spec = SPREAD.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    torch.manual_seed(0)
    if critic == "recurrent":
        policy = RecurrentActorCritic(group, hidden_size=16, critic="recurrent")
    else:
        policy = MLPActorCritic(group, hidden_sizes=(16,), critic=critic)
    # 10 steps: episodes of 6 end (truncated) inside the rollout.
    data = RolloutCollector(SPREAD.make_vector(seed=0), MultiAgentPolicy({"main": policy}, table), 10).collect()
    assert data["agent", keys.VALID].all() and data["next", "agent", keys.DONE].any()
    trainer = PPO(gamma=0.9, lmbda=0.8).make_unit_trainer("main", policy, table)
    ours, theirs = data.clone(), data.clone()
    with torch.no_grad():
        trainer.estimate_advantages(ours)
        trainer.loss.value_estimator(theirs)
    for key in ("advantage", "value_target"):
        assert torch.allclose(ours["agent", key], theirs["agent", key], atol=1e-6), key


@pytest.mark.parametrize("bootstrap_truncated", [True, False])
def test_bootstrap_truncated_decides_whether_ppo_bootstraps_a_cut_off_episode(bootstrap_truncated):
    spec = SPREAD.spec()
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    torch.manual_seed(0)
    policy = MLPActorCritic(spec.groups["agent"], hidden_sizes=(16,))
    # simple_spread never terminates: its episode ends (max_cycles 6, inside 10 steps) are truncations.
    data = RolloutCollector(SPREAD.make_vector(seed=0), MultiAgentPolicy({"main": policy}, table), 10).collect()
    after = data["next", "agent"]
    assert after[keys.DONE].any() and not after[keys.TERMINATED].any()
    trainer = PPO(gamma=0.9, lmbda=0.0, bootstrap_truncated=bootstrap_truncated).make_unit_trainer(
        "main", policy, table
    )
    with torch.no_grad():
        trainer.estimate_advantages(data)
        value, next_value = (
            data["agent", keys.STATE_VALUE],
            trainer.loss.value_estimator.value_network(data["next"].clone())["agent", keys.STATE_VALUE],
        )
    ends = after[keys.DONE]
    # lmbda 0: each advantage is its TD error; at the cut-off ends it bootstraps only when asked to.
    bootstrap = 0.9 * next_value if bootstrap_truncated else torch.zeros_like(next_value)
    expected = after[keys.REWARD] + bootstrap - value
    assert torch.allclose(data["agent", keys.ADVANTAGE][ends], expected[ends], atol=1e-5)
