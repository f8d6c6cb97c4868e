"""Worker vectors in two phases: the collector overlaps one phase's forward pass with the other's stepping.

The experience must be what the in-process vector gives (with deterministic actions, bit for bit):
layout, per-env maps, recurrent states, transforms, episode statistics.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch
from torchrl.envs.utils import ExplorationType

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig, ProcessVecEnv
from lightmarl.envs.checks import random_actions
from lightmarl.envs.transforms import FrameStack, ObservationNorm, RewardNorm
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, RecurrentActorCritic
from lightmarl.policies.base import ScriptedPolicy
from lightmarl.population import BindingTable, PolicyBinding

SPREAD = "mpe2.simple_spread_v3.parallel_env"
MEMORY = "lightmarl.envs.testing.memory.parallel_env"

pytestmark = pytest.mark.timeout(120)


def spread(num_envs: int = 6, **changes) -> PettingZooEnvConfig:
    config = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 5}, num_envs=num_envs, overlap=True)
    return replace(config, **changes)


def _cat(parts: list[dict]) -> dict:
    return {g: {k: torch.cat([p[g][k] for p in parts]) for k in parts[0][g]} for g in parts[0]}


def test_phases_step_the_trajectories_of_the_whole_vector():
    config = spread(num_envs=5)
    local = config.make_vector(seed=3)
    remote = replace(config, num_workers=2).make_vector(seed=3)
    try:
        assert isinstance(remote, ProcessVecEnv) and remote.phase_bounds == [0, 3, 5]
        phases = remote.phases()
        assert [p.seeds for p in phases] == [[3, 4, 5], [6, 7]]
        generator = torch.Generator().manual_seed(0)
        local.reset()
        for p in phases:
            p.reset()
        assert torch.equal(
            local.current["agent"]["observation"], _cat([p.current for p in phases])["agent"]["observation"]
        )
        for step in range(12):  # crosses two auto-resets
            actions = random_actions(local.spec, local.current, generator)
            for p in phases:  # both in flight at once, as the collector has them
                p.step_async({"agent": actions["agent"][p.first : p.first + p.num_envs]})
            results = [p.step_wait() for p in phases]
            nxt, ended = local.step(actions)
            assert torch.equal(ended, torch.cat([r[1] for r in results])), step
            for key, value in _cat([r[0] for r in results])["agent"].items():
                assert torch.equal(nxt["agent"][key], value), (step, key)
            for key, value in _cat([p.current for p in phases])["agent"].items():
                assert torch.equal(local.current["agent"][key], value), (step, key)
    finally:
        local.close()
        remote.close()


def test_phase_results_are_read_in_the_order_sent_and_errors_keep_the_vector_usable():
    with replace(spread(num_envs=4), num_workers=2).make_vector(seed=0) as env:
        first, second = env.phases()
        first.reset()
        second.reset()
        zeros = torch.zeros(2, 3, dtype=torch.int64)
        first.step_async({"agent": zeros})
        bad = zeros.clone()
        bad[1, 0] = 99  # out of Discrete(5) in copy 3 (the second phase's second copy)
        second.step_async({"agent": bad})
        with pytest.raises(RuntimeError, match="wait for the steps in the order they were sent"):
            second.step_wait()
        first.step_wait()
        with pytest.raises(RuntimeError, match=r"copy 3, seed 3\) raised in step\(\)"):
            second.step_wait()
        # A step left in flight (e.g. the collector stopped on an error) is read before the next command.
        first.step_async({"agent": zeros})
        assert env.reset()["agent"]["observation"].shape == (4, 3, 18)
        env.step({"agent": torch.zeros(4, 3, dtype=torch.int64)})


def test_overlap_by_default_where_the_training_process_has_a_core_of_its_own(monkeypatch):
    config = replace(spread(num_envs=4), num_workers=2, overlap=None)
    for cores, phases in ((2, 1), (3, 2)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        with config.make_vector(seed=0) as env:
            assert env.num_phases == phases
    with pytest.raises(ValueError, match=r"env\.overlap: expected true, false or null"):
        replace(config, overlap="yes")


def test_overlap_needs_two_copies_per_worker():
    assert replace(spread(num_envs=3), num_workers=2).make_vector(seed=0).num_phases == 1
    with replace(spread(num_envs=4), num_workers=2, overlap=False).make_vector(seed=0) as env:
        assert env.num_phases == 1
    spec = spread().spec()
    with pytest.raises(ValueError, match="num_phases: expected 1, or 2 with at least 2 env copies per worker"):
        ProcessVecEnv(SPREAD, {"N": 3}, spec, seeds=[0, 1, 2], num_workers=2, num_phases=2)


def _collect(config: PettingZooEnvConfig, make_population, workers: int, rollouts: int = 2, steps: int = 7):
    """Experience and episode summary of ``rollouts`` deterministic rollouts (``workers=2``: overlapped)."""
    env = replace(config, num_workers=workers).make_vector(seed=0)
    assert workers == 0 or env.phases()[0].num_envs < env.num_envs  # two phases
    collector = RolloutCollector(env, make_population(config.spec()), steps, exploration=ExplorationType.DETERMINISTIC)
    try:
        return [collector.collect() for _ in range(rollouts)], collector.episode_summary()
    finally:
        collector.close()


def _collect_both(config: PettingZooEnvConfig, make_population, steps: int = 7):
    return [_collect(config, make_population, workers, steps=steps) for workers in (0, 2)]


def _assert_same_experience(a, b):
    (local, local_summary), (remote, remote_summary) = a, b
    assert local_summary == remote_summary
    for x, y in zip(local, remote):
        assert x.batch_size == y.batch_size
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for key in x.keys(True, True):
            assert x[key].dtype == y[key].dtype, key
            if key[-1] == "action_log_prob":  # a matmul over other row counts may round differently
                torch.testing.assert_close(x[key], y[key], rtol=0, atol=1e-6)
            else:
                assert torch.equal(x[key], y[key]), key


def _two_bindings_per_env(spec):
    group = spec.groups["agent"]
    agent_map = {"default": ["a", "b", "a"], "per_env": {1: ["b", "b", "b"], 4: ["a", "a", "b"]}}
    table = BindingTable([PolicyBinding("a", class_path="x.y"), PolicyBinding("b", class_path="x.y")], spec, agent_map)
    torch.manual_seed(0)
    return MultiAgentPolicy({"a": MLPActorCritic(group), "b": MLPActorCritic(group, hidden_sizes=(32,))}, table)


def test_overlapped_collection_equals_in_process_collection_with_per_env_maps():
    _assert_same_experience(*_collect_both(spread(num_envs=6), _two_bindings_per_env))


def _one_mlp(spec):
    table = BindingTable([PolicyBinding("a", class_path="x.y")], spec)
    torch.manual_seed(0)
    return MultiAgentPolicy({"a": MLPActorCritic(spec.groups["agent"])}, table)


class Stay(ScriptedPolicy):
    """Action 0 everywhere: trajectories that do not depend on what the policy sees."""

    def act(self, observation, action_mask=None):
        return torch.zeros(observation.shape[:-1], dtype=torch.int64)


def test_overlapped_collection_equals_in_process_collection_with_frame_stacking():
    def config():
        return spread(num_envs=4, transforms=[FrameStack(num_frames=3)])

    _assert_same_experience(_collect(config(), _one_mlp, 0), _collect(config(), _one_mlp, 2))


def test_overlapped_collection_folds_every_sample_into_the_normalization_statistics_once():
    def stay(spec):
        return MultiAgentPolicy(
            {"a": Stay(spec.groups["agent"])}, BindingTable([PolicyBinding("a", class_path="x.y")], spec)
        )

    statistics = []
    for workers in (0, 2):
        transforms = [ObservationNorm(), RewardNorm()]
        _collect(spread(num_envs=4, transforms=transforms), stay, workers)
        statistics.append([t.statistics["agent"] for t in transforms])
    samples = 4 * 2 * 7 * 3  # copies x rollouts x steps x agents
    for (local, remote), count in zip(zip(*statistics), (4 * 3 + samples, samples)):  # observations: also the resets
        assert local.count == remote.count == count
        # The same samples, folded in per phase instead of per vector step: equal up to rounding.
        torch.testing.assert_close(local.mean, remote.mean, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(local.var, remote.var, rtol=1e-9, atol=1e-12)


def test_overlapped_collection_carries_recurrent_states_per_phase():
    config = PettingZooEnvConfig(env_fn=MEMORY, env_kwargs={"num_agents": 3, "delay": 2}, num_envs=4, overlap=True)

    def population(spec):
        group = spec.groups["agent"]
        table = BindingTable(
            [PolicyBinding("rnn", class_path="x.y"), PolicyBinding("ff", class_path="x.y")], spec, ["rnn", "ff", "rnn"]
        )
        torch.manual_seed(0)
        return MultiAgentPolicy(
            {"rnn": RecurrentActorCritic(group, hidden_size=8, cell="gru"), "ff": MLPActorCritic(group)}, table
        )

    _assert_same_experience(*_collect_both(config, population, steps=6))


def test_sampled_overlapped_collection_is_reproducible():
    def run():
        population = _two_bindings_per_env(spread().spec())
        collector = RolloutCollector(replace(spread(), num_workers=2).make_vector(seed=0), population, 5)
        try:
            torch.manual_seed(7)
            return collector.collect()
        finally:
            collector.close()

    a, b = run(), run()
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key


class BadAction(ScriptedPolicy):
    """Action 0, except an out-of-range action for the last copy at the 3rd forward of its phase."""

    def __init__(self, group) -> None:
        super().__init__(group)
        self.calls = 0

    def act(self, observation, action_mask=None):
        action = torch.zeros(observation.shape[:-1], dtype=torch.int64)
        self.calls += 1
        if self.calls == 6:  # phases alternate: the 6th forward is the second phase's 3rd
            action[-1, 0] = 99
        return action


def test_an_env_error_in_one_phase_names_the_copy_and_leaves_the_vector_usable():
    config = replace(spread(num_envs=4), num_workers=2)
    spec = config.spec()
    table = BindingTable([PolicyBinding("a", class_path="x.y")], spec)
    collector = RolloutCollector(
        config.make_vector(seed=0), MultiAgentPolicy({"a": BadAction(spec.groups["agent"])}, table), 5
    )
    try:
        with pytest.raises(RuntimeError, match=r"copy 3, seed 3\) raised in step\(\)"):
            collector.collect()
        # The collector read the first phase's step that was still out (no stale answer is left
        # for the next collect() to mistake for its own), and the vector answers the next command.
        assert collector.env._in_flight == []
        assert collector.env.reset()["agent"]["observation"].shape == (4, 3, 18)
    finally:
        collector.close()
