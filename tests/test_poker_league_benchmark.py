"""benchmarks/poker_league.py at a tiny budget: every method runs and lands in the JSON result."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspiel")
pytest.importorskip("tree")  # dm-tree, which OpenSpiel's PyTorch NFSP needs

from benchmark_scripts import load_benchmark

bench = load_benchmark("poker_league.py")


@pytest.mark.timeout(300)
def test_the_three_methods_run_side_by_side_and_are_summarized(tmp_path):
    out = tmp_path / "result.json"
    result = bench.main(
        [
            "--game=kuhn_poker",
            "--seeds", "0",
            "--wall-s=4",
            "--parallel=3",
            "--nfsp-eval-every=200",
            f"--workdir={tmp_path}",
            f"--out={out}",
            "--",
            "--model.env.num_envs=8",
            "--model.rollout_steps=8",
            "--model.algorithm.init_args.minibatch_size=32",
        ]
    )  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert [r["method"] for r in result["runs"]] == ["league", "selfplay", "nfsp"]
    for run in result["runs"]:
        times = [t for t, _ in run["curve"]]
        assert run["curve"] and times == sorted(set(times)), run
        assert 0.0 <= run["final"] < 1.0 and run["final"] == run["curve"][-1][1]
    assert set(result["summary"]) == {"league", "selfplay", "nfsp"}
    assert result["summary"]["nfsp"]["n"] == 1 and result["summary"]["nfsp"]["ci95"] is None


def test_the_interval_over_seeds_is_a_t_interval():
    summary = bench.summarize([0.1, 0.2, 0.3])
    assert summary["mean"] == pytest.approx(0.2)
    # t(0.975, 2) = 4.303, sd 0.1, n 3
    assert summary["ci95"] == pytest.approx([0.2 - 4.303 * 0.1 / 3**0.5, 0.2 + 4.303 * 0.1 / 3**0.5], abs=1e-3)


def test_an_unknown_game_is_refused():
    with pytest.raises(SystemExit):
        bench.main(["--game=go", "--methods", "league"])
