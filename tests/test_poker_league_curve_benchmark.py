"""benchmarks/poker_league_curve.py: a run's live binding and mixture against a baseline at equal frames."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load_benchmark

bench = load_benchmark("poker_league_curve.py")


def result(method: str, curves: dict[str, list[float]], live: list[float] | None = None) -> dict:
    runs = {name: {"curve": [[10.0 * i, v] for i, v in enumerate(values)]} for name, values in curves.items()}
    if live is not None:
        runs[method]["live_curve"] = [[10.0 * i, v, 100.0 * (i + 1)] for i, v in enumerate(live)]
    return {"command": f"python benchmarks/poker_league.py --methods {' '.join(curves)}", "per_seed": {"0": runs}}


def test_rows_pair_the_kth_measurements_and_leave_unreached_frames_empty():
    run = result("mmd", {"mmd": [0.9, 0.5]}, live=[1.0, 0.6])
    baseline = {
        "per_seed": {
            "0": {"league": {"curve": [[1, 0.8], [2, 0.4], [3, 0.3]]}, "selfplay": {"curve": [[1, 0.7], [2, 0.6]]}},
            "1": {"league": {"curve": [[1, 0.6], [2, 0.2], [3, 0.1]]}, "selfplay": {"curve": [[1, 0.5], [2, 0.4]]}},
        }
    }
    rows = bench.curve_rows(run, "mmd", baseline, [100, 200, 300], 100)
    assert rows[0] == [100, 0.9, 1.0, pytest.approx(0.7), pytest.approx(0.6)]
    assert rows[1] == [200, 0.5, 0.6, pytest.approx(0.3), pytest.approx(0.5)]
    assert rows[2] == [300, None, None, pytest.approx(0.2), None]


def test_the_result_is_written_and_frames_off_the_measurement_grid_are_refused(tmp_path):
    run, baseline = tmp_path / "run.json", tmp_path / "baseline.json"
    run.write_text(json.dumps(result("mmd", {"mmd": [0.9]}, live=[1.0])))
    baseline.write_text(json.dumps(result("league", {"league": [0.8], "selfplay": [0.7]})))
    common = ["--result", str(run), "--baseline", str(baseline), "--every", "1", "--frames-per-iteration", "100"]
    path = bench.main([*common, "--at", "100", "--name", "curve", "--directory", str(tmp_path)])
    written = json.loads(path.read_text())
    assert written["table"]["rows"] == [[100, 0.9, 1.0, 0.8, 0.7]]
    with pytest.raises(SystemExit):
        bench.main([*common, "--at", "150", "--name", "curve", "--directory", str(tmp_path)])
