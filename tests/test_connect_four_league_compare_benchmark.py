"""benchmarks/connect_four_league_compare.py: a tiny run trained, scored and tabulated; the table's arithmetic."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load_benchmark

bench = load_benchmark("connect_four_league_compare.py")
#: a run of a few 64-frame iterations, a checkpoint after each.
TINY = [
    "--model.env.num_envs=4",
    "--model.rollout_steps=16",
    "--model.iterations_per_epoch=1",
    "--model.algorithm.init_args.minibatch_size=16",
]


@pytest.mark.timeout(300)
def test_a_tiny_run_is_trained_scored_and_tabulated(tmp_path):
    [fit] = bench.run_fits(["selfplay"], [0], 128, tmp_path, TINY, parallel=1)
    assert fit["run"] == str(tmp_path / "runs" / "selfplay" / "seed_0")  # a sweep's run directory
    state = json.loads((tmp_path / "runs" / "selfplay" / "seed_0" / "sweep_run.json").read_text())
    assert state["status"] == "done" and fit["train_s"] == state["wall_s"]
    assert fit["frames"] == 128 and fit["agent_steps"] == 128  # naive self-play acts in every turn
    assert [f for f, _ in fit["logged"]["agent_steps"]] == [64.0, 128.0]
    assert [f for f, _ in bench.checkpoints_by_frames(fit["run"])] == [64, 128]
    scored = bench.score_run(("selfplay", 0, fit["run"], 4, 2, 1, 0, 1, 20_000))
    for opponent in ("heuristic", "search"):
        match = scored[opponent]
        assert match["games"] == 4 and sum(match["wdl"]) == 4
        assert match["score"] == pytest.approx((match["wdl"][0] + match["wdl"][1] / 2) / 4)
    assert [f for f, _ in scored["curve"]] == [64, 128] and all(0 <= v <= 1 for _, v in scored["curve"])
    match = bench.head_to_head((0, "selfplay", fit["run"], "pfsp", fit["run"], 4, 20_000))
    assert match["player"] == "selfplay" and match["opponent"] == "pfsp" and match["games"] == 4
    # The same folder again: the sweep skips the finished run and reads the same curves.
    [again] = bench.run_fits(["selfplay"], [0], 128, tmp_path, TINY, parallel=1)
    assert again == fit


def match(score: float, games: int = 10) -> dict:
    return {"score": score, "ci95": [score, score], "games": games, "wdl": [0, 0, games]}


def test_the_table_holds_every_match_with_its_mean_and_t_interval_over_seeds():
    per_seed = {
        str(seed): {
            "runs": {
                m: {"heuristic": match(0.1 * (seed + 1)), "search": match(0.5), "curve": []} for m in bench.METHODS
            },
            "head_to_head": [
                {"player": a, "opponent": b, **match(0.9 if a == "league" else 0.3)}
                for a in bench.METHODS
                for b in bench.METHODS
                if a != b
            ],
        }
        for seed in range(3)
    }
    rows = bench.result_rows(per_seed, "search")
    assert len(rows) == 3 + 3 + 6
    first = rows[0]
    assert first[:3] == [bench.METHOD_LABELS["league"], "heuristic (win, block, else random)", "0.100 / 0.200 / 0.300"]
    # t(0.975, 2) = 4.303, sd 0.1, n 3
    half = 4.303 * 0.1 / 3**0.5
    assert first[3] == pytest.approx(0.2) and first[4] == f"[{0.2 - half:.3f}, {0.2 + half:.3f}]" and first[5] == 10
    assert rows[3][1] == "search" and rows[3][4] == "[0.500, 0.500]"
    head = rows[6:]
    assert [r[0] for r in head[:2]] == [bench.METHOD_LABELS["league"]] * 2 and head[0][3] == pytest.approx(0.9)
    assert head[0][1] == f"{bench.METHOD_LABELS['pfsp']}, sampling" and head[2][3] == pytest.approx(0.3)


def test_the_curve_table_averages_each_checkpoint_over_seeds():
    per_seed = {
        "0": {"runs": {"league": {"curve": [[64, 0.2], [128, 0.4]]}}},
        "1": {"runs": {"league": {"curve": [[64, 0.4], [128, 0.8]]}}},
    }
    columns, rows = bench.curve_table(per_seed)
    assert [c if isinstance(c, str) else c["name"] for c in columns] == ["method", "64", "128"]
    assert rows == [[bench.METHOD_LABELS["league"], pytest.approx(0.3), pytest.approx(0.6)]]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--games=3"], "--games 3"),
        (["--curve-games=5"], "--curve-games 5"),
        (["--frames=0"], "--frames 0"),
        (["--", "model.max_frames=5"], "'model.max_frames=5' is not a --key=value argument"),
    ],
)
def test_bad_flags_are_refused_by_name(flags, message, capsys):
    with pytest.raises(SystemExit):
        bench.main(flags)
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_three_methods_run_end_to_end(tmp_path):
    out = tmp_path / "result.json"
    result = bench.main(
        ["--frames=128", "--seeds", "0", "--games=4", "--curve-games=2", "--parallel=2",
         f"--workdir={tmp_path}", f"--out={out}", "--", *TINY]
    )  # fmt: skip
    assert json.loads(out.read_text()) == result
    assert list(result["per_seed"]["0"]["runs"]) == list(bench.METHODS)
    assert len(result["per_seed"]["0"]["head_to_head"]) == 6 and len(result["table"]["rows"]) == 12
    curves = json.loads((tmp_path / "result_curves.json").read_text())
    assert [row[0] for row in curves["table"]["rows"]] == [bench.METHOD_LABELS[m] for m in bench.METHODS]
