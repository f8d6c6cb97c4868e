"""The progress bar states the frame budget's epochs and iterations (not ``Epoch 3/-2 ... 60/--``)."""

from __future__ import annotations

from lightning.pytorch import Callback, Trainer

from lightmarl.algorithms import PPO
from lightmarl.evaluation.scenarios import EvaluationConfig, ValidationConfig
from lightmarl.training import MARLModule


class Seen(Callback):
    def __init__(self) -> None:
        self.epochs: list[tuple[int, int, float]] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.epochs.append((trainer.current_epoch, trainer.max_epochs, trainer.num_training_batches))


def fit(spread_config, max_frames: int, seen: Seen, ckpt_path=None, root=None) -> Trainer:
    module = MARLModule(
        env=spread_config,
        algorithm=PPO(minibatch_size=20),
        rollout_steps=5,  # 4 copies x 5 steps = 20 frames per iteration
        max_frames=max_frames,
        iterations_per_epoch=3,
        evaluation=EvaluationConfig(validation=ValidationConfig(episodes=1)),
    )
    trainer = Trainer(
        max_epochs=-1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[seen],
        default_root_dir=root,
    )
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer


def test_the_fit_loop_knows_the_budgets_epochs_and_iterations(spread_config, tmp_path):
    seen = Seen()
    trainer = fit(spread_config, 140, seen, root=tmp_path)  # 7 iterations: epochs of 3, 3 and 1
    assert seen.epochs == [(0, 3, 3), (1, 3, 3), (2, 3, 3)]  # shown as Epoch 0/2 ... 2/2, n/3
    assert trainer.current_epoch == 3
    # A resumed run with a raised budget: 5 more iterations are 2 more epochs (3 and 2).
    resumed = Seen()
    last = next(tmp_path.rglob("*.ckpt"))
    fit(spread_config, 240, resumed, ckpt_path=str(last), root=tmp_path / "resumed")
    assert [(epoch, max_epochs) for epoch, max_epochs, _ in resumed.epochs] == [(3, 5), (4, 5)]
