"""benchmarks/league_robustness.py: tiny runs of the real recipes scored by exact and approximate exploitability; the tables."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load_benchmark

pytest.importorskip("pyspiel")
bench = load_benchmark("league_robustness.py")
#: a run of a few 64-frame iterations, a checkpoint after each.
TINY = [
    "--model.env.num_envs=4",
    "--model.rollout_steps=16",
    "--model.iterations_per_epoch=1",
    "--model.algorithm.init_args.minibatch_size=16",
]
SETTINGS = {"br_frames": [], "br_episodes": 1, "br_seed": 0, "games": 2, "curve_games": 0}


@pytest.mark.timeout(300)
def test_a_tiny_leduc_league_is_scored_by_exact_exploitability(tmp_path):
    from lightmarl.evaluation.exploitability import measure

    [fit] = bench.run_fits(
        ["league"], [0], 128, tmp_path, [*bench.callbacks_of("leduc_poker", 1), *TINY], 1,
        recipes=bench.recipes_of("leduc_poker"), name="league_robustness_leduc_poker", task="leduc_poker",
    )  # fmt: skip
    assert fit["frames"] == 128
    # The same run as a second method: the head to head of a policy against itself is worth exactly 0.
    scores = bench.score_seed("leduc_poker", 0, [fit, {**fit, "method": "selfplay"}], SETTINGS)
    run = scores["runs"]["league"]
    assert [f for f, _ in run["exploitability_curve"]] == [64.0, 128.0]  # measured every iteration, each once
    spiel = bench.spiel_of(bench.recipes_of("leduc_poker")["league"])
    last = tmp_path / "runs" / "league" / "seed_0" / "checkpoints" / "last.ckpt"
    assert run["final"] == pytest.approx(measure(spiel, bench.table_of(spiel, last)).exploitability, abs=1e-5)
    assert run["lowest"] == min(v for _, v in run["exploitability_curve"]) and 0 < run["final"] < 5
    assert {"main_default_0", "main_exploiter_default_0", "league_exploiter_default_0"} <= set(run["roles"])
    # Per epoch checkpoint: main's exploitability (as logged) and the exploiter's return, at most a best response's.
    exploiter = run["exploiter_curve"]
    assert [row[0] for row in exploiter] == [64, 128]
    assert exploiter[-1][1] == pytest.approx(run["final"], abs=1e-5)
    assert all(gain <= value + 1e-6 for _, value, gain in exploiter)
    assert "exploiter_curve" not in scores["runs"]["selfplay"]
    assert [(m["player"], m["opponent"]) for m in scores["head_to_head"]] == [
        ("league", "selfplay"),
        ("selfplay", "league"),
    ]
    assert all(m["expected_return"] == pytest.approx(0, abs=1e-6) for m in scores["head_to_head"])
    # Each role's payoff record against the live main player, read from the checkpoint, and the roles table.
    records = bench.records_against_main(fit["run"])
    assert {"main_exploiter_default_0", "league_exploiter_default_0"} <= set(records)
    assert all(sum(r[:3]) == pytest.approx(r[3]) and r[3] > 0 for r in records.values())
    rows = bench.role_rows({"0": {"runs": {"league": {**run, "records_against_main": records}}}})
    assert [r[0] for r in rows] == list(bench.LEAGUE_PLAYERS) and rows[0][-1] == "—"
    steps = run["roles"]["main_default_0"]["agent_steps"][-1][1]
    assert rows[0][1] == f"{steps:,.0f}" and "main " in rows[1][4]  # the main exploiter drew the main player


@pytest.mark.timeout(300)
def test_a_best_response_is_trained_against_a_tiny_connect_four_main_player(tmp_path):
    [fit] = bench.run_fits(
        ["selfplay"], [0], 128, tmp_path, TINY, 1, recipes=bench.recipes_of("connect_four"), name="robustness"
    )
    recipe = bench.recipes_of("connect_four")["selfplay"]
    block = bench.best_response(recipe, fit["run"], 128, 10, 0)
    # The same measurement again is read back from its report, another one is not.
    out = tmp_path / "runs" / "selfplay" / "seed_0" / "best_response_128"
    assert bench.read_best_response(out, 128, 10, 0)["value"]["mean"] == block["return"]
    assert bench.read_best_response(out, 128, 12, 0) is None and bench.read_best_response(out, 256, 10, 0) is None
    # One iteration at least: the recipe's 24 copies x 128 steps (the best response trains with the recipe's env).
    assert block["frames"] == 3072 and block["episodes"] == 10 and block["exploitability"] is None
    assert block["score"] == pytest.approx((block["return"] + 1) / 2)
    low, high = block["score_ci95"]
    assert 0 <= block["score"] <= 1 and low <= block["score"] <= high
    report = json.loads((out / "report.json").read_text())
    assert report["best_response"]["main"]["target"] == {"binding": "main", "policy": "weights"}


def test_a_seed_s_scores_are_kept_and_reused_while_the_settings_are_the_same(tmp_path, monkeypatch):
    calls = []

    def score(game, seed, fits, settings):
        calls.append(settings["games"])
        return {"runs": {}, "head_to_head": [], "games": settings["games"]}

    monkeypatch.setattr(bench, "score_seed", score)
    first = bench.scored_seed("connect_four", 0, [], SETTINGS, tmp_path)
    assert bench.scored_seed("connect_four", 0, [], SETTINGS, tmp_path) == first and calls == [2]
    assert bench.scored_seed("connect_four", 0, [], {**SETTINGS, "games": 4}, tmp_path)["games"] == 4
    assert calls == [2, 4]


def run(**scores) -> dict:
    return {"agent_steps": 100.0, "frames": 200.0, "train_s": 10.0, **scores}


# t(0.975, 2) = 4.303: the half width of a 95% t interval over 3 seeds with sd 0.1
HALF = 4.303 * 0.1 / 3**0.5


def test_the_best_response_table_holds_per_seed_scores_their_mean_and_t_interval():
    def blocks(seed: int) -> dict:
        return {
            "300": {"score": 0.6 + 0.1 * seed, "train_s": 5.0},
            "30": {"score": 0.5, "train_s": 1.0},
            **({"60": {"score": 0.5, "train_s": 1.0}} if seed else {}),  # a budget seed 0 lacks is left out
        }

    per_seed = {str(s): {"runs": {m: run(best_response=blocks(s)) for m in bench.METHODS}} for s in range(3)}
    rows = bench.best_response_rows(per_seed)
    labels = [bench.METHOD_LABELS[m] for m in bench.METHODS]
    assert [r[:2] for r in rows] == [[label, budget] for budget in (300, 30) for label in labels]
    assert rows[0][2] == "0.600 / 0.700 / 0.800" and rows[0][3] == pytest.approx(0.7)
    assert rows[0][4] == f"[{0.7 - HALF:.3f}, {0.7 + HALF:.3f}]" and rows[0][5:] == [5.0, 100.0, 200.0, 10.0]
    assert rows[3][4] == "[0.500, 0.500]" and len(rows[0]) == len(bench.BEST_RESPONSE_COLUMNS)


def test_the_leduc_tables_average_over_seeds():
    def leduc(seed: int, method: str) -> dict:
        curve = [[100.0, 2.0], [200.0, 1.0 + 0.1 * seed]]
        return run(exploitability_curve=curve, final=curve[-1][1], lowest=min(v for _, v in curve))

    per_seed = {
        str(s): {
            "runs": {m: leduc(s, m) for m in bench.METHODS},
            "head_to_head": [
                {"player": a, "opponent": b, "expected_return": 0.2 if a == "league" else -0.2}
                for a in bench.METHODS
                for b in bench.METHODS
                if a != b
            ],
        }
        for s in range(3)
    }
    per_seed["1"]["runs"]["league"]["exploiter_curve"] = [[100, 2.0, 1.0], [200, 1.0, 0.5]]
    per_seed["0"]["runs"]["league"]["exploiter_curve"] = [[100, 2.0, 0.5], [200, 1.0, 1.0]]
    per_seed["2"]["runs"]["league"]["exploiter_curve"] = [[200, 1.0, 0.0]]  # seed 2 kept one checkpoint
    rows = bench.exploitability_rows(per_seed)
    assert rows[0][1] == "1.000 / 1.100 / 1.200" and rows[0][2] == pytest.approx(1.1)
    assert rows[0][3] == f"[{1.1 - HALF:.3f}, {1.1 + HALF:.3f}]" and rows[0][4] == "1.000 / 1.100 / 1.200"
    columns, curve = bench.exploitability_curve_table(per_seed)
    assert [c if isinstance(c, str) else c["name"] for c in columns] == ["method", "100", "200"]
    assert curve[0][1:] == [pytest.approx(2.0), pytest.approx(1.1)]
    matches = bench.exact_match_rows(per_seed)
    assert len(matches) == 6 and matches[0][:3] == [
        bench.METHOD_LABELS["league"],
        bench.METHOD_LABELS["pfsp"],
        "0.200 / 0.200 / 0.200",
    ]
    assert matches[2][3] == pytest.approx(-0.2)
    # Only the checkpoint every seed has; the share is the mean of gain / exploitability.
    assert bench.exploiter_rows(per_seed) == [[200, "1.000 / 1.000 / 1.000", "1.000 / 0.500 / 0.000", 0.5]]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--game=go"], "invalid choice: 'go'"),
        (["--game=connect_four", "--frames=0"], "--frames 0"),
        (["--game=connect_four", "--br-frames=-1"], "--br-frames -1"),
        (["--game=leduc_poker", "--measure-every=0"], "--measure-every 0"),
        (["--game=connect_four", "--games=3"], "--games 3"),
        (["--game=connect_four", "--", "model.max_frames=5"], "'model.max_frames=5' is not a --key=value argument"),
    ],
)
def test_bad_flags_are_refused_by_name(flags, message, capsys):
    with pytest.raises(SystemExit):
        bench.main(flags)
    assert message in capsys.readouterr().err


def test_a_measurement_logged_again_at_later_iterations_is_one_point_of_its_curve(tmp_path):
    # Rows as a run wrote them while the logger repeated a measurement at every later iteration of the epoch.
    key = bench.EXPLOITABILITY
    csv = tmp_path / "csv" / "version_0" / "metrics.csv"
    csv.parent.mkdir(parents=True)
    rows = ["100,2.0,5.0,0", "200,2.0,5.0,1", "300,1.5,9.0,2", "400,1.5,9.0,3", "400,1.2,12.0,3"]
    csv.write_text(f"counters/frames,{key},{key}_at_s,step\n" + "\n".join(rows) + "\n")
    assert bench.exploitability_curve(tmp_path) == [[100, 2.0], [300, 1.5], [400, 1.2]]


def test_add_to_keeps_the_other_seeds_of_a_result_with_the_same_settings(tmp_path):
    settings = {**SETTINGS, "frames": 128, "overrides": [], "measure_every": 1}
    curve = [[1.0, 2.0], [2.0, 2.0], [3.0, 1.0]]  # written while a measurement repeated at every iteration

    def seed() -> dict:
        return {"runs": {"league": run(exploitability_curve=curve, final=1.0, lowest=1.0)}, "head_to_head": []}

    main = {"extra": {**settings, "game": "leduc_poker"}, "per_seed": {"0": seed(), "1": seed()}}
    roles = {"per_seed": {s: {"league": {"roles": {"main": {}}, "records_against_main": {"main": [1]}}} for s in "01"}}
    (tmp_path / "league_robustness_leduc_poker.json").write_text(json.dumps(main))
    (tmp_path / "league_robustness_leduc_poker_roles.json").write_text(json.dumps(roles))
    kept = bench.earlier_seeds("leduc_poker", settings, tmp_path, [1])
    assert list(kept) == ["0"]
    league = kept["0"]["runs"]["league"]
    assert league["exploitability_curve"] == [[1.0, 2.0], [3.0, 1.0]]
    assert league["roles"] == {"main": {}} and league["records_against_main"] == {"main": [1]}
    with pytest.raises(SystemExit, match="other settings"):
        bench.earlier_seeds("leduc_poker", {**settings, "frames": 256}, tmp_path, [1])
    with pytest.raises(SystemExit, match="no earlier result"):
        bench.earlier_seeds("connect_four", settings, tmp_path, [1])


def test_a_logged_curve_is_thinned_to_about_role_curve_points_its_ends_kept():
    series = [[float(i), float(i % 7)] for i in range(250)]
    kept = bench.thinned(series)
    assert len(kept) <= bench.ROLE_CURVE_POINTS + 1 and kept[0] == series[0] and kept[-1] == series[-1]
    assert bench.thinned(series[:50]) == series[:50]


def test_the_command_written_runs_every_seed_from_nothing():
    given = ["--game", "leduc_poker", "--seeds", "1", "2", "--frames", "1000000", "--workdir", "W", "--out-dir", "O"]
    assert bench.reproducing_command([*given, "--add-to"], [0, 1, 2]) == (
        "python benchmarks/league_robustness.py --game leduc_poker --seeds 0 1 2 --frames 1000000"
    )
    assert bench.reproducing_command(["--game=connect_four", "--seeds=1", "--add-to"], [0, 1]) == (
        "python benchmarks/league_robustness.py --game=connect_four --seeds 0 1"
    )
