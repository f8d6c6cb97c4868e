"""`fit` 2N == `fit` N + `--ckpt_path last` for N more, bit for bit, under 2-process CPU DDP (gloo).

Each rank has its own env copies (own seeds), replay buffers and RNG streams: the checkpoint
holds every rank's, gathered to rank 0, and each rank of the resumed run takes its own back.
Launched through the real ``lightmarl`` console script, as ``tests/training/test_ddp.py`` does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from resume_runs import RECIPES, comparable, differences, fit_args, last_checkpoint
from test_ddp import _lightmarl

N, WORLD = 4, 2


def _fit_ddp(args: list[str], cwd: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "PL_GLOBAL_SEED"}
    }
    env["OMP_NUM_THREADS"] = "1"
    ddp = ["--trainer.strategy=ddp", "--trainer.accelerator=cpu", f"--trainer.devices={WORLD}"]
    proc = subprocess.run(
        [_lightmarl(), *args, *ddp], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:]


def _resume_matches(recipe: str, tmp_path: Path) -> None:
    _fit_ddp(fit_args(recipe, tmp_path / "whole", 2 * N, world=WORLD), tmp_path)
    _fit_ddp(fit_args(recipe, tmp_path / "split", N, world=WORLD), tmp_path)
    _fit_ddp([*fit_args(recipe, tmp_path / "split", 2 * N, world=WORLD), "--ckpt_path", "last"], tmp_path)
    whole, resumed = last_checkpoint(tmp_path / "whole"), last_checkpoint(tmp_path / "split")
    assert resumed["lightmarl"]["population"]["counters"]["iterations"] == 2 * N
    ranks = resumed["lightmarl_resume"]["ranks"]
    assert len(ranks) == WORLD
    # The ranks stepped different env copies: their states are their own, not rank 0's twice (connect
    # four, which has no randomness of its own, too: each rank samples from streams of its own).
    assert differences(ranks[0]["collector"]["lanes"], ranks[1]["collector"]["lanes"])
    assert differences(comparable(whole), comparable(resumed)) == []


@pytest.mark.slow  # about 100 s per recipe on 2 cores (three DDP launches)
@pytest.mark.timeout(900)
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_resume_exactly_under_ddp(recipe: str, tmp_path: Path) -> None:
    _resume_matches(recipe, tmp_path)


@pytest.mark.two_processes
@pytest.mark.timeout(300)
def test_ddp_ranks_play_different_games_on_a_deterministic_env(tmp_path: Path) -> None:
    """Connect four has no randomness of its own: the ranks' first rollouts differ only if each rank
    samples from RNG streams of its own (training.resume.seed_rank_streams)."""
    _fit_ddp(fit_args("connect_four_vs_heuristic", tmp_path, 1, world=WORLD), tmp_path)
    ranks = last_checkpoint(tmp_path)["lightmarl_resume"]["ranks"]
    first, second = (rank["collector"]["history"]["actions"] for rank in ranks)
    assert all(len(a) for copy in first for a in copy.values()), "the games are in flight at the checkpoint"
    assert differences(first, second), "both ranks played the same moves"
    assert differences(ranks[0]["rng"], ranks[1]["rng"])
