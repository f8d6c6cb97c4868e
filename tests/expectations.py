"""What tests share: checks of a learner's metrics, and the smallest real CLI run.

``all(isfinite(v) for v in metrics.values())`` passes on an empty dict, so a learner that
silently learnt nothing would pass it: these checks name the metrics that must be there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

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
    "--evaluation.validation.episodes=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
]


def minibatches_within(recipe: Path, env_steps: int) -> list[str]:
    """Overrides that shrink a recipe's on-policy minibatches to ``env_steps`` (one tiny rollout):
    a minibatch larger than a rollout is a config error."""
    model = yaml.safe_load(Path(recipe).read_text()).get("model") or {}
    specs = [("model.algorithm", model.get("algorithm"))]
    specs += [(f"model.algorithms.{binding}", spec) for binding, spec in (model.get("algorithms") or {}).items()]
    return [
        f"--{field}.init_args.minibatch_size={min(int(spec['init_args']['minibatch_size']), env_steps)}"
        for field, spec in specs
        if spec and "minibatch_size" in (spec.get("init_args") or {})
    ]


def tiny_cli_run(recipe: Path) -> list[str]:
    """:data:`TINY_CLI_RUN` for ``recipe``, its on-policy minibatches shrunk to the tiny rollout (2 x 5 env steps)."""
    return [*TINY_CLI_RUN, *minibatches_within(recipe, 2 * 5)]


def fit_in_process(recipe: Path, tmp_path: Path, *overrides: str) -> Any:
    """Train ``recipe`` through lightmarl's CLI in this process (no logger, checkpoints, progress bar
    or validation); returns the trained ``MARLModule`` (its trainer is ``module.trainer``)."""
    from lightmarl.cli import TRAINER_DEFAULTS, LightmarlCLI
    from lightmarl.training import MARLModule

    cli = LightmarlCLI(
        MARLModule,
        trainer_defaults=TRAINER_DEFAULTS,
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        args=[
            "--config", str(recipe),
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.limit_val_batches=0",
            *overrides,
        ],
        run=False,
    )  # fmt: skip
    cli.trainer.fit(cli.model)
    return cli.model


def policy_rows(group: Any, batch: int = 512, mask: Any = None) -> Any:
    """A batch of random observation rows (with agent ids, and ``mask`` as the action mask) for ``group``."""
    import torch
    from tensordict import TensorDict

    data = {
        "observation": torch.randn(batch, group.num_agents, *group.observation_shape),
        "agent_id": torch.tensor(group.agent_ids).expand(batch, group.num_agents),
    }
    if mask is not None:
        data["action_mask"] = mask
    return TensorDict({group.name: TensorDict(data, [batch, group.num_agents])}, [batch])
