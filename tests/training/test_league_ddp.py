"""The rock-paper-scissors league on 2 CPU processes (gloo) behaves as in one process.

The league lives on rank 0: finished episodes are gathered from both ranks every step, rank 0
records them and hands out the next seatings, which are broadcast. With results that do not
depend on sampled actions (every episode a draw), the whole league (jobs, seats, opponents,
snapshots, payoff, ratings, RNG) must come out identical from 1 process x 4 env copies and
2 processes x 2 env copies.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from test_ddp import _lightmarl

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "league_rps.yaml"
COPIES, ROLLOUT_STEPS, ITERATIONS = 4, 6, 8


def _fit(tmp_path: Path, world: int) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "PL_GLOBAL_SEED"}
    }
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), env.get("PYTHONPATH", "")])
    ddp = ["--trainer.strategy", "ddp", "--trainer.devices", str(world)] if world > 1 else []
    cmd = [
        _lightmarl(), "fit", "--config", str(RECIPE), *ddp,
        "--trainer.accelerator", "cpu",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger", "false",
        "--trainer.callbacks", '[{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", '
        f'"init_args": {{"dirpath": "{tmp_path / "ckpt"}", "save_last": true, "every_n_epochs": 1}}}}]',
        "--model.env.num_envs", str(COPIES // world),
        "--model.rollout_steps", str(ROLLOUT_STEPS),
        "--model.max_frames", str(COPIES * ROLLOUT_STEPS * ITERATIONS),
        "--model.iterations_per_epoch", "4",
        "--model.algorithm.init_args.minibatch_size", str(COPIES // world * ROLLOUT_STEPS),
        "--model.league.roles", '[{"class_path": "lightmarl.league.SelfPlayPlayer", "binding": "main", '
        '"settings": {"one_phase_step": 24, "pfsp_prob": 0.7}}]',
        "--model.league.max_resident", "2",
        "--model.league.outcome", "league_scripts.always_draw",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=280
    )
    assert proc.returncode == 0, f"lightmarl fit ({world} processes) failed:\n{proc.stdout[-6000:]}"
    if world > 1:
        assert "GLOBAL_RANK: 1" in proc.stdout and "out of sync" not in proc.stdout
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", map_location="cpu", weights_only=False)
    state = ckpt["lightmarl_league"]["matchmaker"]
    for player in state["manager"]["historical"]:
        player["checkpoint_path"] = Path(player["checkpoint_path"]).name
    for seating in state["seatings"]:
        seating["load"] = seating["load"] and Path(seating["load"]).name
    return state


@pytest.mark.timeout(600)
def test_league_on_two_ddp_ranks_matches_one_process(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = _fit(tmp_path / "one", world=1)
    two = _fit(tmp_path / "two", world=2)
    assert len(one["manager"]["historical"]) >= 3 and one["manager"]["next_job_id"] > COPIES * ROLLOUT_STEPS
    assert two == one
