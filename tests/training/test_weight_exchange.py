"""Two runs exchanging weights: each plays the other's latest published policy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    # 40 copies x 10 steps: one rollout holds the PPO run's 400-step minibatch (a larger one is an error).
    "--model.env.num_envs=40",
    "--model.rollout_steps=10",
    "--model.max_frames=1200",
    "--model.iterations_per_epoch=3",
    "--evaluation.validation.episodes=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


def policy_weights(checkpoint: Path, binding: str) -> dict[str, torch.Tensor]:
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    prefix = f"population.policies.{binding}."
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


def test_each_run_plays_the_weights_the_other_published(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(ROOT / "recipes/two_trainers/dqn_run.yaml"), *TINY])
    published = torch.load(tmp_path / "runs/two_trainers/weights/dqn_policy.pt", weights_only=True)
    assert published["version"] == 3
    dqn_final = policy_weights(next((tmp_path / "runs/two_trainers/dqn_run").rglob("last.ckpt")), "dqn_policy")
    assert dqn_final and published["weights"].keys() == dqn_final.keys()
    assert all(torch.equal(published["weights"][k], v) for k, v in dqn_final.items())

    main(["fit", "--config", str(ROOT / "recipes/two_trainers/ppo_run.yaml"), *TINY])
    ppo_run = next((tmp_path / "runs/two_trainers/ppo_run").rglob("last.ckpt"))
    # The PPO run's frozen dqn_policy is the DQN run's trained one, not its own initial copy.
    frozen = policy_weights(ppo_run, "dqn_policy")
    assert frozen.keys() == dqn_final.keys()
    assert all(torch.equal(frozen[k], v) for k, v in dqn_final.items())
    ppo_published = torch.load(tmp_path / "runs/two_trainers/weights/ppo_policy.pt", weights_only=True)
    assert all(torch.equal(ppo_published["weights"][k], v) for k, v in policy_weights(ppo_run, "ppo_policy").items())


def test_exchange_rejects_bindings_with_the_wrong_role(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                str(ROOT / "recipes/two_trainers/ppo_run.yaml"),
                *TINY,
                "--trainer.callbacks+=lightmarl.training.weight_exchange.WeightExchange",
                "--trainer.callbacks.directory=x",
                "--trainer.callbacks.subscribe=[ppo_policy]",
            ]
        )
    assert exit_info.value.code == 2
    assert "WeightExchange.subscribe: binding 'ppo_policy' must be frozen" in capsys.readouterr().err


@pytest.mark.two_processes
def test_example_script_runs_both_trainers_side_by_side(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples/two_trainers.py"), *TINY],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ppo_run: exit code 0" in result.stdout and "dqn_run: exit code 0" in result.stdout
    assert {p.name for p in (tmp_path / "runs/two_trainers/weights").iterdir()} == {"ppo_policy.pt", "dqn_policy.pt"}
