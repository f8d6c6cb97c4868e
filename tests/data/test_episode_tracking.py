"""EpisodeTracker: following a whole rollout at once gives what following it step by step gives."""

from __future__ import annotations

import pytest
import torch

from lightmarl.data.episode_tracking import EpisodeTracker

E, A = 6, 3


def _rollout(gen: torch.Generator, T: int, carry: dict, ends: bool = True) -> dict:
    """``T`` steps of ``E`` envs: episodes end when each agent has been done (agents end at different
    steps) or are cut short by a new id; ``carry`` (ids, done so far, finished, next id) goes on across
    rollouts; ``ends=False``: no done rows."""
    ids, so_far, finished = carry["ids"], carry["so_far"], carry["finished"]
    episode_id = torch.empty(E, T, dtype=torch.long)
    done = torch.zeros(E, T, A, dtype=torch.bool)
    for t in range(T):
        for e in range(E):
            if finished[e] or torch.rand((), generator=gen) < 0.1:  # a new episode, or the old one cut short
                ids[e], carry["next"] = carry["next"], carry["next"] + 1
                so_far[e] = False
            finished[e] = False
            episode_id[e, t] = ids[e]
            done[e, t] = (torch.rand(A, generator=gen) < 0.3) & ends
            so_far[e] |= done[e, t]
            finished[e] = bool(so_far[e].all())
    return {
        "episode_id": episode_id,
        "reward": torch.randint(-8, 9, (E, T, A), generator=gen).float() / 4,
        "done": done,
        "binding": torch.randint(0, 3, (E, T, A), generator=gen),
        "env_index": torch.arange(E).unsqueeze(1).expand(E, T) + 100,
    }


def _step_by_step(tracker: EpisodeTracker, steps: dict, valid: torch.Tensor) -> tuple[torch.Tensor, list]:
    T = steps["episode_id"].shape[1]
    time_index, completed = torch.empty(E, T, dtype=torch.long), []
    for t in range(T):
        time_index[:, t], closed = tracker.step(
            steps["episode_id"][:, t], valid[:, t], steps["reward"][:, t], steps["done"][:, t],
            steps["binding"][:, t], steps["env_index"][:, t],
        )  # fmt: skip
        completed += closed
    return time_index, completed


def _same_state(a: EpisodeTracker, b: EpisodeTracker) -> None:
    for name in EpisodeTracker._STATE:
        assert torch.equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("seed", range(4))
def test_a_rollout_followed_at_once_matches_step_by_step(seed):
    gen = torch.Generator().manual_seed(seed)
    at_once, reference = EpisodeTracker(E, A, torch.device("cpu")), EpisodeTracker(E, A, torch.device("cpu"))
    carry = {"ids": torch.zeros(E, dtype=torch.long), "so_far": torch.zeros(E, A, dtype=torch.bool),
             "finished": torch.ones(E, dtype=torch.bool), "next": 0}  # fmt: skip
    closed = 0
    for rollout, T in enumerate((7, 1, 9, 5)):
        # Rollout 1: agents sit out and no episode ends (an episode then completes once every agent
        # *seen* is done): both trackers follow it step by step, the next one carries its partial state.
        steps = _rollout(gen, T, carry, ends=rollout != 1)
        valid = torch.ones(E, T, A, dtype=torch.bool)
        if rollout == 1:
            valid = torch.rand(E, T, A, generator=gen) < 0.6
            _step_by_step(at_once, steps, valid)
            _step_by_step(reference, steps, valid)
            continue
        expected_time, expected = _step_by_step(reference, steps, valid)
        result = at_once.steps_all_valid(
            steps["episode_id"], steps["reward"], steps["done"], steps["binding"], steps["env_index"]
        )
        assert result is not None
        time_index, table = result
        assert torch.equal(time_index, expected_time)
        if expected:
            assert table is not None
            assert (table == torch.cat(expected)).all()  # same episodes, same order, same entries
            closed += len(table)
        else:
            assert table is None
        _same_state(at_once, reference)
    assert closed > 2 * E  # episodes completed and were cut short across rollouts


def test_an_id_used_again_after_its_episode_completed_is_left_to_step():
    tracker = EpisodeTracker(2, A, torch.device("cpu"))
    done = torch.zeros(2, 3, A, dtype=torch.bool)
    done[:, 1] = True  # both episodes complete at step 1, and the ids go on at step 2
    args = (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, A), done, torch.zeros(2, 3, A, dtype=torch.long))
    before = {name: getattr(tracker, name).clone() for name in EpisodeTracker._STATE}
    assert tracker.steps_all_valid(*args, torch.zeros(2, 3, dtype=torch.long)) is None
    for name, value in before.items():
        assert torch.equal(getattr(tracker, name), value), name
