"""benchmarks/ppo_update_speed.py: the quickstart's PPO update, timed on a fixed rollout."""

from __future__ import annotations

import json

from benchmark_scripts import load_benchmark

ppo_update_speed = load_benchmark("ppo_update_speed.py")


def test_it_times_the_update_and_prints_the_median(capsys):
    ppo_update_speed.main(["--repeat", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("PPO update (quickstart, 800 env steps, 8 gradient steps): median")
    assert json.loads(lines[-1])["median_update_s"] > 0
