"""What the sweep and tune tests share: the quickstart recipe at a budget of a few seconds, and sweep files."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "recipes" / "quickstart.yaml")
#: 160 frames in two epochs of 80 (a checkpoint after each), validated after each: a few seconds of training.
TINY = {
    "model.env.num_envs": 4,
    "model.rollout_steps": 10,
    "model.max_frames": 160,
    "model.iterations_per_epoch": 2,
    "evaluation.validation.episodes": 2,
    "model.algorithm.init_args.minibatch_size": 40,
    "trainer.enable_model_summary": False,
}


def write_sweep(path: Path, **fields) -> Path:
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    return path
