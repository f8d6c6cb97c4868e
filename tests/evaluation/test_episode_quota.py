"""Evaluation counts episodes evenly over the env copies, not the first ones to finish.

Counting the first episodes to finish favours short ones: a copy whose episodes end early finishes
two before another copy finishes one. On VMAS balance, where a fall ends the episode, that moved an
untrained Q-network's greedy return by up to 2.5 per agent (docs/results/benchmarl_algorithms.md).
"""

from __future__ import annotations

from collections import Counter

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation.episodes import play_episodes
from lightmarl.policies import MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding

# One agent that leaves with probability 0.3 per step: episode lengths from 1 to 20 steps.
CONFIG = PettingZooEnvConfig(
    env_fn="lightmarl.envs.MatchTargetEnv",
    env_kwargs={"num_agents": 1, "nvec": [3], "action_mask": False, "max_cycles": 20, "leave_probability": 0.3},
    num_envs=4,
)


def population() -> MultiAgentPolicy:
    spec = CONFIG.spec()
    table = BindingTable([PolicyBinding("r", class_path="x.y")], spec, ["r"])
    return MultiAgentPolicy({"r": UniformRandomPolicy(spec.groups["agent"], seed=0)}, table)


def test_each_copy_counts_its_share_of_the_episodes():
    records = play_episodes(population(), CONFIG, 10, seed=7, num_envs=4)
    assert Counter(r.env_index for r in records) == {0: 3, 1: 3, 2: 2, 3: 2}


def test_with_one_episode_per_copy_each_copy_counts_its_first_episode():
    policy = population()
    counted = play_episodes(policy, CONFIG, 4, seed=7, num_envs=4)
    assert sorted(r.env_index for r in counted) == [0, 1, 2, 3]
    # The same copies played for longer: the first episode of each is the one counted above.
    first: dict[int, tuple[float, int]] = {}
    for r in play_episodes(policy, CONFIG, 40, seed=7, num_envs=4):
        first.setdefault(r.env_index, (r.returns["r"], r.lengths["r"]))
    assert {r.env_index: (r.returns["r"], r.lengths["r"]) for r in counted} == first
    lengths = sorted(length for _, length in first.values())
    assert lengths[0] != lengths[-1], lengths  # the check means something only if lengths differ
