"""The sweep report's statistics, on run directories written by hand (known scores, known estimates)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lightmarl.experiments import statistics
from lightmarl.experiments.report import build_report, write_report
from lightmarl.experiments.runner import run_directory, write_state
from lightmarl.experiments.spec import parse_sweep

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "recipes" / "quickstart.yaml")
METRIC = "eval/main/episode_return"


def make_sweep(tmp_path: Path, scores: dict[tuple[str, str], list[float]], normalize=None):
    """A sweep of methods x tasks whose done runs scored ``scores[(method, task)]`` (one value per seed),
    each with a metrics.csv validated at 100 and 200 frames (the final score at 200, half of it at 100)."""
    seeds = max(len(v) for v in scores.values())
    configs = [
        {"name": f"{method}_{task}", "recipe": QUICKSTART, "method": method, "task": task}
        for method, task in sorted(scores)
    ]
    raw = {"seeds": list(range(seeds)), "configs": configs, "out_dir": str(tmp_path / "sweep")}
    if normalize:
        raw["score"] = {"normalize": normalize}
    spec = parse_sweep(raw, default_name="t", where="t.yaml")
    for run in spec.runs():
        values = scores[(run.method, run.task)]
        run_dir = run_directory(spec, run)
        if run.seed >= len(values):
            continue  # never ran
        value = values[run.seed]
        write_state(
            run_dir,
            {
                "run_id": run.run_id, "config": run.config, "method": run.method, "task": run.task, "seed": run.seed,
                "status": "done", "error": None, "wall_s": 1.0, "frames": 200.0,
                "metrics": {METRIC: value, "eval/main/episodes": 2.0},
            },
        )  # fmt: skip
        csv_dir = run_dir / "csv" / "version_0"
        csv_dir.mkdir(parents=True)
        rows = ["step,epoch,counters/frames,eval/main/episode_return", "1,0,100.0,", f"1,0,,{value / 2}"]
        rows += ["3,1,200.0,", f"3,1,,{value}"]
        (csv_dir / "metrics.csv").write_text("\n".join(rows) + "\n")
    return spec


def test_estimates_match_their_definitions(tmp_path):
    spec = make_sweep(tmp_path, {("a", "t1"): [0.0, 1.0, 2.0, 3.0], ("b", "t1"): [-4.0, -3.0, -2.0, -1.0]})
    report = build_report(spec, reps=500)
    a, b = report["methods"]["a"], report["methods"]["b"]
    assert a["runs"] == 4 and a["scores"] == [[0.0], [1.0], [2.0], [3.0]]
    assert a["IQM"]["value"] == pytest.approx(1.5)  # the middle half: 1 and 2
    assert a["mean"]["value"] == pytest.approx(1.5) and a["median"]["value"] == pytest.approx(1.5)
    assert b["IQM"]["value"] == pytest.approx(-2.5)
    assert 0.0 <= a["IQM"]["ci"][0] <= 1.5 <= a["IQM"]["ci"][1] <= 3.0
    assert "optimality gap" not in a  # scores are not normalized
    (pair,) = report["probability_of_improvement"]
    assert (pair["x"], pair["y"], pair["value"]) == ("a", "b", 1.0)  # every run of a beats every run of b
    curve = report["sample_efficiency"]["a"]
    assert curve["frames"] == [100.0, 200.0]
    assert curve["iqm"] == pytest.approx([0.75, 1.5])
    profile = report["performance_profiles"]
    assert profile["a"]["profile"][0] == 1.0 and profile["b"]["profile"][-1] == 0.0


def test_normalized_scores_over_tasks_and_left_out_runs(tmp_path):
    spec = make_sweep(
        tmp_path,
        {("a", "t1"): [10.0, 20.0, 30.0], ("a", "t2"): [0.5, 1.0], ("b", "t1"): [0.0, 10.0], ("b", "t2"): [0.0, 0.0]},
        normalize={"t1": {"random": 0.0, "reference": 20.0}, "t2": {"random": 0.0, "reference": 1.0}},
    )
    report = build_report(spec, reps=500)
    assert report["normalized"] and report["tasks"] == ["t1", "t2"]
    a = report["methods"]["a"]
    assert a["scores"] == [[0.5, 0.5], [1.0, 1.0]]  # a's third t1 seed has no t2 partner: left out
    assert any("1 run(s) of t1 left out" in note for note in report["notes"])
    assert a["mean"]["value"] == pytest.approx(0.75)
    assert a["optimality gap"]["value"] == pytest.approx(0.25)  # mean shortfall below 1
    b = report["methods"]["b"]
    assert b["optimality gap"]["value"] == pytest.approx(1 - 0.125)


def test_intervals_are_rliables_stratified_bootstrap():
    """The same estimate and interval as rliable's own call on the same scores and seed (the README's recipe)."""
    from rliable import library, metrics

    rng = np.random.default_rng(0)
    scores = {"x": rng.normal(1.0, 0.5, size=(5, 3)), "y": rng.normal(0.8, 0.5, size=(5, 3))}
    ours = statistics.aggregates(scores, reps=300, seed=3)
    assert statistics.aggregates(scores, reps=300, seed=3) == ours  # reproducible
    # rliable 1.2.0's stratified bootstrap resamples with np.random whatever random_state it is given.
    np.random.seed(3)
    points, cis = library.get_interval_estimates(
        scores,
        lambda s: np.array([metrics.aggregate_iqm(s)]),
        reps=300,
        random_state=np.random.RandomState(3),
    )
    assert ours["x"]["IQM"]["value"] == pytest.approx(points["x"][0])
    assert ours["x"]["IQM"]["ci"] == pytest.approx([cis["x"][0][0], cis["x"][1][0]])
    # A stratified bootstrap keeps every task in every resample: a task-wise constant shift moves the interval by it.
    alone = statistics.aggregates({"x": scores["x"]}, reps=300, seed=3)
    shifted = statistics.aggregates({"x": scores["x"] + 1.0}, reps=300, seed=3)
    assert shifted["x"]["mean"]["ci"] == pytest.approx([v + 1.0 for v in alone["x"]["mean"]["ci"]])


def test_write_report_writes_tables_and_plots(tmp_path):
    spec = make_sweep(tmp_path, {("a", "t1"): [1.0, 2.0, 3.0], ("b", "t1"): [0.0, 1.0, 1.5]})
    written = write_report(spec, reps=200)
    assert [p.name for p in written] == [
        "report.json", "report.md", "aggregates.png", "performance_profiles.png", "sample_efficiency.png"
    ]  # fmt: skip
    table = (spec.out_dir / "report" / "report.md").read_text()
    assert "| a | 3 | 2.000 [" in table and "| P(X > Y) | X | Y |" in table
    assert json.loads((spec.out_dir / "report" / "report.json").read_text())["metric"] == METRIC


def test_a_report_without_scores_names_the_metric(tmp_path):
    spec = make_sweep(tmp_path, {("a", "t1"): [1.0]})
    with pytest.raises(ValueError, match="eval/other/return"):
        build_report(spec, metric="eval/other/return")
