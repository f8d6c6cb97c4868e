"""The share of the training budget spent reaches every learner as an argument of the update (no attribute hand-off)."""

from __future__ import annotations

import pytest
from lightning.pytorch import Trainer

from lightmarl.algorithms import PPO, Distillation, IndependentMARLTrainer, PlainStepper
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl.training import MARLModule
from lightmarl_examples.simple_spread import SpreadToLandmarkPolicy


def test_the_budget_share_drives_every_schedule_of_one_update(spread_config):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("teacher", class_path="x.y", trainable=False), PolicyBinding("student", class_path="x.y")],
        spec,
        ["teacher", "student", "student"],
    )
    policies = {"teacher": SpreadToLandmarkPolicy(group), "student": MLPActorCritic(group, hidden_sizes=[32])}
    experience = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 8).collect()
    algorithm = PPO(
        lr=0.01,
        anneal_lr=True,
        entropy_coeff=0.2,
        final_entropy_coeff=0.0,
        minibatch_size=16,
        epochs=1,
        distillation=Distillation("teacher", coeff=1.0, final_coeff=0.0),
    )
    trainer = IndependentMARLTrainer(table, policies, {"student": algorithm})
    optimizers = trainer.make_optimizers()
    unit = trainer.unit_trainers["student"]
    for done in (0.0, 0.25, 0.75):
        metrics = trainer.update(experience, optimizers, PlainStepper(), fraction_done=done)["student"]
        assert metrics["distill_coeff"] == pytest.approx(1.0 - done)  # the update's own weight
        assert optimizers["student"].param_groups[0]["lr"] == pytest.approx(0.01 * (1.0 - done))  # set_progress
        assert float(unit.loss.entropy_coeff) == pytest.approx(0.2 * (1.0 - done))
    assert not hasattr(unit, "fraction_done")  # passed, never kept between methods


class RecordingMARLTrainer(IndependentMARLTrainer):
    """Independent learning that records the budget share of each update."""

    seen: list[float] = []

    def update(self, experience, optimizers, stepper, iteration=0, fraction_done=0.0):
        RecordingMARLTrainer.seen.append(fraction_done)
        return super().update(experience, optimizers, stepper, iteration, fraction_done)


def test_the_module_passes_the_share_of_its_iterations_done(tmp_path):
    RecordingMARLTrainer.seen = []
    module = MARLModule(
        env=PettingZooEnvConfig(num_envs=2),
        rollout_steps=5,
        max_frames=40,
        algorithm=PPO(minibatch_size=10, epochs=1),
        marl_trainer=RecordingMARLTrainer,
    )
    Trainer(
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    ).fit(module)
    assert module.iterations == 4
    assert RecordingMARLTrainer.seen == [0.0, 0.25, 0.5, 0.75]
