"""Faults during a real ``fit`` : a binding fed NaN rewards keeps its weights bit-identical
while its partner learns on, and the NaN shows in the logged metrics; ``stop`` ends the run naming the binding."""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch import seed_everything
from lightning.pytorch.loggers import CSVLogger
from test_learning import fit_quietly
from test_preemption import lightmarl, processes_with

from lightmarl.algorithms import PPO
from lightmarl.cli import main
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.errors import TRAINING_FAULT_EXIT_CODE, TrainingFault
from lightmarl.training import MARLModule

FAULTY = "lightmarl.envs.testing.faults.FaultyMatchEnv"


def nan_reward_module(on_nonfinite: str = "skip", iterations: int = 3) -> MARLModule:
    """``red`` (agent_0) gets NaN rewards from the first step; ``blue`` (agent_1) plays the same env, healthy."""
    env = PettingZooEnvConfig(
        env_fn=FAULTY,
        env_kwargs={"fault": "nan_reward", "fault_agents": ["agent_0"], "nvec": [3], "action_mask": False},
        num_envs=4,
    )
    return MARLModule(
        env=env,
        policy_bindings=[
            {"id": binding, "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"critic": "local"}}
            for binding in ("red", "blue")
        ],
        agent_binding_map=["red", "blue"],
        algorithm=PPO(epochs=2, minibatch_size=20, on_nonfinite=on_nonfinite),  # type: ignore[arg-type]
        rollout_steps=10,
        max_frames=iterations * 40,
        iterations_per_epoch=iterations,
    )


def test_nan_rewards_skip_one_bindings_updates_and_show_as_nan_in_the_logs(tmp_path, caplog):
    seed_everything(0)
    module = nan_reward_module()
    before = {b: module.get_weights(b) for b in ("red", "blue")}
    fit_quietly(module, tmp_path, logger=CSVLogger(tmp_path, name="run"))
    assert module.iterations == 3
    red, blue = module.get_weights("red"), module.get_weights("blue")
    assert all(torch.equal(before["red"][k], v) for k, v in red.items()), "the NaN binding's weights moved"
    assert any(not torch.equal(before["blue"][k], v) for k, v in blue.items()), "the healthy binding learnt nothing"
    optimizers = module.named_optimizers()
    assert not optimizers["red"].state and optimizers["blue"].state  # red's Adam never stepped
    assert "binding 'red': non-finite loss" in caplog.text and "binding 'blue': non-finite" not in caplog.text

    rows = list(csv.DictReader(next(tmp_path.rglob("metrics.csv")).open()))
    logged = [r for r in rows if r.get("train/red/loss_objective")]
    assert len(logged) == 3
    assert all(math.isnan(float(r["train/red/loss_objective"])) for r in logged)  # NaN in the logs, not dropped
    assert all(float(r["train/red/skipped_steps"]) == 4 for r in logged)  # 2 epochs x 2 minibatches
    assert all(float(r["train/blue/skipped_steps"]) == 0 for r in logged)
    assert all(math.isfinite(float(r["train/blue/loss_objective"])) for r in logged)
    assert all(math.isfinite(float(r["collect/blue/episode_return"])) for r in logged)  # red's NaN stays red's


def test_nan_rewards_under_stop_end_the_run_naming_the_binding(tmp_path):
    seed_everything(0)
    module = nan_reward_module("stop")
    before = module.get_weights("red")
    with pytest.raises(TrainingFault, match=r"binding 'red': non-finite loss \(loss_objective = nan"):
        fit_quietly(module, tmp_path)
    assert all(torch.equal(before[k], v) for k, v in module.get_weights("red").items())


def worker_fault_env(fault: str, failure: str, once_file) -> PettingZooEnvConfig:
    """4 copies (seeds 0..3) over 2 workers; copy 3 hangs or crashes at its 12th step (in the 2nd rollout)."""
    return PettingZooEnvConfig(
        env_fn=FAULTY,
        env_kwargs={"fault": fault, "fault_seeds": [3], "fault_step": 11, "once_file": str(once_file),
                    "nvec": [3], "action_mask": False},
        num_envs=4,
        num_workers=2,
        overlap=False,
        worker_timeout=2.0,
        worker_failure=failure,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_hung_env_worker_is_restarted_and_fit_goes_on(tmp_path, caplog):
    seed_everything(0)
    module = MARLModule(
        env=worker_fault_env("hang", "restart", tmp_path / "hung"),
        algorithm=PPO(epochs=1, minibatch_size=40),
        rollout_steps=10,
        max_frames=4 * 40,
        iterations_per_epoch=4,
    )
    fit_quietly(module, tmp_path)
    assert module.iterations == 4 and (tmp_path / "hung").exists()
    assert "env worker 1" in caplog.text and "copies 2..3, seeds [2, 3]) did not answer step within 2 s" in caplog.text
    assert "restarting it" in caplog.text


@pytest.mark.timeout(240)
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find leftover processes")
def test_a_crashed_env_worker_stops_lightmarl_fit_with_one_line_and_no_orphans(tmp_path):
    env = worker_fault_env("crash", "stop", tmp_path / "crashed")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "seed_everything": 0,
                "model": {
                    "env": {k: v for k, v in dataclasses.asdict(env).items() if k != "transforms"},
                    "algorithm": {"class_path": "lightmarl.algorithms.PPO", "init_args": {"minibatch_size": 40}},
                    "rollout_steps": 10,
                    "max_frames": 400,
                },
                "trainer": {"enable_progress_bar": False, "logger": False},
            }
        )
    )
    marker = f"LIGHTMARL_TEST_RUN={uuid.uuid4().hex}"
    run = subprocess.run(
        [lightmarl(), "fit", "--config", str(recipe)],
        cwd=tmp_path,
        env={**os.environ, marker.split("=")[0]: marker.split("=")[1]},
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert run.returncode == TRAINING_FAULT_EXIT_CODE, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert re.search(
        r"lightmarl: error: env worker 1 \(pid \d+, copies 2\.\.3, seeds \[2, 3\]\) died \(exit code 13\) "
        r"during step; stopping \(env\.worker_failure: stop\)",
        run.stderr,
    ), run.stderr[-3000:]
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(marker), "env workers outlived the run"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("num_workers", [None, 2], ids=["in-process", "workers"])
def test_an_env_whose_step_raises_stops_fit_with_one_line_and_exit_3(num_workers, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    env = {
        "env_fn": FAULTY,
        "env_kwargs": {"fault": "raise", "fault_seeds": [3], "fault_step": 11, "nvec": [3], "action_mask": False},
        "num_envs": 4,
        **({"num_workers": num_workers, "overlap": False} if num_workers else {}),
    }
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "seed_everything": 0,
                "model": {
                    "env": env,
                    "algorithm": {"class_path": "lightmarl.algorithms.PPO", "init_args": {"minibatch_size": 40}},
                    "rollout_steps": 10,
                    "max_frames": 400,
                },
                "trainer": {"enable_progress_bar": False, "logger": False},
            }
        )
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(recipe)])
    assert exit_info.value.code == TRAINING_FAULT_EXIT_CODE
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lightmarl: error: ")]
    assert len(errors) == 1, errors
    assert re.match(
        r"lightmarl: error: env 'faults' \(copy 3, seed 3\) raised in step\(\): RuntimeError: "
        r"FaultyMatchEnv: step 11 failed on purpose"
        + (r" \[in env worker 1 \(pid \d+, copies 2\.\.3" if num_workers else "$"),
        errors[0],
    ), errors[0]
