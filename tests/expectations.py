"""What tests share: checks of a learner's metrics, and the smallest real CLI run.

``all(isfinite(v) for v in metrics.values())`` passes on an empty dict, so a learner that
silently learnt nothing would pass it: these checks name the metrics that must be there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

#: what every PPO update reports (TorchRL's PPO loss terms and diagnostics, plus lightmarl's row count).
PPO_METRICS = ("loss_objective", "loss_critic", "loss_entropy", "entropy", "kl_approx", "clip_fraction", "rows")


def assert_finite_metrics(metrics: Mapping[str, float], required: Iterable[str] = PPO_METRICS) -> None:
    """``required`` are all reported, and every reported metric is a finite number."""
    missing = sorted(set(required) - set(metrics))
    assert not missing, f"metrics {missing} missing from {sorted(metrics)}"
    bad = {k: v for k, v in metrics.items() if not math.isfinite(float(v))}
    assert not bad, f"non-finite metrics {bad}"


#: command-line overrides that make any recipe a seconds-long real run (2 copies, 2 iterations of 5 steps, no logger).
TINY_CLI_RUN = [
    "--model.env.num_envs=2",
    "--model.rollout_steps=5",
    "--model.max_frames=10",
    "--model.eval_episodes=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
]
