"""The rock-paper-scissors league on 2 CPU processes (gloo) behaves as in one process.

The league lives on rank 0: once per rollout, the episodes both ranks finished are gathered,
rank 0 records them in the order they ended and draws the next on-deck seatings, which are
broadcast. With results that do not depend on sampled actions (every episode a draw), the whole
league (jobs, seats, opponents, snapshots, payoff, ratings, RNG) must come out identical from
1 process x 4 env copies and 2 processes x 2 env copies; and no rank exchanges anything while
it steps its envs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from test_ddp import _lightmarl

pytestmark = pytest.mark.two_processes  # xdist workers run one such test at a time (tests/worker_lock.py)

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
        f'"init_args": {{"dirpath": "{tmp_path / "ckpt"}", "save_last": true, "every_n_epochs": 1}}}}, '
        '{"class_path": "collective_counts.CountCollectives"}]',
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[Path, dict]]:
    """The same league fit with 1 process and with 2 (root folder, league state)."""
    root = tmp_path_factory.mktemp("league_ddp")
    found = {}
    for world in (1, 2):
        (root / str(world)).mkdir()
        found[world] = (root / str(world), _fit(root / str(world), world=world))
    return found


@pytest.mark.timeout(600)
def test_league_on_two_ddp_ranks_matches_one_process(runs: dict[int, tuple[Path, dict]]) -> None:
    one, two = runs[1][1], runs[2][1]
    assert len(one["manager"]["historical"]) >= 3 and one["manager"]["next_job_id"] > COPIES * ROLLOUT_STEPS
    assert two == one


@pytest.mark.timeout(600)
def test_the_league_exchanges_results_once_per_rollout_not_per_env_step(runs: dict[int, tuple[Path, dict]]) -> None:
    root = runs[2][0]
    for rank in range(2):
        counts = json.loads((root / f"collectives_rank{rank}.json").read_text())
        assert counts["iterations"] == ITERATIONS
        assert counts["rollout"] == 0, f"rank {rank} made collectives while stepping its envs: {counts}"
        # Per iteration: the finished episodes and agent steps in one all-gather, the decisions in one broadcast.
        assert counts["league"] == 2 * ITERATIONS, counts
