"""Validation episodes: the recipe's own seating played from fixed seeds, as ``validation_step`` / ``test_step`` log it.

[`ValidationConfig`][lightmarl.evaluation.scenarios.ValidationConfig] (``evaluation.validation`` in a
recipe, the same section as the evaluation scenarios) says how many episodes, from which seed,
with mode or sampled actions, how wins are decided and whether a video is written. `play_validation`
plays them with the population as it stands and returns the metrics by binding, named
``<prefix>/<binding>/<metric>``; `log_validation` plays them as a LightningModule's ``validation_step`` /
``test_step`` and logs them.

Validation never changes training state: sampled actions draw from a stream of their own, seeded
the same way every time, and the torch, numpy and Python random streams are restored afterwards.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info

from lightmarl import keys
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.spec import EnvSpec
from lightmarl.evaluation.episodes import evaluate_episodes
from lightmarl.evaluation.scenarios import ValidationConfig
from lightmarl.evaluation.suite import preserved_rng
from lightmarl.evaluation.video import check_renders, write_evaluation_video
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.population import BindingTable

#: added to ``ValidationConfig.seed`` per rank, so that every process plays other episodes.
RANK_SEED_STRIDE = 1_000


@dataclass(frozen=True)
class ValidationResult:
    """What `play_validation` played.

    Attributes:
        logs: ``<prefix>/<binding>/<metric>`` -> value; every process has the same keys.
        video: the GIF written (rank 0 with ``video_episodes``), else ``None``.
    """

    logs: dict[str, float]
    video: str | None


def check_validation(config: ValidationConfig, env_config: EnvConfig) -> None:
    """Fail before training when the validation cannot run: an env that draws no RGB frames with a video asked for."""
    if config.video_episodes:
        check_renders(env_config)


def continuous_bindings(table: BindingTable, spec: EnvSpec) -> list[str]:
    """Active bindings that act for a group with continuous actions, in binding order."""
    return [
        b
        for b in table.active_ids
        if b in table.group_of_binding and spec.groups[table.group_of_binding[b]].action_kind == "continuous"
    ]


def play_validation(
    population: MultiAgentPolicy,
    env_config: EnvConfig,
    spec: EnvSpec,
    config: ValidationConfig,
    *,
    prefix: str,
    rank: int = 0,
    device: torch.device | str = "cpu",
    video_path: str | None = None,
) -> ValidationResult:
    """Play the validation episodes of ``config`` with ``population`` in eval mode.

    Args:
        population: the bindings and their seating (its table's agent binding map).
        env_config: the env played (its transforms apply with frozen statistics).
        spec: the env's spec after its transforms (groups, info fields).
        config: episodes, seed, mode or sampled actions, win rule, video episodes.
        prefix: metric prefix, ``eval`` (validation) or ``test``.
        rank: this process's rank: it plays from ``config.seed + 1000 * rank``; rank 0 writes the video.
        device: where the policies run.
        video_path: the GIF to write when ``config.video_episodes`` is set (rank 0 only).

    Returns:
        The metrics by binding and the video written, if any.
    """
    population.eval()
    seed = config.seed + RANK_SEED_STRIDE * rank
    devices = [torch.device(device)]

    def play(deterministic: bool) -> dict[str, dict[str, float]]:
        # Sampled actions from a stream of their own: the same draws in every evaluation, in fit
        # and in validate, and training's random streams untouched (restored by preserved_rng).
        torch.manual_seed(seed)
        return evaluate_episodes(
            population,
            env_config,
            num_episodes=config.episodes,
            seed=seed,
            num_envs=config.num_envs,
            deterministic=deterministic,
            winner=config.winner,
            device=device,
        )

    with preserved_rng(devices):
        results = play(config.deterministic)
        for stats in results.values():
            # Every process logs the same keys (sync_dist): a field no episode reported is NaN.
            for name in spec.info_fields:
                stats.setdefault(keys.info_key(name), float("nan"))
        logs = {f"{prefix}/{b}/{name}": value for b, stats in results.items() for name, value in stats.items()}
        continuous = continuous_bindings(population.table, spec)
        if config.deterministic and continuous:
            # A continuous policy's mean action can look good while the sampled play it trains on
            # falls over (or the reverse): report both, on the same seeded episodes.
            sampled = play(deterministic=False)
            for b in continuous:
                for name, value in sampled.get(b, {}).items():
                    logs[f"{prefix}/{b}/{name}_sampled"] = value
        video = None
        if config.video_episodes and rank == 0 and video_path is not None:
            torch.manual_seed(seed)
            video = write_evaluation_video(
                population,
                env_config,
                video_path,
                num_episodes=config.video_episodes,
                seed=config.seed,
                deterministic=config.deterministic,
                device=device,
            )
    return ValidationResult(logs=logs, video=None if video is None else str(video))


def log_validation(
    module: LightningModule,
    population: MultiAgentPolicy,
    env_config: EnvConfig,
    spec: EnvSpec,
    config: ValidationConfig,
    *,
    prefix: str,
    iteration: int,
) -> ValidationResult:
    """`play_validation` as ``module``'s ``validation_step`` / ``test_step``: its rank and device, the video
    under its log directory (``videos/<prefix>_iter<iteration>.gif``), the metrics logged per epoch on every process.

    Args:
        module: the LightningModule validated (it logs the metrics).
        population: its bindings and their seating.
        env_config: the env played.
        spec: the env's spec after its transforms.
        config: the recipe's ``evaluation.validation``.
        prefix: metric prefix, ``eval`` (validation) or ``test``.
        iteration: training iterations done (names the video).
    """
    # trainer.log_dir is a collective under DDP (it broadcasts rank 0's): every rank asks.
    video = None
    if config.video_episodes:
        video = os.path.join(module.trainer.log_dir or ".", "videos", f"{prefix}_iter{iteration}.gif")
    result = play_validation(
        population,
        env_config,
        spec,
        config,
        prefix=prefix,
        rank=module.global_rank,
        device=module.device,
        video_path=video,
    )
    module.log_dict(result.logs, on_step=False, on_epoch=True, sync_dist=True, batch_size=1)
    if result.video is not None:
        rank_zero_info(f"lightmarl: evaluation video {result.video}")
    return result
