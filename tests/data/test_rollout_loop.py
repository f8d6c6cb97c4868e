"""The one rollout loop that training collection, evaluation and videos share."""

from __future__ import annotations

import pytest
import torch
from test_collector import make_population
from torchrl.envs.utils import ExplorationType

from lightmarl import keys
from lightmarl.data import rollout
from lightmarl.data.collector import RolloutCollector
from lightmarl.data.rollout import RolloutLoop, RolloutStep
from lightmarl.evaluation.episodes import evaluate_episodes


class Spy:
    """Wraps a recorder and keeps what every step showed it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.steps: list[RolloutStep] = []

    @property
    def done(self) -> bool:
        return self.inner.done

    def record(self, step: RolloutStep) -> None:
        self.steps.append(step)
        self.inner.record(step)


@pytest.fixture
def spied(monkeypatch) -> list[Spy]:
    """Every recorder any RolloutLoop runs with, wrapped in a :class:`Spy`."""
    spies: list[Spy] = []
    run = RolloutLoop.run

    def spying_run(self, recorder, steps=None):
        spies.append(Spy(recorder))
        return run(self, spies[-1], steps)

    monkeypatch.setattr(rollout.RolloutLoop, "run", spying_run)
    return spies


def test_collection_and_evaluation_with_the_same_seeds_see_identical_steps(spread_config, spied):
    policy = make_population(spread_config)
    collector = RolloutCollector(
        spread_config.make_vector(seed=7, evaluation=True), policy, 5, exploration=ExplorationType.DETERMINISTIC
    )
    torch.manual_seed(1)  # the scripted random binding draws in both runs: from the same stream
    experience = collector.collect()  # max_cycles=5: one whole episode per copy
    torch.manual_seed(1)
    results = evaluate_episodes(policy, spread_config, num_episodes=4, seed=7, num_envs=4, deterministic=True)

    collected, evaluated = spied
    assert len(collected.steps) == len(evaluated.steps) == 5
    for a, b in zip(collected.steps, evaluated.steps, strict=True):
        assert torch.equal(a.td["agent", keys.OBSERVATION], b.td["agent", keys.OBSERVATION])
        assert torch.equal(a.td["agent", keys.ACTION], b.td["agent", keys.ACTION])
        assert torch.equal(a.next["agent"][keys.REWARD], b.next["agent"][keys.REWARD])
        assert torch.equal(a.ended, b.ended)
    assert evaluated.steps[-1].ended.all() and not any(s.ended.any() for s in evaluated.steps[:-1])

    # The evaluation's per-binding numbers are the collected episodes' returns.
    returns = experience["next", "agent", keys.REWARD].squeeze(-1).sum(1)  # [envs, agents]
    learner = returns[:, [0, 2]].mean(-1)
    assert results["learner"]["episode_return"] == pytest.approx(float(learner.mean()), rel=1e-5)
    assert results["learner"]["episode_return_std"] == pytest.approx(float(learner.std()), rel=1e-4)
    assert results["npc"]["episode_return"] == pytest.approx(float(returns[:, 1].mean()), rel=1e-5)
    assert results["learner"]["episode_length"] == 5.0
    summary = collector.episode_summary()
    assert summary["learner"]["episode_return"] == pytest.approx(results["learner"]["episode_return"], rel=1e-5)


class StopAfter:
    def __init__(self, steps: int) -> None:
        self.left = steps
        self.seen: list[RolloutStep] = []

    @property
    def done(self) -> bool:
        return self.left <= 0

    def record(self, step: RolloutStep) -> None:
        self.seen.append(step)
        self.left -= 1


def test_the_loop_stops_when_the_recorder_is_done_and_continues_its_episodes(spread_config):
    loop = RolloutLoop(spread_config.make_vector(seed=0), make_population(spread_config))
    try:
        first = StopAfter(3)
        loop.run(first)
        assert len(first.seen) == 3
        assert [s.envs for s in first.seen] == [slice(0, 4)] * 3
        second = StopAfter(2)
        loop.run(second, steps=10)  # the recorder ends it first
        assert len(second.seen) == 2
        # No reset between runs: max_cycles=5 ends every copy's episode at the 5th step overall.
        assert second.seen[-1].ended.all() and not second.seen[0].ended.any()
        bounded = StopAfter(100)
        loop.run(bounded, steps=4)
        assert len(bounded.seen) == 4
        with pytest.raises(ValueError, match="steps: expected a positive integer"):
            loop.run(StopAfter(1), steps=0)
    finally:
        loop.close()


def test_a_phased_vector_is_stepped_lane_by_lane_and_stopping_abandons_the_other_lane(spread_config):
    from dataclasses import replace

    config = replace(spread_config, num_workers=2, overlap=True)
    loop = RolloutLoop(config.make_vector(seed=0), make_population(spread_config))
    try:
        assert len(loop.lanes) == 2
        recorder = StopAfter(3)  # done after lane 0 of the second round
        loop.run(recorder)
        assert [s.lane for s in recorder.seen] == [0, 1, 0]
        assert [s.envs for s in recorder.seen] == [slice(0, 2), slice(2, 4), slice(0, 2)]
        # The abandoned step was drained: the next run starts cleanly on both lanes.
        again = StopAfter(2)
        loop.run(again)
        assert [s.lane for s in again.seen] == [0, 1]
    finally:
        loop.close()
