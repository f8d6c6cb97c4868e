"""benchmarks/env_speed.py: the raw speed table of docs/environments.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
env_speed = load_benchmark("env_speed.py")


def test_every_measured_env_is_a_row_of_the_env_families_table():
    table = (ROOT / "docs" / "environments.md").read_text().split("## Env families", 1)[1]
    listed = set(re.findall(r"`([\w.]+)`", table))
    assert {env_fn for env_fn, _ in env_speed.ENVS} <= listed


def test_the_table_is_the_best_round_of_each_env_and_a_missing_family_is_skipped(tmp_path, monkeypatch):
    import results  # benchmarks/results.py: load_benchmark put benchmarks/ on sys.path

    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(
        env_speed, "ENVS", [("mpe2.simple_spread_v3.parallel_env", {"max_cycles": 5}), ("no_such_package.env", {})]
    )
    env_speed.main(["--seconds", "0.05", "--repeats", "2", "--write-result"])
    result = json.loads((tmp_path / "env_speed.json").read_text())
    name = "mpe2.simple_spread_v3.parallel_env"
    rates = [run[name] for run in result["per_seed"].values()]
    assert len(rates) == 2 and min(rates) > 0
    assert result["table"]["rows"] == [[f"`{name}`", max(rates)]]
    assert "Skipped: no_such_package.env" in result["notes"]


def test_bad_settings_stop_before_any_env_is_built():
    with pytest.raises(SystemExit) as stopped:
        env_speed.main(["--seconds", "0"])
    assert stopped.value.code == 2
