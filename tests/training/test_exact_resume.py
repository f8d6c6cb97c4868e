"""`fit` 2N iterations == `fit` N + `--ckpt_path last` for N more, bit for bit, in one process.

For an on-policy (quickstart), an off-policy (ppo_vs_dqn, replay buffer wrapping around), a
value-decomposition (QMIX) and a turn-based (connect four: transitions open across the checkpoint) recipe through the real CLI: weights, optimizer states, trainer
state (target networks, counters), replay buffers, RNG streams and the collector's state of the
final checkpoints are equal. Every checkpoint falls mid-episode (episodes of 25 steps, rollouts
of 10), so the env copies must be put back by fast-forwarding their episodes in flight.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from resume_runs import RECIPES, comparable, differences, fit_args, last_checkpoint

from lightmarl.cli import main

N = 4


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_fit_2n_equals_fit_n_then_resume(recipe: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    main(fit_args(recipe, tmp_path / "whole", 2 * N))
    main(fit_args(recipe, tmp_path / "split", N))
    half = last_checkpoint(tmp_path / "split")
    main([*fit_args(recipe, tmp_path / "split", 2 * N), "--ckpt_path", "last"])
    whole, resumed = last_checkpoint(tmp_path / "whole"), last_checkpoint(tmp_path / "split")

    assert (
        half["lightmarl"]["population"]["counters"]["iterations"],
        resumed["lightmarl"]["population"]["counters"]["iterations"],
    ) == (N, 2 * N)
    history = half["lightmarl_resume"]["ranks"][0]["collector"]["history"]
    assert all(len(a) for copy in history["actions"] for a in copy.values()), "the checkpoint fell between episodes"
    if recipe == "connect_four_vs_heuristic":  # the open transitions are in the checkpoint
        assert half["lightmarl_resume"]["ranks"][0]["replay"]["main"]["open_transitions"]
    elif recipe.split("+")[0] != "quickstart":  # replay in the checkpoint, learning on both sides of it
        (replay,) = half["lightmarl_resume"]["ranks"][0]["replay"].values()
        assert replay["count"] > 0
        assert all(t["grad_steps"] > 0 for t in half["lightmarl"]["trainers"].values() if "grad_steps" in t)
    assert differences(comparable(whole), comparable(resumed)) == []


def test_without_checkpoint_replay_the_buffer_stays_out(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    main([*fit_args("ppo_vs_dqn", tmp_path, 2), "--model.checkpoint_replay=false"])
    assert last_checkpoint(tmp_path)["lightmarl_resume"]["ranks"][0]["replay"] == {}
