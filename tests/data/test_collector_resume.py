"""A collector restored from its state_dict goes on with exactly the experience of the one it was taken from.

Env copies are mid-episode when the state is taken: each is reset for its episode in flight
(per-episode seeds) and fast-forwarded through that episode's actions. Checked in process and with worker
processes (phased too), through transforms with per-copy memory, for a turn-based env and with
recurrent states; and an env that is not deterministic given seed and actions is reported.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from pettingzoo.utils.env import ParallelEnv

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.layout import episode_seed
from lightmarl.envs.transforms import FrameStack, ObservationNorm, RewardNorm
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, RecurrentActorCritic
from lightmarl.population import BindingTable, PolicyBinding

SPREAD = "mpe2.simple_spread_v3.parallel_env"


def _collector(config: PettingZooEnvConfig, recurrent: bool = False, steps: int = 7) -> RolloutCollector:
    spec = config.spec()
    (group,) = spec.groups.values()
    torch.manual_seed(0)  # the same policy weights in every collector
    policy = RecurrentActorCritic(group, hidden_size=8) if recurrent else MLPActorCritic(group)
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    return RolloutCollector(config.make_vector(seed=3), MultiAgentPolicy({"main": policy}, table), steps)


def _through_disk(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _continued_and_resumed(config: PettingZooEnvConfig, recurrent: bool = False, before: int = 3, after: int = 3):
    """(experience of the original after its state was taken, of a collector restored from that state, warnings)."""
    original = _collector(config, recurrent)
    try:
        for _ in range(before):
            original.collect()
        state = _through_disk(original.state_dict())
        rng = torch.get_rng_state()
        continued = [original.collect() for _ in range(after)]
    finally:
        original.close()
    resumed = _collector(config, recurrent)
    try:
        warnings = resumed.load_state_dict(state)
        torch.set_rng_state(rng)
        resumed_rollouts = [resumed.collect() for _ in range(after)]
        assert resumed.episode_summary() == original.episode_summary()
    finally:
        resumed.close()
    return continued, resumed_rollouts, warnings


def _assert_same(continued, resumed_rollouts) -> None:
    for a, b in zip(continued, resumed_rollouts):
        assert sorted(a.keys(True, True), key=str) == sorted(b.keys(True, True), key=str)
        for key in a.keys(True, True):
            assert torch.equal(a.get(key), b.get(key)), key


@pytest.mark.parametrize(
    "config",
    [
        PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 9}, num_envs=3),
        PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 2, "max_cycles": 9}, num_envs=4, num_workers=2),
        PettingZooEnvConfig(
            env_fn=SPREAD, env_kwargs={"N": 2, "max_cycles": 9}, num_envs=4, num_workers=1, overlap=True
        ),
        PettingZooEnvConfig(
            env_fn=SPREAD,
            env_kwargs={"N": 2, "max_cycles": 9},
            num_envs=3,
            transforms=[FrameStack(num_frames=3), ObservationNorm(), RewardNorm()],
        ),
        PettingZooEnvConfig(env_fn="pettingzoo.classic.tictactoe_v3.env", num_envs=3),
    ],
    ids=["in-process", "workers", "workers-phased", "transforms", "turn-based"],
)
def test_a_restored_collector_continues_bit_identically(config):
    continued, resumed_rollouts, warnings = _continued_and_resumed(config)
    assert warnings == []
    _assert_same(continued, resumed_rollouts)


def test_recurrent_states_continue_too():
    config = PettingZooEnvConfig(
        env_fn="lightmarl.envs.testing.memory.parallel_env", env_kwargs={"num_agents": 3, "delay": 9}, num_envs=3
    )
    continued, resumed_rollouts, warnings = _continued_and_resumed(config, recurrent=True, before=2)
    assert warnings == []
    _assert_same(continued, resumed_rollouts)


def test_each_episode_of_a_copy_has_its_own_seed():
    seeds = [episode_seed(7, k) for k in range(50)]
    assert seeds[0] == 7 and len(set(seeds)) == 50
    assert all(0 <= s < 2**32 for s in seeds) and episode_seed(-1, 3) >= 0


class CoinFlips(ParallelEnv):
    """One agent; the observation is a coin flip from the global NumPy RNG, which no seed controls."""

    metadata = {"name": "coin_flips"}

    def __init__(self) -> None:
        from gymnasium import spaces

        self.possible_agents = ["a"]
        self.agents: list[str] = []
        self.observation_spaces = {"a": spaces.Box(0, 1, (1,), np.float32)}
        self.action_spaces = {"a": spaces.Discrete(2)}
        self.t = 0

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def _obs(self):
        return {"a": np.array([np.random.randint(2)], dtype=np.float32)}

    def reset(self, seed=None, options=None):
        self.agents, self.t = ["a"], 0
        return self._obs(), {"a": {}}

    def step(self, actions):
        self.t += 1
        done = self.t >= 40
        return self._obs(), {"a": 0.0}, {"a": False}, {"a": done}, {"a": {}}


def test_an_env_that_is_not_deterministic_given_seed_and_actions_is_named():
    config = PettingZooEnvConfig(env_fn=f"{__name__}.CoinFlips", num_envs=4)
    np.random.seed(0)
    _, _, warnings = _continued_and_resumed(config)
    assert len(warnings) == 1 and "not deterministic given its seed and actions" in warnings[0], warnings
