"""benchmarks/benchmarl/simple_spread_1m.py: the recipes it trains parse with its overrides, and its
table's means and intervals are the seeds'."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from benchmark_scripts import load_benchmark
from lightmarl.cli import main
from lightmarl.evaluation.statistics import t_interval

ROOT = Path(__file__).resolve().parents[1]


script = load_benchmark("benchmarl/simple_spread_1m.py")


@pytest.mark.parametrize("algorithm", ["mappo", "ippo"])
def test_each_algorithm_trains_its_recipe_with_only_budget_and_seed_changed(algorithm, capsys):
    overrides = script.EXTRA_OVERRIDES.get(algorithm, [])
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(ROOT / script.RECIPES[algorithm]), *overrides, "--print_config"])
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["model"]["env"]["init_args"]["env_kwargs"] == {"N": 3, "max_cycles": 25, "continuous_actions": False}
    expected_critic = {"mappo": "centralized", "ippo": "local"}[algorithm]
    assert config["model"]["policy_bindings"][0]["policy_kwargs"]["critic"] == expected_critic
    if algorithm == "ippo":
        assert config["evaluation"]["every_n_frames"] is None


def test_summary_reports_mean_and_t_interval_of_the_final_returns():
    def run(returns: list[float]) -> dict:
        frames = [20_000.0 * (i + 1) for i in range(len(returns))]
        return {"frames": frames, "train_s": [f / 1000 for f in frames], "returns": returns, "process_s": 99.0}

    results = {
        "mappo/seed0": run([-25.0, -20.0, -18.0]),
        "mappo/seed1": run([-24.0, -21.0, -19.0]),
        "mappo/seed2": run([-26.0, -22.0, -17.0]),
    }
    lines = script.summary(results, random=-26.75)
    row = next(line for line in lines if line.startswith("| mappo"))
    low, high = t_interval([-18.0, -19.0, -17.0])
    assert f"-18.00 [{low:.2f}, {high:.2f}]" in row
    assert "-18.00, -19.00, -17.00" in row
    assert "| 3 |" in row and "60,000" in row
    assert not any(line.startswith("| ippo") for line in lines)
    assert lines[-1].endswith("-26.75.")


def test_the_summary_is_written_as_a_result_the_docs_render(tmp_path):
    def run(returns: list[float]) -> dict:
        frames = [20_000.0 * (i + 1) for i in range(len(returns))]
        return {"frames": frames, "train_s": [f / 1000 for f in frames], "returns": returns, "process_s": 99.0}

    results = {"ippo/seed0": run([-25.0, -16.5]), "ippo/seed1": run([-24.0, -17.5])}
    lines = script.summary(results, random=-26.75)
    path = script.write_table("toy_1m", lines, results, ["--seeds", "0", "1", "--write-result"], -26.75, tmp_path)
    result = json.loads(path.read_text())
    assert result["command"] == "python benchmarks/benchmarl/simple_spread_1m.py --seeds 0 1"
    assert result["per_seed"]["ippo/seed1"]["returns"] == [-24.0, -17.5]  # the raw curves, not only the table
    spec = importlib.util.spec_from_file_location("render_results", ROOT / "scripts" / "render_results.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    rendered = [line for line in render.render(result).splitlines() if line.startswith("| ippo")]
    assert rendered == [line for line in lines if line.startswith("| ippo")]
    assert "-17.00" in rendered[0]
