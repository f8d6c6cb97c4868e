"""Learning curves from CSVLogger files, evaluation figures and the ``lightmarl plot`` command."""

from __future__ import annotations

import doctest
from pathlib import Path

import numpy as np
import pytest
from lightning.pytorch.loggers import CSVLogger
from PIL import Image

from lightmarl.cli import main as lightmarl_main
from lightmarl.evaluation import curves as curves_module
from lightmarl.evaluation.curves import aggregate_seeds, find_metrics_files, learning_curves, read_metrics_csv
from lightmarl.evaluation.head_to_head import payoff_matrix
from lightmarl.evaluation.plot_cli import default_label, load_runs, plot_runs
from lightmarl.evaluation.plots import plot_payoff_heatmap, plot_report, plot_return_distributions
from lightmarl.evaluation.report import build_report, write_report
from lightmarl.evaluation.statistics import ScenarioEpisodes

RETURN = "collect/main/episode_return"
EVAL_RETURN = "eval/main/episode_return"


def write_run(save_dir: Path, seed: int, iterations: int = 8, slope: float = 1.0) -> Path:
    """One seed's metrics.csv, logged through Lightning's own CSVLogger the way MARLModule logs."""
    logger = CSVLogger(save_dir, name="csv")
    rng = np.random.default_rng(seed)
    for i in range(iterations):
        logger.log_metrics(
            {
                "counters/frames": 800.0 * (i + 1),
                "counters/iterations": float(i + 1),
                "time/collect_s": 0.25,
                "time/update_s": 0.05,
                RETURN: -30.0 + slope * i + rng.normal(),
            },
            step=i,
        )
        if i % 4 == 3:  # validation rows carry no counters, only the step
            logger.log_metrics({EVAL_RETURN: -28.0 + slope * i, "eval/main/episodes": 32.0}, step=i)
    logger.save()
    return Path(logger.log_dir) / "metrics.csv"


def assert_png(path: Path, min_bytes: int = 10_000) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert len(data) > min_bytes, (path, len(data))
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.width > 300 and image.height > 200


def test_module_examples():
    assert doctest.testmod(curves_module).failed == 0


def test_read_metrics_csv_and_x_axes(tmp_path):
    path = write_run(tmp_path / "ippo", seed=0)
    table = read_metrics_csv(path)
    assert RETURN in table.metrics and "step" not in table.metrics and "epoch" not in table.metrics
    x, y = table.series(RETURN, "frames")
    assert x.tolist() == [800.0 * (i + 1) for i in range(8)] and len(y) == 8
    # Validation rows take the frames of the training row with the same step.
    x_eval, y_eval = table.series(EVAL_RETURN, "frames")
    assert x_eval.tolist() == [3200.0, 6400.0] and y_eval.tolist() == [-25.0, -21.0]
    x_iter, _ = table.series(EVAL_RETURN, "iterations")
    assert x_iter.tolist() == [4.0, 8.0]
    x_time, _ = table.series(RETURN, "time")
    np.testing.assert_allclose(x_time, 0.3 * np.arange(1, 9))
    with pytest.raises(ValueError, match=r"no metric 'nope'; it has .*collect/main/episode_return"):
        table.series("nope")
    with pytest.raises(ValueError, match="x axis 'wall'"):
        table.series(RETURN, "wall")  # type: ignore[arg-type]


def test_metrics_files_are_found_per_seed(tmp_path):
    for seed in range(3):
        write_run(tmp_path / "mappo", seed)
    found = find_metrics_files(tmp_path / "mappo" / "csv")
    assert [p.parent.name for p in found] == ["version_0", "version_1", "version_2"]
    assert find_metrics_files(found[1].parent) == [found[1]]
    assert find_metrics_files(found[2]) == [found[2]]
    with pytest.raises(ValueError, match=r"empty: no metrics.csv"):
        find_metrics_files(tmp_path / "empty")
    assert default_label(tmp_path / "mappo" / "csv") == "mappo"
    assert default_label(found[0].parent) == "mappo"


def test_seeds_aggregate_into_a_band():
    shifted = [(np.array([0.0, 10.0, 20.0]), np.array([0.0, 1.0, 2.0]) + offset) for offset in (-1.0, 1.0)]
    curve = aggregate_seeds(shifted, points=5)
    assert curve.seeds == 2
    np.testing.assert_allclose(curve.mean, np.linspace(0.0, 2.0, 5))
    # Two seeds at ±1: s = √2, t(0.975; 1) = 12.706, half-width = 12.706 · √2 / √2.
    np.testing.assert_allclose(curve.high - curve.mean, 12.7062047, rtol=1e-6)
    single = aggregate_seeds(shifted[:1], points=5)
    assert single.seeds == 1 and np.array_equal(single.low, single.high)
    # A seed that stopped early limits the grid to the range every seed covers.
    short = aggregate_seeds([shifted[0], (np.array([0.0, 5.0]), np.array([0.0, 0.5]))], points=6)
    assert short.x[-1] == 5.0
    with pytest.raises(ValueError, match="no points"):
        aggregate_seeds([(np.array([]), np.array([]))])


def test_learning_curves_group_seeds_by_label(tmp_path):
    for seed in range(2):
        write_run(tmp_path / "mappo", seed, slope=1.0)
    write_run(tmp_path / "ippo", 7, slope=0.5)
    tables = load_runs([tmp_path / "mappo" / "csv", tmp_path / "ippo" / "csv"])
    curves = learning_curves(tables, RETURN, "frames", points=50)
    assert curves["mappo"].seeds == 2 and curves["ippo"].seeds == 1
    assert (curves["mappo"].high > curves["mappo"].low).all()
    assert curves["mappo"].mean[-1] > curves["ippo"].mean[-1]
    with pytest.raises(ValueError, match="share the label"):
        load_runs([tmp_path / "mappo" / "csv", tmp_path / "mappo" / "csv"])


def test_figures_are_pngs(tmp_path):
    payoff = payoff_matrix([("a", "b", "win"), ("b", "a", "loss"), ("a", "c", "draw"), ("c", "a", "draw")])
    assert_png(plot_payoff_heatmap(payoff, tmp_path / "payoff.png"))
    rng = np.random.default_rng(0)
    returns = {
        "spread": {"main": rng.normal(-20, 3, 40).tolist(), "npc": rng.normal(-30, 2, 40).tolist()},
        "replace_one": {"main": rng.normal(-22, 3, 40).tolist()},
    }
    assert_png(plot_return_distributions(returns, tmp_path / "box.png"))
    assert_png(plot_return_distributions(returns, tmp_path / "violin.png", kind="violin"))
    with pytest.raises(ValueError, match="kind"):
        plot_return_distributions(returns, tmp_path / "x.png", kind="bar")  # type: ignore[arg-type]
    episodes = ScenarioEpisodes(returns={"a": [1.0, 0.0], "b": [0.0, 1.0]}, lengths={"a": [5, 6], "b": [5, 6]})
    report = build_report({"a vs b": episodes}, "env", {"a vs b": [("a", "b", "win"), ("b", "a", "win")]})
    written = plot_report(report, tmp_path / "report")
    assert [p.name for p in written] == ["returns.png", "payoff_a_vs_b.png"]
    for path in written:
        assert_png(path, min_bytes=5_000)


def test_plot_command_writes_comparison_pngs(tmp_path, capsys):
    for seed in range(2):
        write_run(tmp_path / "runs" / "mappo", seed)
        write_run(tmp_path / "runs" / "ippo", 10 + seed, slope=0.5)
    out = tmp_path / "plots"
    runs = [str(tmp_path / "runs" / name / "csv") for name in ("ippo", "mappo")]
    lightmarl_main(["plot", *runs, "--metric", RETURN, "--x", "frames", "--out", str(out)])
    written = capsys.readouterr().out.split()
    assert written == [str(out / "collect_main_episode_return_frames.png")]
    assert_png(Path(written[0]))
    # Default metrics: every */episode_return all runs logged; time on the x axis.
    lightmarl_main(["plot", *runs, "--x", "time", "--out", str(out)])
    names = sorted(Path(p).name for p in capsys.readouterr().out.split())
    assert names == ["collect_main_episode_return_time.png", "eval_main_episode_return_time.png"]
    report = build_report({"s": ScenarioEpisodes(returns={"a": [1.0, 2.0]}, lengths={"a": [3, 4]})}, "env")
    report_path = write_report(report, tmp_path / "report.json")
    lightmarl_main(["plot", "--report", str(report_path), "--out", str(out)])
    assert capsys.readouterr().out.split() == [str(out / "returns.png")]


def test_plot_command_errors_are_one_line(tmp_path, capsys):
    write_run(tmp_path / "runs" / "mappo", 0)
    run = str(tmp_path / "runs" / "mappo" / "csv")
    cases = [
        ([str(tmp_path / "nothing")], ["nothing: no metrics.csv"]),
        ([run, "--metric", "collect/main/episode_retrun"], ["no metric 'collect/main/episode_retrun'", RETURN]),
        ([], ["give run folders"]),
        ([run, run], ["share the label"]),
    ]
    for args, expected in cases:
        with pytest.raises(SystemExit) as stopped:
            lightmarl_main(["plot", *args, "--out", str(tmp_path / "plots")])
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("lightmarl plot: error: "), err
        for text in expected:
            assert text in err, (text, err)
    assert not (tmp_path / "plots").exists()


def test_curves_need_overlapping_seeds(tmp_path):
    # A short run validates once: its eval curve is one point per seed, left out of the default metrics.
    short = tmp_path / "short" / "csv"
    write_run(tmp_path / "short", 0, iterations=4)
    write_run(tmp_path / "short", 1, iterations=4)
    written = plot_runs([short], tmp_path / "plots")
    assert [p.name for p in written] == ["collect_main_episode_return_frames.png"]
    # Asked for explicitly on seeds whose x ranges do not overlap, the error names metric and label.
    tables = load_runs([short])
    tables["short"][1].columns[EVAL_RETURN][:] = np.nan
    tables["short"][1].columns[EVAL_RETURN][-1] = -20.0  # the second seed validated at a later frame count
    tables["short"][1].columns["counters/frames"][-2] = 9999.0
    with pytest.raises(ValueError, match=r"'eval/main/episode_return' of 'short' over frames: .*do not overlap"):
        learning_curves(tables, EVAL_RETURN)
