"""benchmarks/average_network.py: seeds added to an earlier result, and the mean row over seeds."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load_benchmark

average_network = load_benchmark("average_network.py")

SETTINGS = "python benchmarks/average_network.py --recipe r.yaml --frames 500000 --every 62 --distil-frames 60000"


def seed_result(mixture: float, average: float, live: float) -> dict:
    return {
        "mixture": mixture,
        "average network": average,
        "live": live,
        "mixture_size": 24.0,
        "frames": 503808.0,
        "wall_s": 1000.0,
        "load": [2.0, 2.0, 2.0],
    }


def test_the_mean_row_gives_each_exploitability_over_seeds_with_its_t_interval():
    per_seed = {"2": seed_result(0.5, 0.52, 0.9), "0": seed_result(0.3, 0.32, 0.7), "1": seed_result(0.4, 0.41, 0.8)}
    rows = average_network.table_rows(per_seed)
    assert [row[0] for row in rows[:3]] == ["0", "1", "2"]
    assert rows[1][5] == pytest.approx(0.01)
    mean = rows[3]
    assert mean[0] == "mean of 3 [95% t interval]"
    # mean 0.4, sample std 0.1: the half-width is t(0.975, 2) * 0.1 / sqrt(3) = 0.248.
    assert mean[3] == "0.400 [0.152, 0.648]"
    assert mean[5].startswith("+0.017 [")
    assert average_network.table_rows({"0": per_seed["0"]}) == rows[:1]


def test_added_seeds_keep_the_earlier_ones_only_from_the_same_settings(tmp_path, monkeypatch):
    earlier = {
        "command": f"{SETTINGS} --seeds 0 --name toy",
        "commit": "e223c9f518594fa2767429f991ac08f66c2cee0c",
        "date": "2026-12-02T07:19:35Z",
        "machine": {"load": [5.22, 5.91, 6.45]},
        "per_seed": {"0": {k: v for k, v in seed_result(0.386, 0.402, 0.683).items() if k != "load"}},
    }
    (tmp_path / "toy.json").write_text(json.dumps(earlier))
    monkeypatch.setattr(average_network, "RESULTS_DIR", tmp_path)
    kept = average_network.earlier_seeds("toy", f"{SETTINGS} --seeds 1 2 --name toy")
    assert kept["0"]["mixture"] == 0.386 and kept["0"]["load"] == [5.22, 5.91, 6.45]
    assert kept["0"]["measured"] == {"commit": earlier["commit"], "date": earlier["date"]}
    with pytest.raises(SystemExit, match="other settings"):
        average_network.earlier_seeds("toy", f"{SETTINGS.replace('500000', '1000000')} --seeds 1 --name toy")
