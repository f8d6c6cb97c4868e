"""Recipes carry only what differs: the run layout every recipe shares comes from the CLI, and a
wall-clock budget (``trainer.max_time``) stops a run on time with a checkpoint."""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import pytest
import torch
import yaml

from lightmarl.cli import main, run_name_of

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").rglob("*.yaml"))
TINY = [
    "--model.env.num_envs=2",
    "--model.rollout_steps=5",
    "--model.algorithm.init_args.minibatch_size=10",  # a minibatch fits in one rollout of 2 x 5 env steps
    "--model.max_frames=20",
    "--model.iterations_per_epoch=1",
    "--evaluation.validation.episodes=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]
#: what every recipe used to repeat, now the CLI's defaults (cli.TRAINER_DEFAULTS, cli.apply_run_defaults).
BOILERPLATE = ("default_root_dir", "logger", "max_epochs", "log_every_n_steps", "num_sanity_val_steps")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("recipes/quickstart.yaml", "quickstart"),
        ("/somewhere/recipes/two_trainers/ppo_run.yaml", "two_trainers/ppo_run"),
        ("experiments/my_run.yaml", "my_run"),
    ],
)
def test_the_run_name_is_the_recipes_path_under_recipes(path, name):
    assert run_name_of([path]) == name
    assert run_name_of([]) == "run"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT / "recipes")))
def test_recipes_carry_no_trainer_boilerplate(recipe):
    trainer = yaml.safe_load(recipe.read_text()).get("trainer") or {}
    assert not set(trainer) & set(BOILERPLATE), sorted(trainer)
    for callback in trainer.get("callbacks") or []:
        if callback["class_path"] == "lightning.pytorch.callbacks.ModelCheckpoint":
            # Only a best-by-metric checkpoint is not boilerplate: where it goes and last.ckpt are the defaults'.
            init_args = callback.get("init_args") or {}
            assert "monitor" in init_args and not {"dirpath", "save_last"} & set(init_args), init_args


def test_a_recipe_without_a_trainer_section_writes_where_the_readme_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(ROOT / "recipes/quickstart.yaml"), *TINY])
    run = tmp_path / "runs" / "quickstart"  # docs/getting_started.md, "Where things go"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "csv" / "version_0" / "metrics.csv").is_file()
    saved = yaml.safe_load((run / "csv" / "version_0" / "config.yaml").read_text())
    assert saved["run_name"] == "quickstart" and saved["trainer"]["default_root_dir"] == "runs/quickstart"
    assert list((run / "tensorboard" / "version_0").glob("events.out.tfevents.*"))
    # --run_name moves the run; `validate --ckpt_path last` finds the checkpoint of the same run name.
    main(["fit", "--config", str(ROOT / "recipes/quickstart.yaml"), "--run_name=renamed", *TINY])
    assert (tmp_path / "runs" / "renamed" / "checkpoints" / "last.ckpt").is_file()
    main(
        ["validate", "--config", str(ROOT / "recipes/quickstart.yaml"), "--run_name=renamed", "--ckpt_path=last", *TINY]
    )


def test_explicit_settings_win_over_the_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit", "--config", str(ROOT / "recipes/quickstart.yaml"), *TINY,
            "--trainer.default_root_dir=elsewhere", "--trainer.logger=false",
        ]
    )  # fmt: skip
    assert (tmp_path / "elsewhere" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "runs").exists() and not list(tmp_path.rglob("metrics.csv"))
    main(["fit", "--config", str(ROOT / "recipes/quickstart.yaml"), *TINY, "--trainer.enable_checkpointing=false"])
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


@pytest.mark.timeout(120)
def test_max_time_stops_a_run_on_time_with_a_checkpoint_it_resumes_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = str(ROOT / "recipes/quickstart.yaml")
    budget = [*TINY, "--model.max_frames=100000000", "--evaluation.validation.episodes=1"]
    start = time.monotonic()
    main(["fit", "--config", recipe, *budget, "--trainer.max_time=00:00:00:04"])
    elapsed = time.monotonic() - start
    # Setup and the last iteration come on top of the 4 s: generous, but far below the frame budget.
    assert elapsed < 40, elapsed
    last = tmp_path / "runs" / "quickstart" / "checkpoints" / "last.ckpt"
    stopped = torch.load(last, map_location="cpu", weights_only=False)["lightmarl"]["population"]["counters"]
    assert 0 < stopped["frames"] < 100_000_000 and stopped["frames"] == 10 * stopped["iterations"]
    # max_time is the total over resumes (Lightning's Timer keeps its elapsed time in the checkpoint).
    main(["fit", "--config", recipe, *budget, "--trainer.max_time=00:00:00:04", "--ckpt_path=last"])
    again = torch.load(last, map_location="cpu", weights_only=False)["lightmarl"]["population"]["counters"]
    main(["fit", "--config", recipe, *budget, "--trainer.max_time=00:00:00:07", "--ckpt_path=last"])
    resumed = torch.load(last, map_location="cpu", weights_only=False)["lightmarl"]["population"]["counters"]
    assert again["iterations"] <= stopped["iterations"] + 1 < resumed["iterations"]


def test_a_best_by_metric_checkpoint_goes_beside_last_in_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # The snippet of docs/getting_started.md itself ("Where things go"), so that it cannot drift from what works.
    section = (ROOT / "docs/getting_started.md").read_text().split("## Where things go")[1].split("\n## ")[0]
    snippet = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1))
    best = json.dumps(snippet["trainer"]["callbacks"])
    tiny = [*TINY, "--model.max_frames=60", "--evaluation.validation.episodes=2"]  # 6 epochs, each with an evaluation
    recipe = str(ROOT / "recipes/quickstart.yaml")
    main(["fit", "--config", recipe, "--run_name=picked", *tiny, "--trainer.callbacks", best])
    checkpoints = tmp_path / "runs" / "picked" / "checkpoints"
    # The recipe's callback writes into the run's folder (not Lightning's logger folder), and the
    # default last.ckpt is still kept beside it.
    assert (checkpoints / "best.ckpt").is_file() and (checkpoints / "last.ckpt").is_file()
    rows = list(csv.DictReader((tmp_path / "runs" / "picked" / "csv" / "version_0" / "metrics.csv").open()))
    returns = {int(r["epoch"]): float(r["eval/main/episode_return"]) for r in rows if r["eval/main/episode_return"]}
    assert len(returns) == 6
    kept = torch.load(checkpoints / "best.ckpt", map_location="cpu", weights_only=False)
    best_epoch = max(returns, key=lambda epoch: returns[epoch])
    assert kept["epoch"] == best_epoch and kept["lightmarl"]["population"]["counters"]["iterations"] == best_epoch + 1
    last = torch.load(checkpoints / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["lightmarl"]["population"]["counters"]["iterations"] == 6
    # validate plays the kept checkpoint like any other, e.g. on other episodes than those that chose it.
    main(
        [
            "validate", "--config", recipe, "--run_name=picked", *tiny,
            f"--ckpt_path={checkpoints / 'best.ckpt'}", "--evaluation.validation.seed=20000", "--trainer.callbacks", best,
        ]
    )  # fmt: skip


def test_print_config_shows_the_run_layout_that_runs(tmp_path, monkeypatch, capsys):
    # --print_config prints while parsing; it must show runs/<recipe>, not default_root_dir: null.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", str(ROOT / "recipes/quickstart.yaml"), "--print_config"])
    assert exit_.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["default_root_dir"] == "runs/quickstart"
    assert printed["run_name"] == "quickstart"
    assert {logger["init_args"]["save_dir"] for logger in printed["trainer"]["logger"]} == {"runs/quickstart"}
    # The printed config is a recipe that runs, to the same place.
    (tmp_path / "printed.yaml").write_text(yaml.safe_dump(printed))
    main(["fit", "--config", str(tmp_path / "printed.yaml"), *TINY])
    assert (tmp_path / "runs" / "quickstart" / "checkpoints" / "last.ckpt").exists()
    assert not (tmp_path / "runs" / "printed").exists()
