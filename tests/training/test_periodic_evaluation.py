"""Periodic evaluation during fit: logged as eval/<scenario>/..., monitored by ModelCheckpoint, and
training is bit-identical with and without it (weights, optimizer state, random streams)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lightmarl.algorithms import PPO
from lightmarl.errors import ConfigError
from lightmarl.evaluation.scenarios import EvaluationConfig, ReplaceOneAgentConfig, ScenarioConfig, ValidationConfig
from lightmarl.experiments.runner import metric_rows
from lightmarl.training.module import MARLModule
from lightmarl.training.periodic_evaluation import PeriodicEvaluation

NUM_ENVS, ROLLOUT, ITERATIONS = 4, 10, 4
FRAMES = NUM_ENVS * ROLLOUT  # per iteration


def _module(spread_config) -> MARLModule:
    return MARLModule(
        env=spread_config,
        policy_bindings=[
            {"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [16]}}
        ],
        algorithm=PPO(minibatch_size=20, epochs=2, lr=0.01),
        rollout_steps=ROLLOUT,
        max_frames=FRAMES * ITERATIONS,
        iterations_per_epoch=2,
    )


def _evaluation() -> EvaluationConfig:
    # Sampled actions and a scripted binding on torch's global RNG: both would disturb training's streams.
    return EvaluationConfig(
        bindings=[{"id": "random", "class_path": "lightmarl.policies.UniformRandomPolicy"}],
        scenarios=[ScenarioConfig(name="sampled", agent_binding_map=["main"] * 3, episodes=3, deterministic=False)],
        replace_one_agent=[ReplaceOneAgentConfig(name="swap", replacement="random", agents=["agent_1"], episodes=2)],
        every_n_frames=FRAMES,
    )


def _fit(spread_config, tmp_path: Path, callbacks: list[Callback], logger: Any = False) -> tuple[MARLModule, Trainer]:
    seed_everything(0)
    module = _module(spread_config)
    trainer = Trainer(
        max_epochs=-1,
        logger=logger,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        callbacks=callbacks,
    )
    trainer.fit(module)
    return module, trainer


def _state(module: MARLModule, trainer: Trainer) -> dict[str, Any]:
    return {
        "weights": {k: v.clone() for k, v in module.state_dict().items()},
        "optimizers": [opt.state_dict() for opt in trainer.optimizers],
        "rng": (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()),
    }


def _assert_equal(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    else:
        assert a == b, where


class RecordEval(Callback):
    def __init__(self) -> None:
        self.seen: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        value = trainer.callback_metrics.get("eval/sampled/main/episode_return")
        if value is not None:
            self.seen.append(float(value))


class ConsumesRng(Callback):
    """A careless evaluation: draws from torch's global RNG at the same points."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        torch.rand(1)


def test_periodic_evaluation_leaves_training_bit_identical(spread_config, tmp_path):
    baseline = _state(*_fit(spread_config, tmp_path / "plain", []))
    periodic = PeriodicEvaluation(_evaluation())
    recorder = RecordEval()
    evaluated = _state(*_fit(spread_config, tmp_path / "eval", [periodic, recorder]))
    assert len(recorder.seen) == ITERATIONS, "one evaluation per FRAMES frames, logged as eval/<scenario>/<binding>"
    assert periodic.last is not None and "swap/agent_1_by_random" in periodic.last.report["scenarios"]
    _assert_equal(baseline, evaluated)
    # The comparison can fail: one stray draw from torch's RNG per iteration changes the weights.
    careless = _state(*_fit(spread_config, tmp_path / "careless", [ConsumesRng()]))
    with pytest.raises(AssertionError):
        _assert_equal(baseline["weights"], careless["weights"])


def test_model_checkpoint_monitors_an_evaluation_metric(spread_config, tmp_path):
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt",
        monitor="eval/sampled/main/episode_return",
        mode="max",
        save_top_k=1,
        save_on_train_epoch_end=True,
    )
    _fit(spread_config, tmp_path, [PeriodicEvaluation(_evaluation()), checkpoint])
    assert checkpoint.best_model_path and Path(checkpoint.best_model_path).is_file()
    assert checkpoint.best_model_score is not None


def test_a_bad_scenario_fails_in_setup_before_any_env_step(spread_config, tmp_path):
    bad = EvaluationConfig(
        scenarios=[ScenarioConfig(name="x", agent_binding_map=["main", "ghost", "main"])], every_n_frames=FRAMES
    )
    with pytest.raises(ConfigError, match=r"evaluation.scenarios\[0\].agent_binding_map: unknown binding 'ghost'"):
        _fit(spread_config, tmp_path, [PeriodicEvaluation(bad)])


def test_validation_during_fit_leaves_training_bit_identical(spread_config, tmp_path):
    """lightmarl's own validation at epoch ends (sampled actions here) restores every random stream."""

    def fit(validate: bool) -> dict[str, Any]:
        seed_everything(0)
        module = _module(spread_config)
        module.evaluation.validation = ValidationConfig(episodes=3, deterministic=False)  # sampled: torch's RNG
        trainer = Trainer(
            max_epochs=-1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            limit_val_batches=1 if validate else 0,
            num_sanity_val_steps=0,
            default_root_dir=tmp_path,
        )
        trainer.fit(module)
        if validate:
            assert "eval/main/episode_return" in trainer.callback_metrics
        return _state(module, trainer)

    _assert_equal(fit(validate=False), fit(validate=True))


def test_each_evaluation_is_one_logged_row_at_the_frames_it_was_taken(spread_config, tmp_path):
    # Evaluated at the third iteration only, the first of the second epoch: a logger that wrote it again at
    # every later step would draw a flat line through the fourth, never evaluated.
    evaluation = _evaluation()
    evaluation.every_n_frames = 3 * FRAMES
    recorder = RecordEval()
    _fit(spread_config, tmp_path, [PeriodicEvaluation(evaluation), recorder], CSVLogger(tmp_path / "csv"))
    rows = metric_rows(tmp_path)
    evaluated = [row for row in rows if "eval/sampled/main/episode_return" in row]
    assert [(row["counters/frames"], row["counters/iterations"]) for row in evaluated] == [(3 * FRAMES, 3)], rows
    assert len([row for row in rows if "time/fps" in row]) == ITERATIONS  # the iterations' own rows, as before
    assert len(recorder.seen) == 2  # the monitored value stays readable after its iteration
