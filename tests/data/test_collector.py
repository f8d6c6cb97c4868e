from __future__ import annotations

import torch

from lightmarl.data import schema
from lightmarl.data.collector import RolloutCollector
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding


def make_collector(spread_config, steps=7):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("learner", class_path="x.y"), PolicyBinding("npc", class_path="x.y", trainable=False)],
        spec,
        ["learner", "npc", "learner"],
    )
    population = MultiAgentPolicy({"learner": MLPActorCritic(group), "npc": UniformRandomPolicy(group)}, table)
    return RolloutCollector(spread_config.make_vector(seed=0), population, steps)


def test_experience_layout_and_annotations(spread_config):
    collector = make_collector(spread_config)
    exp = collector.collect()
    assert exp.batch_size == (4, 7)
    rows = exp["agent"]
    assert rows.batch_size == (4, 7, 3)
    assert rows[schema.BINDING_ID][0, 0].tolist() == [0, 1, 0]
    assert rows[schema.IS_TRAINABLE_AGENT][0, 0].tolist() == [True, False, True]
    assert rows[schema.LOSS_PROFILE_ID].eq(0).all()
    assert rows[schema.AGENT_ID][2, 3].tolist() == [0, 1, 2]
    assert rows[schema.ENV_INDEX][:, 0, 0].tolist() == [0, 1, 2, 3]
    assert rows[schema.VALID].all()
    assert exp["next", "agent", schema.REWARD].shape == (4, 7, 3, 1)
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
    ids = exp["agent", schema.EPISODE_ID][..., 0]
    ended = exp["next", "agent", "done"][..., 0, 0]
    for e in range(4):
        for t in range(11):
            assert (ids[e, t + 1] != ids[e, t]) == bool(ended[e, t])
    assert len(ids.unique()) == 4 * 3  # 3 episodes started per copy within 12 steps
    # Episodes continue across rollouts: the next rollout starts with the same episode ids.
    assert torch.equal(collector.collect()["agent", schema.EPISODE_ID][:, 0, 0], ids[:, -1])


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
