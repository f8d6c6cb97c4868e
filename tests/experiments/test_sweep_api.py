"""The parts of `lightmarl.experiments` that scripts build on: overrides from arguments, a run's logged rows, seed statistics."""

from __future__ import annotations

import os

import pytest

from lightmarl.errors import ConfigError
from lightmarl.experiments.runner import VALIDATE_DIR, fit_metrics, metric_rows
from lightmarl.experiments.spec import override_args, parse_override_args
from lightmarl.experiments.statistics import seed_difference, seed_mean


def test_override_arguments_round_trip_to_the_same_command_line():
    args = ["--model.env.num_envs=8", '--model.env.env_kwargs={"a": 1}', "--trainer.callbacks=[{x: y=z}]"]
    overrides = parse_override_args(args)
    assert overrides == {
        "model.env.num_envs": "8",
        "model.env.env_kwargs": '{"a": 1}',
        "trainer.callbacks": "[{x: y=z}]",
    }
    assert override_args(overrides) == args


@pytest.mark.parametrize("arg", ["model.max_frames=5", "--model.max_frames", "--=5"])
def test_an_argument_that_is_not_key_equals_value_is_refused_by_name(arg):
    with pytest.raises(ConfigError, match=f"extra: '{arg}' is not a --key=value argument"):
        parse_override_args([arg], where="extra")


def write_csv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header, *rows]) + "\n")


def test_metric_rows_read_every_fit_log_in_order_and_leave_validate_out(tmp_path):
    write_csv(tmp_path / "csv" / "version_0" / "metrics.csv", "counters/frames,eval/main/r,step", ["80,,0", ",0.5,0"])
    write_csv(tmp_path / "csv" / "version_1" / "metrics.csv", "counters/frames,eval/main/r,step", ["160,0.75,1"])
    write_csv(tmp_path / VALIDATE_DIR / "version_0" / "metrics.csv", "eval/main/r,step", ["9.0,0"])
    # a resumed run's log is the newer file
    first, second = tmp_path / "csv" / "version_0" / "metrics.csv", tmp_path / "csv" / "version_1" / "metrics.csv"
    os.utime(first, (1, 1))
    os.utime(second, (2, 2))
    rows = metric_rows(tmp_path)
    assert rows == [
        {"counters/frames": 80.0, "step": 0.0},
        {"eval/main/r": 0.5, "step": 0.0},
        {"counters/frames": 160.0, "eval/main/r": 0.75, "step": 1.0},
    ]
    assert fit_metrics(tmp_path) == {"eval/main/r": 0.75}
    assert metric_rows(tmp_path / "nothing") == []


def test_seed_mean_is_the_mean_with_a_t_interval_and_none_for_one_seed():
    summary = seed_mean([0.1, 0.2, 0.3])
    assert summary["n"] == 3 and summary["mean"] == pytest.approx(0.2) and summary["values"] == [0.1, 0.2, 0.3]
    # t(0.975, 2) = 4.303, sd 0.1, n 3
    half = 4.303 * 0.1 / 3**0.5
    assert summary["ci95"] == pytest.approx([0.2 - half, 0.2 + half], abs=1e-3)
    assert seed_mean([0.4]) == {"n": 1, "mean": 0.4, "ci95": None, "values": [0.4]}
    with pytest.raises(ValueError, match="no values"):
        seed_mean([])


def test_seed_difference_is_welchs_interval():
    gap = seed_difference([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert gap.difference == 2.0 and (round(gap.ci_low, 3), round(gap.ci_high, 3)) == (-2.155, 6.155)
