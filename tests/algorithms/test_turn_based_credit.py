"""Turn-based credit: rewards on the other seat's turn, and across rollout boundaries, reach the move that earned them.

:class:`~lightmarl.envs.testing.ReplyRewardEnv` pays each move +1 (action 1, or a positive action)
or -1 on the *other* seat's next turn; the game's last move is never paid, and the second seat
is paid ``OPENING`` before its first move (its first move must get it). With ``rollout_steps=1``
every reply falls right after a rollout boundary. Each learner family must
learn from transitions whose reward is that pay and whose next observation is the agent's next
own turn (or the game's end); learners that read joint transitions refuse turn-based envs.
"""

from __future__ import annotations

import io

import pytest
import torch

from lightmarl import keys
from lightmarl.algorithms import DDPG, DQN, PPO, QMIX, SAC, VDN, IndependentMARLTrainer, PlainStepper
from lightmarl.algorithms.gae import valid_row_gae
from lightmarl.algorithms.open_transitions import OpenTransitions, agent_transitions
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import DeterministicActorCritic, MLPActorCritic, MultiAgentPolicy, SACActorCritic
from lightmarl.policies.qnet import QNetworkPolicy
from lightmarl.population import BindingTable, PolicyBinding

MOVES = 5  # turns 0..4: player_0 moves at 0, 2, 4; player_1 at 1, 3; the move at turn 4 is never paid
OPENING = 0.5  # paid to player_1 on turn 0, before its first move: its move at turn 1 gets it


def reply_config(continuous: bool = False, num_envs: int = 2) -> PettingZooEnvConfig:
    return PettingZooEnvConfig(
        env_fn="lightmarl.envs.testing.ReplyRewardEnv",
        env_kwargs={"moves": MOVES, "continuous": continuous, "opening_pay": OPENING},
        num_envs=num_envs,
    )


def build(algorithm, policy_fn, rollout_steps: int, continuous: bool = False, seats=("main", "main")):
    config = reply_config(continuous)
    spec = config.spec()
    group = spec.groups["player"]
    bindings = [PolicyBinding("main", class_path="x.y")]
    policies = {"main": policy_fn(group)}
    if "npc" in seats:
        bindings.append(PolicyBinding("npc", class_path="x.y", trainable=False))
        policies["npc"] = policy_fn(group)
    table = BindingTable(bindings, spec, list(seats))
    torch.manual_seed(0)
    collector = RolloutCollector(config.make_vector(seed=0), MultiAgentPolicy(policies, table), rollout_steps)
    trainer = IndependentMARLTrainer(table, policies, {"main": algorithm})
    return table, collector, trainer


def good(action: torch.Tensor) -> torch.Tensor:
    """Whether a move is paid +1 (action 1, or a positive continuous action)."""
    return action.reshape(action.shape[0], -1)[:, 0] > 0


def turn_of(observation: torch.Tensor) -> torch.Tensor:
    """The turn number from the one-hot observation."""
    return observation.reshape(observation.shape[0], -1).argmax(-1)


def expected_reward(action: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """What the move at ``turn`` earns: +1 / -1 on the reply (none for the last move), plus the opening pay at turn 1."""
    paid = torch.where(good(action), 1.0, -1.0) * (turn < MOVES - 1)
    return paid + OPENING * (turn == 1)


# -- the grouping rule --------------------------------------------------------------------------


def test_rows_before_an_agents_first_move_go_to_its_first_transition_in_turn_based_envs():
    # The agent acts at t = 1 and 3; rows 0 (before its first move) and 2 pay it; its episode ends
    # (done) at t = 4; row 5 belongs to its next episode, where it has not moved yet (pending).
    valid = torch.tensor([[0, 1, 0, 1, 0, 0]], dtype=torch.bool)
    done = torch.tensor([[0, 0, 0, 0, 1, 0]], dtype=torch.bool)
    reward = torch.tensor([[2.0, 0, 1, 0, 5, 7]])
    turns = agent_transitions(valid, done, turn_based=True)
    assert turns.slot.tolist() == [[0, 0, 0, 1, 1, -1]]
    assert turns.sum_rows(torch.where(turns.slot >= 0, reward, 0)).tolist() == [3.0, 5.0]
    assert turns.end.tolist() == [2, 4] and not turns.open.any()
    assert turns.pending.tolist() == [[False] * 5 + [True]]
    # In a parallel env the rows before the agent's move are an absent agent's: they carry nothing.
    parallel = agent_transitions(valid, done, turn_based=False)
    assert parallel.slot.tolist() == [[-1, 0, 0, 1, 1, -1]] and not parallel.pending.any()


def test_a_transition_without_its_reply_is_open_at_the_rollouts_end():
    valid = torch.tensor([[1, 0, 1, 0], [1, 0, 1, 0]], dtype=torch.bool)
    done = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1]], dtype=torch.bool)
    turns = agent_transitions(valid, done, turn_based=True)
    assert turns.open.tolist() == [False, True, False, False]  # the second sequence's game ended
    assert turns.fresh().tolist() == [[False, False, True, True], [False] * 4]


def test_gae_credits_a_reward_before_the_first_move_in_turn_based_envs():
    def col(values, dtype=torch.float32):
        return torch.tensor(values, dtype=dtype).view(1, -1, 1, 1)

    valid = col([0, 1, 0], torch.bool).squeeze(-1)
    zeros, done = col([0.0, 0, 0]), col([0, 0, 1], torch.bool)
    reward = col([1.0, 0, 0.5])
    advantage, _ = valid_row_gae(1.0, 1.0, zeros, zeros, reward, done, done, valid, turn_based=True)
    assert advantage.flatten().tolist() == [0.0, 1.5, 0.0]
    advantage, _ = valid_row_gae(1.0, 1.0, zeros, zeros, reward, done, done, valid)
    assert advantage.flatten().tolist() == [0.0, 0.5, 0.0]  # parallel env: row 0 is an absent agent's


# -- PPO ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rollout_steps", [1, 3, 16])
def test_ppo_credits_the_reply_to_the_move_also_across_rollout_boundaries(rollout_steps):
    # gamma ~ 0: a row's value target is its transition's reward (TorchRL's GAE needs gamma * lambda > 0).
    algorithm = PPO(gamma=1e-3, lmbda=1e-3, lr=1e-9, epochs=1, minibatch_size=2 * rollout_steps)
    _table, collector, trainer = build(algorithm, lambda g: MLPActorCritic(g, hidden_sizes=(8,)), rollout_steps)
    unit = trainer.unit_trainers["main"]
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    losses = unit.minibatch_losses

    def record(batch, **kwargs):
        rows = batch.get("player")
        mask = rows.get(keys.LOSS_MASK)
        seen.append(
            (rows.get(keys.ACTION)[mask], turn_of(rows.get(keys.OBSERVATION)[mask]), rows.get(keys.VALUE_TARGET)[mask])
        )
        return losses(batch, **kwargs)

    unit.minibatch_losses = record
    optimizers = trainer.make_optimizers()
    for _ in range(48 // rollout_steps):
        trainer.update(collector.collect(), optimizers, PlainStepper())
    action, turn, target = (torch.cat(x) for x in zip(*seen, strict=True))
    assert len(action) >= 2 * (48 // MOVES) - 4  # every closed move of both seats
    assert (turn == 1).any() and (turn == MOVES - 1).any()
    assert torch.allclose(target.flatten(), expected_reward(action, turn), atol=1e-2)


def test_ppo_learns_each_move_once_and_not_the_open_one():
    _table, collector, trainer = build(PPO(minibatch_size=2), lambda g: MLPActorCritic(g, hidden_sizes=(8,)), 1)
    optimizers = trainer.make_optimizers()
    rows = [
        trainer.update(collector.collect(), optimizers, PlainStepper()).get("main", {}).get("rows", 0.0)
        for _ in range(20)
    ]
    # 2 copies x 20 turns = 40 moves; those still open after the last rollout (at most 2 per copy) are not in.
    assert 36 <= sum(rows) <= 40
    assert rows[0] == 0  # the first moves wait for their reply


def test_open_transitions_survive_a_checkpoint_of_the_replay_state():
    _table, collector, trainer = build(PPO(minibatch_size=2), lambda g: MLPActorCritic(g, hidden_sizes=(8,)), 1)
    unit = trainer.unit_trainers["main"]
    optimizers = trainer.make_optimizers()
    trainer.update(collector.collect(), optimizers, PlainStepper())
    state = unit.replay_state_dict()
    assert state and unit.rollout_rows.open_transitions.carried_steps == 1
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh = OpenTransitions("player", 0)
    fresh.load_state_dict(torch.load(buffer, weights_only=True)["open_transitions"])
    assert fresh.tail is not None
    assert torch.equal(
        fresh.tail.get(("player", keys.OBSERVATION)),
        unit.rollout_rows.open_transitions.tail.get(("player", keys.OBSERVATION)),
    )


# -- off-policy: replay entries are written when the transition closes --------------------------


def replay_entries(unit) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    stored = unit.replay.storage[: len(unit.replay)]
    return (
        stored.get(("player", keys.ACTION)),
        turn_of(stored.get(("player", keys.OBSERVATION))),
        stored.get(("next", "player", keys.REWARD)).flatten(),
        turn_of(stored.get(("next", "player", keys.OBSERVATION))),
        stored.get(("next", "player", keys.DONE)).flatten(),
    )


def check_replay(unit, min_entries: int) -> None:
    action, turn, reward, next_turn, done = replay_entries(unit)
    assert len(action) >= min_entries
    assert torch.equal(reward, expected_reward(action, turn))
    # The next observation is the agent's next own turn, two turns on, or the game's last one at its end.
    assert torch.equal(next_turn[~done], turn[~done] + 2)
    assert (turn[done] >= MOVES - 2).all()


OFF_POLICY = {
    "dqn": (
        lambda: DQN(batch_size=4, learning_starts=4, updates_per_iteration=1),
        lambda g: QNetworkPolicy(g, hidden_sizes=(8,)),
        False,
    ),
    "sac": (
        lambda: SAC(batch_size=4, learning_starts=4, updates_per_iteration=1),
        lambda g: SACActorCritic(g, hidden_sizes=(8,)),
        True,
    ),
    "ddpg": (
        lambda: DDPG(batch_size=4, learning_starts=4, updates_per_iteration=1),
        lambda g: DeterministicActorCritic(g, hidden_sizes=(8,)),
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(OFF_POLICY))
@pytest.mark.parametrize("rollout_steps", [1, 4])
def test_off_policy_replay_gets_the_reply_and_the_next_own_turn(name, rollout_steps):
    algorithm, policy_fn, continuous = OFF_POLICY[name]
    _table, collector, trainer = build(algorithm(), policy_fn, rollout_steps, continuous)
    optimizers = trainer.make_optimizers()
    for _ in range(40 // rollout_steps):
        trainer.update(collector.collect(), optimizers, PlainStepper())
    check_replay(trainer.unit_trainers["main"], min_entries=2 * 40 - 8)


def test_dqn_against_a_frozen_seat_gets_its_own_replies_only():
    algorithm, policy_fn, _ = OFF_POLICY["dqn"]
    _table, collector, trainer = build(algorithm(), policy_fn, 1, seats=("main", "npc"))
    optimizers = trainer.make_optimizers()
    for _ in range(30):
        trainer.update(collector.collect(), optimizers, PlainStepper())
    unit = trainer.unit_trainers["main"]
    check_replay(unit, min_entries=10)
    assert (replay_entries(unit)[1] % 2 == 0).all()  # player_0's turns only


@pytest.mark.parametrize("algorithm", [QMIX, VDN])
def test_value_decomposition_refuses_turn_based_envs(algorithm):
    with pytest.raises(ValueError, match="turn-based env"):
        build(algorithm(), lambda g: QNetworkPolicy(g, hidden_sizes=(8,)), 1)


def test_a_centralized_off_policy_critic_refuses_turn_based_envs():
    with pytest.raises(ValueError, match="joint transitions"):
        build(SAC(), lambda g: SACActorCritic(g, hidden_sizes=(8,), critic="centralized"), 1, continuous=True)
