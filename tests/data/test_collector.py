from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from lightmarl import keys
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding


def make_population(spread_config) -> MultiAgentPolicy:
    """A trainable MLP ``learner`` on agents 0 and 2, a frozen uniform-random ``npc`` on agent 1."""
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("learner", class_path="x.y"), PolicyBinding("npc", class_path="x.y", trainable=False)],
        spec,
        ["learner", "npc", "learner"],
    )
    return MultiAgentPolicy({"learner": MLPActorCritic(group), "npc": UniformRandomPolicy(group)}, table)


def make_collector(spread_config, steps=7):
    return RolloutCollector(spread_config.make_vector(seed=0), make_population(spread_config), steps)


def test_experience_layout_and_annotations(spread_config):
    collector = make_collector(spread_config)
    exp = collector.collect()
    assert exp.batch_size == (4, 7)
    rows = exp["agent"]
    assert rows.batch_size == (4, 7, 3)
    assert rows[keys.BINDING_ID][0, 0].tolist() == [0, 1, 0]
    assert rows[keys.IS_TRAINABLE_AGENT][0, 0].tolist() == [True, False, True]
    assert rows[keys.LOSS_PROFILE_ID].eq(0).all()
    assert rows[keys.AGENT_ID][2, 3].tolist() == [0, 1, 2]
    assert rows[keys.ENV_INDEX][:, 0, 0].tolist() == [0, 1, 2, 3]
    assert rows[keys.VALID].all()
    assert exp["next", "agent", keys.REWARD].shape == (4, 7, 3, 1)
    assert collector.frames == 28


def test_next_observation_is_the_following_observation_within_an_episode(spread_config):
    exp = make_collector(spread_config).collect()
    obs, nxt = exp["agent", "observation"], exp["next", "agent", "observation"]
    done = exp["next", "agent", "done"].squeeze(-1)
    for t in range(6):
        continuing = ~done[:, t, 0]
        assert torch.equal(nxt[continuing, t], obs[continuing, t + 1])


def test_episode_ids_change_exactly_at_episode_ends(spread_config):
    collector = make_collector(spread_config, steps=12)  # max_cycles=5: resets after steps 4 and 9
    exp = collector.collect()
    ids = exp["agent", keys.EPISODE_ID][..., 0]
    ended = exp["next", "agent", "done"][..., 0, 0]
    for e in range(4):
        for t in range(11):
            assert (ids[e, t + 1] != ids[e, t]) == bool(ended[e, t])
    assert len(ids.unique()) == 4 * 3  # 3 episodes started per copy within 12 steps
    # Episodes continue across rollouts: the next rollout starts with the same episode ids.
    assert torch.equal(collector.collect()["agent", keys.EPISODE_ID][:, 0, 0], ids[:, -1])


def test_episode_statistics_per_binding(spread_config):
    collector = make_collector(spread_config, steps=10)
    exp = collector.collect()
    summary = collector.episode_summary()
    assert set(summary) == {"learner", "npc"}
    assert summary["npc"]["episodes"] == 8  # 2 episodes x 4 copies
    assert summary["npc"]["episode_length"] == 5
    # The npc's return is the mean of its agent's per-episode reward sums.
    rewards = exp["next", "agent", "reward"][..., 1, 0]
    expected = torch.cat([rewards[:, :5].sum(1), rewards[:, 5:].sum(1)]).mean()
    assert abs(summary["npc"]["episode_return"] - float(expected)) < 1e-4


class ConstantPolicy(UniformRandomPolicy):
    """Plays `value` everywhere, so the experience shows which binding acted in each row."""

    def __init__(self, group, value: int) -> None:
        super().__init__(group)
        self.value = value

    def act(self, observation, action_mask=None):
        return torch.full(observation.shape[:-1], self.value, dtype=torch.int64)


def per_env_collector(spread_config, agent_map, steps=6):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [
            PolicyBinding("learner", class_path="x.y", loss_profile="rl"),
            PolicyBinding("npc", class_path="x.y", trainable=False, loss_profile="frozen"),
        ],
        spec,
        agent_map,
        {"rl": ["ppo"], "frozen": []},
    )
    population = MultiAgentPolicy({"learner": ConstantPolicy(group, 1), "npc": ConstantPolicy(group, 4)}, table)
    return RolloutCollector(spread_config.make_vector(seed=0), population, steps)


def test_per_env_map_annotates_and_acts_per_env_copy(spread_config):
    agent_map = {
        "default": ["learner", "npc", "learner"],
        "per_env": {1: ["npc", "npc", "npc"], 3: ["learner", "learner", "npc"]},
    }
    collector = per_env_collector(spread_config, agent_map, steps=10)
    exp = collector.collect()
    rows = exp["agent"]
    expected = torch.tensor([[0, 1, 0], [1, 1, 1], [0, 1, 0], [0, 0, 1]])  # learner 0, npc 1
    for key in (keys.BINDING_ID, keys.LOSS_PROFILE_ID):
        assert torch.equal(rows[key], expected.unsqueeze(1).expand(4, 10, 3))
    assert torch.equal(rows[keys.IS_TRAINABLE_AGENT], (expected == 0).unsqueeze(1).expand(4, 10, 3))
    # The per-env map is played, not only annotated: each row's action is its binding's constant.
    assert torch.equal(rows[keys.ACTION], torch.where(expected == 0, 1, 4).unsqueeze(1).expand(4, 10, 3))
    # Episode statistics count each (episode, binding) pair of the copies where the binding plays.
    summary = collector.episode_summary()
    assert summary["learner"]["episodes"] == 2 * 3  # 2 episodes in copies 0, 2, 3
    assert summary["npc"]["episodes"] == 2 * 4
    rewards = exp["next", "agent", "reward"][..., 0]  # [E, T, A]
    learner = expected == 0
    per_copy = (rewards * learner.unsqueeze(1)).sum(-1) / learner.sum(-1, keepdim=True)  # [E, T]
    copies = [0, 2, 3]  # all copies end together (max_cycles=5): one sample per copy, in copy order
    want = [float(per_copy[e, :5].sum()) for e in copies] + [float(per_copy[e, 5:].sum()) for e in copies]
    torch.testing.assert_close(torch.tensor(list(collector.stats["learner"].returns)), torch.tensor(want))


def test_per_env_index_beyond_the_env_copies_fails_before_the_first_step(spread_config):
    with pytest.raises(ValueError, match=r"per_env: env index 4 is out of range; each process steps 4 env copies"):
        per_env_collector(spread_config, {"per_env": {4: ["npc", "npc", "npc"]}})


def test_collector_writes_traceable_trajectories_into_a_rollout_buffer(spread_config):
    from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer

    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("learner", class_path="x.y"), PolicyBinding("npc", class_path="x.y", trainable=False)],
        spec,
        ["learner", "npc", "learner"],
    )
    population = MultiAgentPolicy({"learner": MLPActorCritic(group), "npc": UniformRandomPolicy(group)}, table)
    buffer = MultiAgentRolloutBuffer(n_agents=3)
    collector = RolloutCollector(spread_config.make_vector(seed=0), population, 7, buffers={"agent": buffer})
    rollouts = [collector.collect() for _ in range(2)]  # 14 steps: episodes of 5 cross the rollout boundary
    rows = torch.cat([r["agent"].reshape(-1) for r in rollouts])
    rewards = torch.cat([r["next", "agent", "reward"].reshape(-1) for r in rollouts])
    for episode in rows[keys.EPISODE_ID].unique().tolist():
        for agent in range(3):
            mine = (rows[keys.EPISODE_ID] == episode) & (rows[keys.AGENT_ID] == agent)
            traj = buffer.trajectory(episode, agent)
            assert torch.equal(traj["action"], rows["action"][mine])
            assert torch.equal(traj["observation"], rows["observation"][mine])
            assert torch.allclose(traj["next", "reward"].reshape(-1), rewards[mine])
            assert traj[keys.BINDING_ID].eq(1 if agent == 1 else 0).all()
            assert traj[keys.IS_TRAINABLE_AGENT].eq(agent != 1).all()
    with pytest.raises(ValueError, match="no agent group named"):
        RolloutCollector(spread_config.make_vector(seed=0), population, 7, buffers={"agents": buffer})


class UnevenEpisodesEnv:
    """Episodes of 1-6 steps drawn at each reset; ``agent_2`` may leave early; random rewards.

    The observation is ``[step, episode length, agent index]``, so a test can tell from the
    experience where each episode ended.
    """

    metadata = {"name": "uneven_v0", "render_modes": []}
    possible_agents = ["agent_0", "agent_1", "agent_2"]

    def __init__(self):
        self.rng = np.random.default_rng()
        self.agents = []

    def observation_space(self, agent):
        return spaces.Box(0.0, 10.0, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _observe(self):
        return {a: np.array([self.t, self.length, self.possible_agents.index(a)], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t, self.length = 0, int(self.rng.integers(1, 7))
        self.leaves = int(self.rng.integers(1, self.length + 1))  # agent_2's last step is leaves - 1
        self.agents = list(self.possible_agents)
        return self._observe(), {}

    def step(self, actions):
        rewards = {a: float(self.rng.normal()) for a in self.agents}
        self.t += 1
        over = self.t >= self.length
        terminations = {a: over or (a == "agent_2" and self.t >= self.leaves) for a in self.agents}
        truncations = dict.fromkeys(self.agents, False)
        observations = self._observe()
        self.agents = [a for a in self.agents if not terminations[a]]
        return observations, rewards, terminations, truncations, {}

    def close(self):
        pass


def test_episode_ids_and_statistics_match_a_step_by_step_reference():
    """Uneven episodes that cross rollout boundaries, an agent that leaves, two bindings: the
    per-rollout bookkeeping (episode ids, time index, statistics) equals a plain loop over steps and copies."""
    config = PettingZooEnvConfig(env_fn=f"{__name__}.UnevenEpisodesEnv", num_envs=5)
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("learner", class_path="x.y"), PolicyBinding("npc", class_path="x.y", trainable=False)],
        spec,
        {"default": ["learner", "npc", "learner"], "per_env": {3: ["npc", "npc", "npc"]}},
    )
    population = MultiAgentPolicy({"learner": UniformRandomPolicy(group), "npc": UniformRandomPolicy(group)}, table)
    collector = RolloutCollector(config.make_vector(seed=0), population, rollout_steps=4, stats_window=10_000)
    rollouts = [collector.collect() for _ in range(6)]
    ids = torch.cat([r["agent", keys.EPISODE_ID][..., 0] for r in rollouts], dim=1)  # [E, T]
    time_index = torch.cat([r["agent", keys.TIME_INDEX] for r in rollouts], dim=1)  # [E, T, A]
    obs = torch.cat([r["agent", "observation"][:, :, 0] for r in rollouts], dim=1)  # agent_0 never leaves early
    ended = obs[..., 0] == obs[..., 1] - 1  # the step was the episode's last
    rewards = torch.cat([r["next", "agent", "reward"][..., 0] for r in rollouts], dim=1).double()  # [E, T, A]
    valid = torch.cat([r["agent", keys.VALID] for r in rollouts], dim=1)
    assert ended.any(0).sum() > 10 and not ended.all(0).any()  # ends at many steps, never all at once
    assert not valid[..., 2].all()  # agent_2 leaves early in some episodes

    E, T = ended.shape
    bindings = table.bindings_of_envs("agent", E)
    running_return, running_length = torch.zeros(E, 3, dtype=torch.float64), torch.zeros(E, 3)
    current, next_id, clock = torch.arange(E), E, torch.zeros(E, dtype=torch.int64)
    returns: dict[int, list[float]] = {0: [], 1: []}
    lengths: dict[int, list[float]] = {0: [], 1: []}
    for t in range(T):
        for e in range(E):
            assert ids[e, t] == current[e]
            assert time_index[e, t].eq(clock[e]).all()  # every agent's row, present or not
            clock[e] += 1
            running_return[e] += rewards[e, t]
            running_length[e] += valid[e, t]
            if not ended[e, t]:
                continue
            for b in (0, 1):
                mine = bindings[e] == b
                if mine.any():
                    returns[b].append(float(running_return[e][mine].mean()))
                    lengths[b].append(float(running_length[e][mine].max()))
            running_return[e], running_length[e], clock[e] = 0, 0, 0
            current[e], next_id = next_id, next_id + 1
    for b, name in enumerate(("learner", "npc")):
        stats = collector.stats[name]
        assert stats.finished == len(returns[b]) > 10
        assert list(stats.returns) == pytest.approx(returns[b], abs=1e-9)
        assert list(stats.lengths) == lengths[b]
    # The next rollout goes on with each copy's current episode.
    assert torch.equal(collector.collect()["agent", keys.EPISODE_ID][:, 0, 0], current)


def test_every_row_carries_its_env_step_within_its_episode_across_rollouts(spread_config):
    """``time_index``: 0 at an episode's first step, counted on across rollouts (episodes of 5
    steps, rollouts of 7), written by the collector itself; the collector keeps no buffer."""
    collector = make_collector(spread_config)
    assert collector.buffers == {}
    for rollout in range(3):
        rows = collector.collect()["agent"]
        expected = (torch.arange(7) + 7 * rollout) % 5
        assert torch.equal(rows[keys.TIME_INDEX], expected.view(1, 7, 1).expand(4, 7, 3))


def test_a_buffer_handed_over_mid_episode_keeps_the_collectors_time_index(spread_config):
    from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer

    collector = make_collector(spread_config)
    collector.collect()  # 7 steps: every copy is 2 steps into its second episode
    collector.buffers = {"agent": MultiAgentRolloutBuffer(3)}
    rows = collector.collect()["agent"]
    assert rows[keys.TIME_INDEX][0, :, 0].tolist() == [2, 3, 4, 0, 1, 2, 3]
    episode = int(rows[keys.EPISODE_ID][0, 0, 0])
    assert collector.buffers["agent"].trajectory(episode, 0)[keys.TIME_INDEX].reshape(-1).tolist()[:3] == [2, 3, 4]
