"""Recurrent policies: rerunning a rollout in sequence mode reproduces what was seen when acting."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from lightmarl import keys
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies.recurrent import RecurrentActorCritic

MEMORY = PettingZooEnvConfig(
    env_fn="lightmarl.envs.testing.memory.parallel_env", env_kwargs={"num_agents": 3, "delay": 2}
)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_sequence_rerun_matches_step_by_step_acting(cell):
    group = MEMORY.spec().groups["agent"]
    policy = RecurrentActorCritic(group, hidden_size=16, cell=cell, layers=2)
    n, t, a = 4, 9, group.num_agents
    observations = torch.randn(n, t, a, *group.observation_shape)
    is_init = torch.zeros(n, t, a, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[1, 4] = True  # env 1 starts a new episode mid-rollout
    is_init[2, 7, 1] = True  # one agent alone restarts
    state = policy.initial_state(n, a) + 0.3  # a state carried over from an earlier rollout
    is_init[3, 0] = False  # env 3 continues its episode: the carried state must be used

    stored_states, step_logits = [], []
    for step in range(t):
        td = TensorDict(
            {
                "agent": {
                    "observation": observations[:, step],
                    keys.IS_INIT: is_init[:, step],
                    keys.RECURRENT_STATE: state,
                }
            },
            batch_size=[n],
        )
        stored_states.append(state)
        policy(td)
        step_logits.append(td["agent", "logits"])
        state = td["agent", keys.NEXT_RECURRENT_STATE]

    rollout = TensorDict(
        {
            "agent": {
                "observation": observations,
                keys.IS_INIT: is_init,
                keys.RECURRENT_STATE: torch.stack(stored_states, dim=1),
                "action": torch.zeros(n, t, a, dtype=torch.int64),
            }
        },
        batch_size=[n, t],
    )
    with policy.sequence_mode():
        rerun = policy.actor.get_dist(rollout).logits
    assert torch.allclose(rerun, torch.stack(step_logits, dim=1).log_softmax(-1), atol=1e-5)


def test_state_carries_information_across_steps():
    group = MEMORY.spec().groups["agent"]
    policy = RecurrentActorCritic(group, hidden_size=8)
    blank = torch.zeros(2, group.num_agents, *group.observation_shape)
    first = blank.clone()
    first[1, :, 0] = 1.0  # env 1 saw a cue, env 0 did not
    state = policy.initial_state(2, group.num_agents)
    for obs in (first, blank):
        td = TensorDict(
            {
                "agent": {
                    "observation": obs,
                    keys.IS_INIT: torch.zeros(2, group.num_agents, dtype=torch.bool),
                    keys.RECURRENT_STATE: state,
                }
            },
            batch_size=[2],
        )
        policy(td)
        state = td["agent", keys.NEXT_RECURRENT_STATE]
    # Same observation now, different past: different action distributions.
    assert not torch.allclose(td["agent", "logits"][0], td["agent", "logits"][1])


def test_recurrent_policy_rejects_continuous_actions():
    group = PettingZooEnvConfig(env_kwargs={"continuous_actions": True}).spec().groups["agent"]
    with pytest.raises(ValueError, match="discrete actions"):
        RecurrentActorCritic(group)
