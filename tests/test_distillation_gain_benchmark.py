"""benchmarks/distillation_gain.py: the no-teacher arm is the same recipe minus distillation, and the logs are read right."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark_scripts import load_benchmark
from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]


gain = load_benchmark("distillation_gain.py")

TINY = [
    "--model.env.num_envs=4",
    "--model.rollout_steps=10",
    "--model.max_frames=120",
    "--model.iterations_per_epoch=3",
    "--evaluation.validation.episodes=2",
    "--model.algorithm.init_args.minibatch_size=40",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.enable_checkpointing=false",
]


@pytest.mark.parametrize("name", sorted(gain.RECIPES))
def test_the_no_teacher_arm_trains_the_same_student_without_distillation(name, tmp_path, monkeypatch):
    recipe = gain.Recipe.read(gain.RECIPES[name])
    assert recipe.student == "student" and recipe.teacher == "teacher"
    overrides = recipe.no_teacher_overrides()
    assert "distill" not in " ".join(overrides[1:]) and "clone" not in " ".join(overrides[1:])
    monkeypatch.chdir(tmp_path)
    for arm, extra in (("teacher", []), ("no_teacher", overrides)):
        run_dir = tmp_path / arm
        main(["fit", "--config", str(ROOT / recipe.path), *TINY, *extra, f"--trainer.default_root_dir={run_dir}"])
        value, frames = gain.last_evaluation(run_dir, recipe.student)
        assert frames == 120 and value < 0
        metrics = next(run_dir.glob("csv/version_*/metrics.csv")).read_text().splitlines()[0]
        taught = "distill_coeff" in metrics
        assert taught == (arm == "teacher"), metrics


def test_last_evaluation_reads_the_final_eval_row_and_the_frames_before_it(tmp_path):
    log = tmp_path / "csv" / "version_0"
    log.mkdir(parents=True)
    (log / "metrics.csv").write_text(
        "counters/frames,eval/student/episode_return,eval/teacher/episode_return\n"
        "800,,\n"
        ",-20.5,-11.0\n"
        "1600,,\n"
        ",-18.25,-11.0\n"
    )
    assert gain.last_evaluation(tmp_path, "student") == (-18.25, 1600)
    with pytest.raises(SystemExit, match="no eval/nobody/episode_return rows"):
        gain.last_evaluation(tmp_path, "nobody")


def test_a_variant_must_be_tagged_so_its_runs_do_not_mix_with_the_recipes(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gain.main(["--extra=--model.env.num_envs=8"])
    assert exit_info.value.code == 2
    assert "--tag" in capsys.readouterr().err


def test_a_recipes_table_is_written_as_a_result_the_docs_render(tmp_path):
    import importlib.util
    import json

    recipe = gain.Recipe.read(gain.RECIPES["kickstarter"])
    runs = {
        "teacher": [gain.RunResult(-11.4, 100_000, 130.0, "5"), gain.RunResult(-11.3, 100_000, 140.0, "5")],
        "no_teacher": [gain.RunResult(-15.1, 100_000, 100.0, "5"), gain.RunResult(-15.2, 100_000, 99.0, "5")],
    }
    lines = gain.table("kickstarter", recipe, runs, {"UniformRandomPolicy": -26.75})
    path = gain.write_table("toy_gain", lines, runs, ["--recipes", "kickstarter", "--write-result"], tmp_path)
    result = json.loads(path.read_text())
    assert result["command"] == "OMP_NUM_THREADS=1 python benchmarks/distillation_gain.py --recipes kickstarter"
    assert result["per_seed"]["no_teacher"]["1"]["eval_return"] == -15.2
    assert result["notes"].startswith("Gain (with − without teacher): +3.80")
    spec = importlib.util.spec_from_file_location("render_results", gain.ROOT / "scripts" / "render_results.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    rendered = [line for line in render.render(result).splitlines() if line.startswith("| student")]
    assert rendered == [line for line in lines if line.startswith("| student")]
