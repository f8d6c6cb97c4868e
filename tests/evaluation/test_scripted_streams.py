"""Evaluation restarts a scripted policy's own random stream: fit's last validation and a later validate agree.

A scripted binding that samples with its own generator (``UniformRandomPolicy(seed=...)``) draws
from it while it plays in training rollouts too, so where that stream stands at an evaluation
depends on the run's history. Evaluation starts it from the policy's seed (and gives the training
state back afterwards), as a policy built afresh would, so the same checkpoint evaluates the same
in fit and in ``validate``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import ModelCheckpoint

from lightmarl.algorithms import PPO
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation.scenarios import EvaluationConfig, ValidationConfig
from lightmarl.policies import UniformRandomPolicy
from lightmarl.training.module import MARLModule

TICTACTOE = PettingZooEnvConfig(env_fn="pettingzoo.classic.tictactoe_v3.env", num_envs=2)


def module() -> MARLModule:
    return MARLModule(
        env=TICTACTOE,
        policy_bindings=[
            {"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [16]}},
            {
                "id": "random",
                "class_path": "lightmarl.policies.UniformRandomPolicy",
                "policy_kwargs": {"seed": 1},
                "trainable": False,
            },
        ],
        agent_binding_map={"default": ["main", "random"], "per_env": {1: ["random", "main"]}},
        algorithm=PPO(minibatch_size=8, epochs=1),
        rollout_steps=8,
        max_frames=2 * 8 * 2,
        iterations_per_epoch=2,
        evaluation=EvaluationConfig(validation=ValidationConfig(episodes=12, winner="positive_return")),
    )


def trainer(tmp_path: Path, **kwargs) -> Trainer:
    return Trainer(
        max_epochs=-1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        **kwargs,
    )


def test_fit_and_a_later_validate_of_the_checkpoint_agree_with_a_scripted_random_binding(tmp_path):
    seed_everything(0)
    fitted = module()
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    fit = trainer(tmp_path, callbacks=[checkpoints])
    fit.fit(fitted)
    in_fit = {k: float(v) for k, v in fit.callback_metrics.items() if k.startswith("eval/")}
    assert "eval/random/episode_return" in in_fit and "eval/main/win_rate" in in_fit
    seed_everything(0)
    later = trainer(tmp_path, enable_checkpointing=False)
    later.validate(module(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"), verbose=False)
    validated = {k: float(v) for k, v in later.callback_metrics.items() if k.startswith("eval/")}
    assert validated == in_fit


def test_evaluation_gives_the_scripted_stream_back_to_training():
    group = TICTACTOE.spec().groups["player"]
    policy = UniformRandomPolicy(group, seed=3)
    torch.rand(1, generator=policy.generator)  # training drew from it
    before = policy.generator.get_state()
    with policy.fresh_random_stream():
        assert torch.equal(policy.generator.get_state(), torch.Generator().manual_seed(3).get_state())
        torch.rand(5, generator=policy.generator)
    assert torch.equal(policy.generator.get_state(), before)
