"""`--trainer.precision bf16-mixed` trains on CPU: on-policy, off-policy and value-decomposition recipes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from expectations import tiny_cli_run
from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[2]
LEARN_AT_ONCE = {
    "ppo_vs_dqn": [
        "--model.algorithms.dqn_policy.init_args.learning_starts=1",
        "--model.algorithms.dqn_policy.init_args.batch_size=8",
    ],
    "qmix_simple_spread": ["--model.algorithm.init_args.learning_starts=1", "--model.algorithm.init_args.batch_size=8"],
}


@pytest.mark.parametrize("recipe", ["quickstart", "ppo_vs_dqn", "qmix_simple_spread"])
def test_bf16_mixed_precision_trains(recipe, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # 4 iterations; the off-policy learners start learning on the first transitions and take gradient steps.
    run = [*tiny_cli_run(ROOT / f"recipes/{recipe}.yaml"), "--model.max_frames=40", *LEARN_AT_ONCE.get(recipe, [])]
    main(["fit", "--config", str(ROOT / f"recipes/{recipe}.yaml"), "--trainer.precision=bf16-mixed", *run])
    checkpoint = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=True)
    assert checkpoint["lightmarl"]["population"]["counters"]["iterations"] == 4
    weights = [v for v in checkpoint["state_dict"].values() if v.is_floating_point()]
    assert weights and all(torch.isfinite(v).all() for v in weights)
    for binding, state in checkpoint["lightmarl"]["trainers"].items():
        if "grad_steps" in state:  # off-policy learners: they learnt, not only filled their buffers
            assert state["grad_steps"] > 0, binding
