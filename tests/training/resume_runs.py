"""What the exact-resume tests share: small real runs of shipped recipes, and a deep comparison of checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from expectations import minibatches_within

REPO = Path(__file__).resolve().parents[2]

NUM_ENVS, ROLLOUT_STEPS, ITERATIONS_PER_EPOCH = 3, 10, 2  # episodes of 25 steps: every checkpoint is mid-episode

#: recipe -> overrides that make its learners learn (and their replay buffers wrap around) within a few iterations.
RECIPES: dict[str, list[str]] = {
    "quickstart": [],  # on-policy (MAPPO)
    "ppo_vs_dqn": [  # off-policy with replay, beside PPO
        "--model.algorithms.dqn_policy.init_args.learning_starts=60",
        "--model.algorithms.dqn_policy.init_args.batch_size=32",
        "--model.algorithms.dqn_policy.init_args.buffer_size=100",
        "--model.algorithms.dqn_policy.init_args.updates_per_iteration=2",
    ],
    # turn-based PPO: the transitions open at the checkpoint (kept rows of the last rollout) close after it.
    "connect_four_vs_heuristic": ["--model.agent_binding_map=[main, main]"],
    # A seeded scripted random binding beside the learner: its own generator is in the checkpoint.
    "quickstart+seeded_random": [
        "--model.policy_bindings=[{id: main, class_path: lightmarl.policies.MLPActorCritic},"
        " {id: random, class_path: lightmarl.policies.UniformRandomPolicy, policy_kwargs: {seed: 7}, trainable: false}]",
        "--model.agent_binding_map=[main, random, random]",
    ],
    "qmix_simple_spread": [  # value decomposition (QMIX mixer on joint transitions)
        "--model.algorithm.init_args.learning_starts=30",
        "--model.algorithm.init_args.batch_size=16",
        "--model.algorithm.init_args.buffer_size=50",
        "--model.algorithm.init_args.updates_per_iteration=2",
    ],
}


def fit_args(recipe: str, root: Path, iterations: int, world: int = 1) -> list[str]:
    """``lightmarl fit`` arguments for ``iterations`` iterations of ``recipe`` writing under ``root``."""
    path = REPO / "recipes" / f"{recipe.split('+')[0]}.yaml"  # "recipe+variant": the recipe with more overrides
    return [
        "fit",
        "--config", str(path),
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.logger=false",
        f"--model.env.num_envs={NUM_ENVS}",
        f"--model.rollout_steps={ROLLOUT_STEPS}",
        f"--model.max_frames={NUM_ENVS * ROLLOUT_STEPS * world * iterations}",
        f"--model.iterations_per_epoch={ITERATIONS_PER_EPOCH}",
        "--evaluation.validation.episodes=1",
        *minibatches_within(path, NUM_ENVS * ROLLOUT_STEPS),
        *RECIPES[recipe],
    ]  # fmt: skip


def last_checkpoint(root: Path) -> dict[str, Any]:
    return torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two checkpoint trees differ (tensors bit for bit; floats exactly)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
        return [] if same and torch.equal(a, b) else [where]
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(map(str, set(a) ^ set(b)))}"]
        return [d for k in a for d in differences(a[k], b[k], f"{where}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: lengths {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b or (a != a and b != b) else [f"{where}: {a!r} != {b!r}"]


def comparable(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The parts of a checkpoint that must be bit-identical between a whole and a resumed run.

    Left out: the loops' and callbacks' bookkeeping (which records that the resumed run was
    restarted, and the checkpoint paths) and the saved hyper-parameters (the budget differs).
    """
    return {
        key: checkpoint[key]
        for key in ("state_dict", "optimizer_states", "global_step", "epoch", "lightmarl", "lightmarl_resume")
    }
