"""The quickstart recipe under DDP: 2 CPU processes (gloo) launched by the real ``lightmarl`` CLI.

Backward runs under ``no_sync`` and ``LightningStepper.step`` all-reduces the gradients itself;
``MARLModule.on_train_epoch_end`` calls ``assert_ranks_in_sync``, which raises on every rank
(non-zero exit) when any rank's parameters differ from rank 0's or iteration counts differ.
Ranks collect from different env seeds, so without the all-reduce they drift apart and this
test fails.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from expectations import minibatches_within

pytestmark = pytest.mark.two_processes  # xdist workers run one such test at a time (tests/worker_lock.py)

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "quickstart.yaml"

NUM_ENVS, ROLLOUT_STEPS, WORLD = 4, 25, 2
ITERATIONS, ITERATIONS_PER_EPOCH = 6, 3
FRAMES = NUM_ENVS * ROLLOUT_STEPS * WORLD * ITERATIONS  # the budget counts every rank's frames
PPO_EPOCHS = 4  # quickstart's algorithm.init_args.epochs; one minibatch (100 rows per rank)


def _lightmarl() -> str:
    """The installed console script (never a file run as ``__main__``, whose checkpoints would store ``class_path: __main__.X``)."""
    exe = Path(sys.executable).with_name("lightmarl")
    if exe.exists():
        return str(exe)
    found = shutil.which("lightmarl")
    if found is None:
        pytest.skip("the lightmarl console script is not installed")
    return found


def run_ddp(recipe: Path, tmp_path: Path, extra: str = "") -> str:
    """``lightmarl fit`` of ``recipe`` (plus the ``extra`` YAML) on 2 CPU ranks; returns the log after
    checking both ranks stayed in sync."""
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text(
        extra
        + textwrap.dedent(
            f"""\
            trainer:
              default_root_dir: {tmp_path}
              enable_progress_bar: false
              check_val_every_n_epoch: 1
              logger:
                - class_path: lightning.pytorch.loggers.CSVLogger
                  init_args: {{save_dir: {tmp_path}, name: csv}}
              callbacks:
                - class_path: lightning.pytorch.callbacks.ModelCheckpoint
                  init_args: {{dirpath: {tmp_path / "checkpoints"}, save_last: true, every_n_epochs: 1}}
            """
        )
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "PL_GLOBAL_SEED"}
    }
    env["OMP_NUM_THREADS"] = "1"
    cmd = [
        _lightmarl(), "fit",
        "--config", str(recipe),
        "--config", str(overrides),
        "--trainer.strategy", "ddp",
        "--trainer.accelerator", "cpu",
        "--trainer.devices", str(WORLD),
        "--model.env.num_envs", str(NUM_ENVS),
        "--model.rollout_steps", str(ROLLOUT_STEPS),
        "--model.max_frames", str(FRAMES),
        "--model.iterations_per_epoch", str(ITERATIONS_PER_EPOCH),
        "--evaluation.validation.episodes", "2",
        *minibatches_within(recipe, NUM_ENVS * ROLLOUT_STEPS),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=280
    )
    log = proc.stdout
    assert proc.returncode == 0, f"lightmarl fit under DDP failed (exit {proc.returncode}):\n{log[-6000:]}"

    # Both processes ran, the budget was split by world size, and at each epoch end the ranks
    # agreed on iterations and held bit-identical parameters (assert_ranks_in_sync).
    assert "GLOBAL_RANK: 1" in log, log[-3000:]
    assert f"{ITERATIONS} iterations of {NUM_ENVS * ROLLOUT_STEPS * WORLD} frames" in log, log[-3000:]
    for iteration in range(ITERATIONS_PER_EPOCH, ITERATIONS + 1, ITERATIONS_PER_EPOCH):
        assert f"{WORLD} ranks in sync at iteration {iteration} (max |param - rank 0's| = 0)" in log, log[-3000:]
    assert "out of sync" not in log
    return log


@pytest.mark.timeout(300)
def test_quickstart_ddp_two_cpu_ranks_stay_in_sync(tmp_path: Path) -> None:
    # Periodic evaluation with sampled actions on rank 0 only: the ranks must still stay in sync.
    evaluation = textwrap.dedent(
        f"""\
        evaluation:
          scenarios:
            - {{name: sampled, agent_binding_map: [main, main, main], episodes: 2, deterministic: false}}
          every_n_frames: {FRAMES // 2}
        """
    )
    run_ddp(RECIPE, tmp_path, evaluation)
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    state = ckpt["lightmarl"]["population"]["counters"]
    assert state["iterations"] == ITERATIONS
    assert state["frames"] == FRAMES
    # Manual optimization: global_step counts optimizer steps (PPO epochs x 1 minibatch per iteration).
    assert ckpt["global_step"] == ITERATIONS * PPO_EPOCHS
    (opt_state,) = ckpt["optimizer_states"]
    assert {int(s["step"]) for s in opt_state["state"].values()} == {ITERATIONS * PPO_EPOCHS}
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())
    # Validation ran under DDP too (metrics reduced across ranks with sync_dist).
    metrics = (tmp_path / "csv" / "version_0" / "metrics.csv").read_text()
    assert "eval/main/episode_return" in metrics.splitlines()[0]
    # Rank 0's periodic evaluation, broadcast and logged at half and at the whole budget.
    assert sum(bool(row["eval/sampled/main/episode_return"]) for row in csv.DictReader(io.StringIO(metrics))) == 2


@pytest.mark.timeout(300)
def test_shared_modules_under_ddp_stay_identical_and_step_once_per_iteration(tmp_path: Path) -> None:
    """Two bindings sharing an encoder and a critic: ranks stay bit-identical, and the shared
    modules' optimizer stepped exactly once per iteration while each binding's stepped per minibatch."""
    run_ddp(REPO / "recipes" / "centralized_critic.yaml", tmp_path)
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    binding_a, binding_b, shared = ckpt["optimizer_states"]
    for unit in (binding_a, binding_b):
        assert {int(s["step"]) for s in unit["state"].values()} == {ITERATIONS * PPO_EPOCHS}
    assert {int(s["step"]) for s in shared["state"].values()} == {ITERATIONS}
    assert [g["name"] for g in shared["param_groups"]] == ["encoder", "critic"]


@pytest.mark.timeout(300)
def test_off_policy_learner_under_ddp_starts_learning_on_every_rank_together(tmp_path: Path) -> None:
    """PPO next to DQN: whether DQN's replay is full enough is agreed across ranks
    (``GradientStepper.agree_min``), so both take the same gradient steps and stay bit-identical."""
    run_ddp(REPO / "recipes" / "ppo_vs_dqn.yaml", tmp_path)
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    dqn = ckpt["lightmarl"]["trainers"]["dqn_policy"]
    assert dqn["grad_steps"] > 0 and dqn["networks"], dqn.keys()
