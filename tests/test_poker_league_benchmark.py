"""benchmarks/poker_league.py at a tiny budget: every method runs and lands in the JSON result."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspiel")
pytest.importorskip("tree")  # dm-tree, which OpenSpiel's PyTorch NFSP needs

from benchmark_scripts import load_benchmark

bench = load_benchmark("poker_league.py")


@pytest.mark.timeout(300)
@pytest.mark.two_processes
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
            # A measurement every iteration: a loaded machine may run only a few in the 4 seconds.
            "--trainer.callbacks=[{class_path: lightmarl.training.exploitability.OpenSpielExploitability, "
            "init_args: {binding: main, every_n_iterations: 1}}]",
        ]
    )  # fmt: skip
    assert json.loads(out.read_text()) == result
    assert result["name"] == "result" and result["command"].startswith("python benchmarks/poker_league.py --game")
    runs = result["per_seed"]["0"]
    assert list(runs) == ["league", "selfplay", "nfsp"]
    for run in runs.values():
        times = [t for t, _ in run["curve"]]
        assert run["curve"] and times == sorted(set(times)), run
        assert 0.0 <= run["final"] < 1.0 and run["final"] == run["curve"][-1][1]
        assert run["best"] == min(v for _, v in run["curve"])
    assert result["table"]["rows"] == bench.result_rows(result["per_seed"])
    assert [row[0] for row in result["table"]["rows"]] == [bench.METHOD_LABELS[m] for m in runs]
    assert [row[2] for row in result["table"]["rows"]] == [r["final"] for r in runs.values()]
    assert result["table"]["rows"][2][3] is None  # one seed: no interval
    assert set(result["extra"]["summary"]) == {"league", "selfplay", "nfsp"}
    assert result["extra"]["summary"]["nfsp"]["n"] == 1 and result["extra"]["summary"]["nfsp"]["ci95"] is None
    # The lightmarl methods ran as a sweep: a run directory, log and state per run; run again, none retrains.
    for method in ("league", "selfplay"):
        state = json.loads((tmp_path / "runs" / method / "seed_0" / "sweep_run.json").read_text())
        assert state["status"] == "done" and runs[method]["process_s"] == state["wall_s"]
    again = bench.run_all("kuhn_poker", ["league", "selfplay"], [0], 4, tmp_path, [], 2, 200)
    assert [r["curve"] for r in again] == [runs["league"]["curve"], runs["selfplay"]["curve"]]
    for method in ("league", "selfplay"):
        assert (tmp_path / "runs" / method / "seed_0" / "sweep.log").read_text().count("lightmarl sweep: fit:") == 1


def test_the_interval_over_seeds_is_a_t_interval():
    summary = bench.summarize([0.1, 0.2, 0.3])
    assert summary["mean"] == pytest.approx(0.2)
    # t(0.975, 2) = 4.303, sd 0.1, n 3
    assert summary["ci95"] == pytest.approx([0.2 - 4.303 * 0.1 / 3**0.5, 0.2 + 4.303 * 0.1 / 3**0.5], abs=1e-3)


def test_an_unknown_game_is_refused():
    with pytest.raises(SystemExit):
        bench.main(["--game=go", "--methods", "league"])


def test_an_out_path_that_cannot_name_a_result_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--methods", "nfsp", f"--out={tmp_path / 'poker league.json'}"])
    assert "--out" in capsys.readouterr().err


def test_the_table_is_the_mean_and_t_interval_of_the_finals_per_method():
    curve = [[1.0, 0.5], [2.0, 0.2], [3.0, 0.3]]
    per_seed = {
        str(seed): {"league": {"final": final, "curve": curve, "best": 0.2, "frames": 100.0 * (seed + 1)}}
        for seed, final in enumerate([0.1, 0.2, 0.3])
    }
    [row] = bench.result_rows(per_seed)
    assert row[0] == bench.METHOD_LABELS["league"] and row[1] == "0.100 / 0.200 / 0.300"
    assert row[2] == pytest.approx(0.2) and row[3] == "[-0.048, 0.448]"
    assert row[4] == "0.200 / 0.200 / 0.200" and row[5] == "200 frames"
    assert len(row) == 6 and bench.columns_of(per_seed) == bench.COLUMNS  # no live binding recorded: no column


@pytest.mark.timeout(120)
def test_nfsp_plays_goofspiel_turn_by_turn_as_its_recipe_names_it():
    # Imperfect-information Goofspiel is a simultaneous-move game: NFSP plays and is measured on its turn-based conversion.
    game = bench.spiel_game_of("goofspiel").measured
    assert str(game).startswith("turn_based_simultaneous_game(game=goofspiel(") and "imp_info=True" in str(game)
    run = bench.run_nfsp("goofspiel", 0, 2.0, 100)
    assert run["episodes"] > 0 and run["curve"]
    assert 0.0 < run["final"] < 1.0  # win/loss returns; uniform random play is 0.708
    # Each seed its own networks: NFSP reseeds the global generators itself, and this game has no chance
    # nodes, so seeds that shared its default seed played and measured the same.
    other = bench.run_nfsp("goofspiel", 1, 0.5, 100)
    assert other["curve"][0][1] != pytest.approx(run["curve"][0][1], abs=1e-6)


def test_the_live_binding_is_reported_beside_the_shown_mixture():
    per_seed = {
        str(seed): {"mmd": {"final": 0.2, "curve": [[1.0, 0.2]], "best": 0.2, "frames": 10.0, "live_final": live}}
        for seed, live in enumerate([0.5, 0.7])
    }
    [row] = bench.result_rows(per_seed)
    assert row[0] == bench.METHOD_LABELS["mmd"] and row[6] == "0.500 / 0.700"
    assert bench.columns_of(per_seed)[-1] == bench.LIVE_COLUMN


def test_the_mmd_method_runs_the_games_mmd_recipe():
    assert bench.recipe_of("leduc_poker", "mmd").name == "league_leduc_poker_mmd.yaml"
    assert bench.recipe_of("leduc_poker", "mmd").exists()
    assert bench.recipe_of("kuhn_poker", "league").name == "league_kuhn_poker.yaml"
    with pytest.raises(SystemExit):  # no Kuhn MMD recipe: refused before anything runs
        bench.main(["--game=kuhn_poker", "--methods", "mmd"])


@pytest.mark.timeout(120)
def test_add_to_replaces_one_methods_runs_and_keeps_the_others(tmp_path, capsys):
    out = tmp_path / "kuhn.json"
    league = {"final": 0.05, "best": 0.04, "curve": [[1.0, 0.05]], "frames": 100.0}
    old_nfsp = {"final": 0.9, "best": 0.9, "curve": [[1.0, 0.9]], "episodes": 10}
    settings = {"game": "kuhn_poker", "wall_s": 1.0, "nfsp_eval_every": 100, "overrides": [], "parallel": 2}
    first = "python benchmarks/poker_league.py --game kuhn_poker --seeds 0 1 --wall-s 1 --nfsp-eval-every 100"
    (tmp_path / "kuhn.json").write_text(
        json.dumps(
            {
                "command": first,
                "notes": "first call.",
                "per_seed": {s: {"league": league, "nfsp": old_nfsp} for s in ("0", "1")},
                "extra": settings,
            }
        )
    )
    again = ["--game=kuhn_poker", "--wall-s=1", "--nfsp-eval-every=100", f"--out={out}", "--add-to"]
    result = bench.main([*again, "--methods", "nfsp", "--seeds", "1"])
    assert result["per_seed"]["0"] == {"league": league, "nfsp": old_nfsp}  # not run again: kept
    assert result["per_seed"]["1"]["league"] == league
    assert (
        result["per_seed"]["1"]["nfsp"]["curve"] != old_nfsp["curve"]
        and result["per_seed"]["1"]["nfsp"]["episodes"] > 0
    )
    assert result["command"] == first  # it reproduces every run of the file
    [call] = result["extra"]["added"]
    assert call["methods"] == ["nfsp"] and call["seeds"] == [1] and "--add-to" in call["command"]
    assert result["notes"].startswith("first call.") and "nfsp (seeds 1)" in result["notes"]
    assert result["table"]["rows"] == bench.result_rows(result["per_seed"])
    assert result["extra"]["summary"]["nfsp"]["n"] == 2
    # Another wall time (or game, NFSP interval, overrides) is refused before anything runs.
    with pytest.raises(SystemExit):
        bench.main(["--game=kuhn_poker", "--wall-s=2", "--nfsp-eval-every=100", f"--out={out}", "--add-to"])
    assert "measured with other settings ({'wall_s': 1.0})" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main([*again[:3], f"--out={tmp_path / 'none.json'}", "--add-to"])
    assert "no result at" in capsys.readouterr().err


def test_the_recorded_command_names_no_folder_of_the_machine(tmp_path):
    command = bench.recorded_command(
        "benchmarks/poker_league.py",
        ["--game", "kuhn_poker", "--workdir", str(tmp_path), f"--out={tmp_path / 'kuhn.json'}", "--add-to"],
    )
    assert command == "python benchmarks/poker_league.py --game kuhn_poker --out benchmarks/results/kuhn.json --add-to"
    inside = bench.ROOT / "benchmarks" / "results" / "x.json"
    assert (
        bench.recorded_command("s.py", ["--out", str(inside), "--workdir=w"])
        == "python s.py --out benchmarks/results/x.json"
    )
