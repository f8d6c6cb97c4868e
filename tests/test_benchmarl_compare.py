"""benchmarks/benchmarl/compare.py: both frameworks get the same task, and both logs are read right."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmark_scripts import load_benchmark
from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]


compare = load_benchmark("benchmarl/compare.py")


def resolved_env(task, capsys) -> dict:
    """The env section lightmarl builds for ``task``: its recipe with the task's overrides."""
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(ROOT / task.recipe), *task.lightmarl_overrides(), "--print_config"])
    return yaml.safe_load(capsys.readouterr().out)["model"]["env"]


@pytest.mark.parametrize("name", ["vmas_balance", "vmas_navigation"])
def test_vmas_tasks_give_lightmarl_benchmarls_task_settings(name, capsys):
    pytest.importorskip("vmas")
    task = compare.TASKS[name]
    env = resolved_env(task, capsys)["init_args"]
    settings = dict(task.settings)
    assert env["max_steps"] == settings.pop("max_steps") == 100
    assert env["scenario_kwargs"] == settings
    assert env["continuous_actions"] is True
    assert task.benchmarl_overrides()[0] == "task.max_steps=100"
    assert all(o.startswith("task.") and "=" in o for o in task.benchmarl_overrides())


def test_simple_spread_task_gives_lightmarl_benchmarls_task_settings(capsys):
    task = compare.TASKS["simple_spread"]
    env = resolved_env(task, capsys)["init_args"]
    assert env["env_kwargs"] == {"N": 3, "max_cycles": 100, "local_ratio": 0.5, "continuous_actions": True}
    assert "task.local_ratio=0.5" in task.benchmarl_overrides()


def test_benchmarl_curve_sums_collection_and_training_time(tmp_path):
    scalars = tmp_path / "exp" / "exp" / "scalars"
    scalars.mkdir(parents=True)
    series = {
        "eval_reward_episode_reward_mean": [(0, -1.0), (1, 0.5)],
        "counters_total_frames": [(0, 6000), (1, 12000)],
        "timers_collection_time": [(0, 2.0), (1, 3.0)],
        "timers_training_time": [(0, 10.0), (1, 20.0)],
    }
    for name, rows in series.items():
        (scalars / f"{name}.csv").write_text("".join(f"{s},{v}\n" for s, v in rows))
    curve = compare.read_benchmarl_curve(tmp_path, process_s=40.0)
    assert curve.frames == [6000, 12000]
    assert curve.train_s == [12.0, 35.0]
    assert curve.returns == [-1.0, 0.5]


def test_lightmarl_curve_takes_frames_and_seconds_before_each_evaluation(tmp_path):
    metrics = tmp_path / "csv" / "version_0" / "metrics.csv"
    metrics.parent.mkdir(parents=True)
    header = "counters/frames,eval/main/episode_return,step,time/collect_s,time/update_s"
    rows = ["3200,,0,1.0,2.0", "6400,,1,1.5,2.5", ",0.25,1,,", "9600,,2,1.0,1.0", ",0.75,2,,"]
    metrics.write_text("\n".join([header, *rows]) + "\n")
    curve = compare.read_lightmarl_curve(tmp_path, process_s=9.0)
    assert curve.frames == [6400, 9600]
    assert curve.train_s == [7.0, 9.0]
    assert curve.returns == [0.25, 0.75]


def test_time_to_target_and_return_at_a_budget():
    curve = compare.Curve(frames=[1, 2, 3], train_s=[10.0, 20.0, 30.0], returns=[0.1, 0.9, 0.5], process_s=35.0)
    assert compare.first_reaching(curve, 0.5) == (2, 20.0)
    assert compare.first_reaching(curve, 1.0) is None
    assert compare.value_at(curve, curve.train_s, 25.0) == 0.9
    assert compare.value_at(curve, curve.train_s, 5.0) is None


def test_seed_means_compare_at_benchmarls_evaluation_times():
    def curve(train_s, returns):
        return compare.Curve(frames=[6000, 12000], train_s=train_s, returns=returns, process_s=99.0)

    runs = {
        "benchmarl": {0: curve([10.0, 20.0], [0.2, 0.8]), 1: curve([12.0, 22.0], [0.4, 0.6])},
        "lightmarl": {0: curve([3.0, 6.0], [0.5, 0.9]), 1: curve([4.0, 8.0], [0.3, 0.7])},
    }
    lines = compare.seed_mean_table(runs)
    text = "\n".join(lines)
    assert "- benchmarl: 0.700 " in text and "- lightmarl: 0.800 " in text
    assert "lightmarl − BenchMARL: +0.100" in text
    # lightmarl's seed mean (0.4, then 0.8) first reaches BenchMARL's final mean 0.7 at its second
    # evaluation: 7 s on average, against BenchMARL's 21 s.
    assert "at 7 train s, 0.33 of BenchMARL's 21 s" in text
    # BenchMARL's evaluations at 11 s and 21 s (seed means); lightmarl's latest evaluations by then.
    assert "| 6,000 frames | 11 | 0.300 | 0.800 |" in lines
    assert "| 12,000 frames | 21 | 0.700 | 0.800 |" in lines
    assert compare.seed_mean_table({"benchmarl": runs["benchmarl"], "lightmarl": {0: runs["lightmarl"][0]}}) == []


def test_frame_budget_must_be_a_multiple_of_benchmarls_batch():
    with pytest.raises(SystemExit):
        compare.main(["--frames", "1000", "--frameworks", "lightmarl"])
