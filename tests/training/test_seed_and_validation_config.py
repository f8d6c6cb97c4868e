"""The seed reaches MARLModule as an argument, and validation reads the recipe's one ``evaluation:`` section.

* ``MARLModule(seed=...)`` seeds the training env copies and action streams; a stray
  ``PL_GLOBAL_SEED`` (what ``seed_everything`` writes) changes nothing; the ``lightmarl`` commands
  pass ``seed_everything`` when ``model.seed`` is unset.
* ``evaluation.validation`` is what ``validation_step`` plays; the same object drives the suite;
  a recipe still using ``model.eval_*`` fails with one line naming the key to use.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch import Trainer

from lightmarl.cli import LightmarlCLI, main
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation.scenarios import MOVED_SETTINGS, EvaluationConfig, ValidationConfig
from lightmarl.training.module import MARLModule

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "recipes" / "quickstart.yaml")
SPREAD = PettingZooEnvConfig(
    env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 3, "max_cycles": 5}, num_envs=2
)
RANDOM = [{"id": "main", "class_path": "lightmarl.policies.UniformRandomPolicy", "trainable": False}]


def _cli(*args: str) -> LightmarlCLI:
    return LightmarlCLI(MARLModule, args=["--config", QUICKSTART, "--trainer.logger=false", *args], run=False)


def test_the_env_copies_are_seeded_from_the_passed_seed_not_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PL_GLOBAL_SEED", "123")  # what a stray seed_everything(123) leaves behind
    seeds: list[int | None] = []
    make_vector = PettingZooEnvConfig.make_vector

    def recording(self, *args, **kwargs):
        seeds.append(kwargs.get("seed"))
        return make_vector(self, *args, **kwargs)

    monkeypatch.setattr(PettingZooEnvConfig, "make_vector", recording)
    mlp = [{"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [8]}}]
    module = MARLModule(env=SPREAD, policy_bindings=mlp, rollout_steps=5, max_frames=10, seed=5)
    module.algorithm.minibatch_size = 10
    Trainer(
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    ).fit(module)
    assert module.seed == 5 and module.frames == 10
    assert seeds[0] == 5, seeds  # the training envs: seed + num_envs * rank
    assert MARLModule(env=SPREAD, policy_bindings=RANDOM).seed == 0  # unset in Python: 0, not PL_GLOBAL_SEED


def test_the_cli_passes_seed_everything_unless_model_seed_is_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _cli("--seed_everything=7").model.seed == 7
    assert _cli("--seed_everything=7", "--model.seed=3").model.seed == 3
    drawn = _cli("--seed_everything=true")
    assert drawn.model.seed == drawn.config.seed_everything and isinstance(drawn.model.seed, int)


def test_validation_reads_the_evaluation_section(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = _cli("--evaluation.validation.episodes=3", "--evaluation.validation.winner=highest_return")
    assert cli.model.evaluation.validation == ValidationConfig(episodes=3, winner="highest_return")
    assert cli.model.evaluation == cli.config_init.evaluation  # one section, one configuration
    assert _cli().model.evaluation == EvaluationConfig()  # no section: the defaults


def test_validation_plays_its_episodes_and_logs_them_per_binding(tmp_path):
    module = MARLModule(
        env=SPREAD,
        policy_bindings=RANDOM,
        evaluation=EvaluationConfig(validation=ValidationConfig(episodes=3, seed=42)),
    )
    (logged,) = Trainer(
        logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path
    ).validate(module)
    assert logged["eval/main/episodes"] == 3.0
    again = MARLModule(
        env=SPREAD,
        policy_bindings=RANDOM,
        evaluation=EvaluationConfig(validation=ValidationConfig(episodes=3, seed=43)),
    )
    (other,) = Trainer(
        logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path
    ).validate(again)
    assert other["eval/main/episode_return"] != logged["eval/main/episode_return"]  # the seed is the config's


@pytest.mark.parametrize("old", sorted(MOVED_SETTINGS))
def test_an_old_validation_key_names_its_new_place(old, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "old.yaml"
    key = old.removeprefix("model.")
    value = {"eval_winner": "none", "eval_deterministic": "true"}.get(key, "4")
    recipe.write_text(f"model:\n  {key}: {value}\n")
    for args in (["--config", str(recipe)], [f"--{old}={value}"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", "--config", QUICKSTART, *args])
        assert exit_info.value.code == 2
        (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("lightmarl: error: ")]
        assert line.startswith(
            f"lightmarl: error: {old}: the validation episodes are set in the evaluation: section; "
            f"use {MOVED_SETTINGS[old]}"
        ), line
