"""Resume is budget-exact: the frames done come from the checkpoint, whatever an iteration now takes.

A resume with another ``env.num_envs`` or ``rollout_steps`` either continues to exactly
``model.max_frames`` or is refused with a line naming what changed (the world size is checked the
same way; its DDP run is left to the DDP tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightmarl.cli import main

REPO = Path(__file__).resolve().parents[2]


def fit(root: Path, num_envs: int, rollout_steps: int, max_frames: int, *more: str) -> list[str]:
    return [
        "fit",
        "--config", str(REPO / "recipes" / "quickstart.yaml"),
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.logger=false",
        f"--model.env.num_envs={num_envs}",
        f"--model.rollout_steps={rollout_steps}",
        f"--model.max_frames={max_frames}",
        "--model.iterations_per_epoch=1",
        "--evaluation.validation.episodes=1",
        "--model.algorithm.init_args.minibatch_size=10",
        *more,
    ]  # fmt: skip


def frames(root: Path) -> tuple[int, int]:
    saved = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["lightmarl"][
        "population"
    ]["counters"]
    return saved["frames"], saved["iterations"]


@pytest.mark.parametrize(
    ("num_envs", "rollout_steps", "max_frames", "iterations_after"),
    [(6, 10, 120, 3), (3, 20, 180, 4), (1, 10, 90, 5)],
    ids=["more-envs", "longer-rollout", "fewer-envs"],
)
def test_a_resume_with_another_shape_reaches_max_frames_exactly(
    num_envs, rollout_steps, max_frames, iterations_after, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    main(fit(tmp_path, 3, 10, 60))  # 2 iterations of 30 frames
    assert frames(tmp_path) == (60, 2)
    main([*fit(tmp_path, num_envs, rollout_steps, max_frames), "--ckpt_path", "last"])
    assert frames(tmp_path) == (max_frames, iterations_after)


def test_a_resume_that_cannot_land_on_max_frames_is_refused_naming_what_changed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(fit(tmp_path, 3, 10, 60))
    with pytest.raises(SystemExit) as exit_info:
        main([*fit(tmp_path, 6, 10, 150), "--ckpt_path", "last"])
    assert exit_info.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("lightmarl: error: ")]
    assert line == (
        "lightmarl: error: --ckpt_path: the run is resumed with env.num_envs 3 -> 6; the 60 frames done leave 90 "
        "of model.max_frames 150, not a whole number of iterations of 60 frames. Resume with the settings the "
        "checkpoint was written with, or set model.max_frames to 120 or 180"
    )
    assert frames(tmp_path) == (60, 2), "nothing trained"


def test_a_resume_with_the_same_shape_keeps_its_budget(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(fit(tmp_path, 3, 10, 70))  # 70 is no multiple of 30: 3 iterations, as a run from scratch takes
    assert frames(tmp_path) == (90, 3)
    main(fit(tmp_path / "b", 3, 10, 30))
    main([*fit(tmp_path / "b", 3, 10, 70), "--ckpt_path", "last"])
    assert frames(tmp_path / "b") == (90, 3)


def test_another_world_size_is_checked_the_same_way():
    from types import SimpleNamespace

    from lightmarl.envs import PettingZooEnvConfig
    from lightmarl.errors import ConfigError
    from lightmarl.training import MARLModule

    module = MARLModule(env=PettingZooEnvConfig(num_envs=3), rollout_steps=10, max_frames=150)
    module._trainer = SimpleNamespace(world_size=2)  # type: ignore[assignment]  # resumed on 2 processes
    module.frames, module.iterations = 60, 2
    saved = {"env.num_envs": 3, "model.rollout_steps": 10, "world size": 1}
    with pytest.raises(
        ConfigError, match=r"resumed with world size 1 -> 2; the 60 frames done leave 90 .* to 120 or 180"
    ):
        module.budget.check_resume(saved, frames=60, iterations=2)
    module.max_frames = 180
    module.budget.check_resume(saved, frames=60, iterations=2)  # 2 iterations of 60 frames land on it
    assert module.budget.remaining_iterations(module.frames) == 2
