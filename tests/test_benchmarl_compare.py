"""benchmarks/benchmarl/compare.py: both frameworks get the same task, and both logs are read right."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from benchmark_scripts import load_benchmark
from lightmarl.cli import main
from lightmarl.experiments.runner import fit_command, run_directory

ROOT = Path(__file__).resolve().parents[1]


compare = load_benchmark("benchmarl/compare.py")


def resolved_env(task, capsys) -> dict:
    """The env section lightmarl builds for ``task``: its recipe with the task's overrides."""
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(ROOT / task.recipe), *task.lightmarl_overrides(), "--print_config"])
    return yaml.safe_load(capsys.readouterr().out)["model"]["env"]


@pytest.mark.parametrize("name", ["vmas_balance", "vmas_navigation", "vmas_transport"])
def test_vmas_tasks_give_lightmarl_benchmarls_task_settings(name, capsys):
    pytest.importorskip("vmas")
    task = compare.TASKS[name]
    env = resolved_env(task, capsys)["init_args"]
    settings = dict(task.settings)
    assert env["max_steps"] == settings.pop("max_steps") == 100
    assert env["scenario_kwargs"] == settings
    assert env["continuous_actions"] is True
    assert task.benchmarl_overrides()[0] == "task.max_steps=100"
    assert all(o.startswith("task.") and "=" in o for o in task.benchmarl_overrides())


def test_a_changed_task_setting_reaches_both_frameworks(capsys):
    pytest.importorskip("vmas")
    task = compare.with_settings(compare.TASKS["vmas_transport"], ["package_mass=5", "max_steps=200"])
    assert "task.package_mass=5" in task.benchmarl_overrides() and "task.max_steps=200" in task.benchmarl_overrides()
    env = resolved_env(task, capsys)["init_args"]
    assert env["scenario_kwargs"]["package_mass"] == 5 and env["max_steps"] == 200
    assert compare.TASKS["vmas_transport"].settings["package_mass"] == 50  # the table's task is unchanged
    for wrong in (["package_mass"], ["no_such_key=1"]):
        with pytest.raises(ValueError, match=r"KEY=VALUE|not one of the task's settings"):
            compare.with_settings(compare.TASKS["vmas_transport"], wrong)


def test_simple_spread_task_gives_lightmarl_benchmarls_task_settings(capsys):
    task = compare.TASKS["simple_spread"]
    env = resolved_env(task, capsys)["init_args"]
    assert env["env_kwargs"] == {"N": 3, "max_cycles": 100, "local_ratio": 0.5, "continuous_actions": True}
    assert "task.local_ratio=0.5" in task.benchmarl_overrides()


def test_benchmarl_curve_sums_collection_and_training_time(tmp_path):
    scalars = tmp_path / "exp" / "exp" / "scalars"
    scalars.mkdir(parents=True)
    series = {
        "eval_reward_episode_reward_mean": [(0, -1.0), (1, 0.5)],
        "counters_total_frames": [(0, 6000), (1, 12000)],
        "timers_collection_time": [(0, 2.0), (1, 3.0)],
        "timers_training_time": [(0, 10.0), (1, 20.0)],
    }
    for name, rows in series.items():
        (scalars / f"{name}.csv").write_text("".join(f"{s},{v}\n" for s, v in rows))
    curve = compare.read_benchmarl_curve(tmp_path, process_s=40.0)
    assert curve.frames == [6000, 12000]
    assert curve.train_s == [12.0, 35.0]
    assert curve.returns == [-1.0, 0.5]
    # An interrupted run's folder beside it, its name after the finished one's: the newest files are read.
    stale = tmp_path / "zzz" / "zzz" / "scalars"
    stale.mkdir(parents=True)
    for name, rows in series.items():
        (stale / f"{name}.csv").write_text("".join(f"{s},{v}\n" for s, v in rows[:1]))
    old = time.time() - 60
    for csv_file in stale.iterdir():
        os.utime(csv_file, (old, old))
    assert compare.read_benchmarl_curve(tmp_path, process_s=40.0).frames == [6000, 12000]


def test_lightmarl_curve_takes_frames_and_seconds_before_each_evaluation(tmp_path):
    metrics = tmp_path / "csv" / "version_0" / "metrics.csv"
    metrics.parent.mkdir(parents=True)
    header = "counters/frames,eval/main/episode_return,step,time/collect_s,time/update_s"
    rows = ["3200,,0,1.0,2.0", "6400,,1,1.5,2.5", ",0.25,1,,", "9600,,2,1.0,1.0", ",0.75,2,,"]
    metrics.write_text("\n".join([header, *rows]) + "\n")
    curve = compare.read_lightmarl_curve(tmp_path, process_s=9.0)
    assert curve.frames == [6400, 9600]
    assert curve.train_s == [7.0, 9.0]
    assert curve.returns == [0.25, 0.75]


def test_time_to_target_and_return_at_a_budget():
    curve = compare.Curve(frames=[1, 2, 3], train_s=[10.0, 20.0, 30.0], returns=[0.1, 0.9, 0.5], process_s=35.0)
    assert compare.first_reaching(curve, 0.5) == (2, 20.0)
    assert compare.first_reaching(curve, 1.0) is None
    assert compare.value_at(curve, curve.train_s, 25.0) == 0.9
    assert compare.value_at(curve, curve.train_s, 5.0) is None


def test_seed_means_compare_at_benchmarls_evaluation_times():
    def curve(train_s, returns):
        return compare.Curve(frames=[6000, 12000], train_s=train_s, returns=returns, process_s=99.0)

    runs = {
        "benchmarl": {0: curve([10.0, 20.0], [0.2, 0.8]), 1: curve([12.0, 22.0], [0.4, 0.6])},
        "lightmarl": {0: curve([3.0, 6.0], [0.5, 0.9]), 1: curve([4.0, 8.0], [0.3, 0.7])},
    }
    lines = compare.seed_mean_table(runs)
    text = "\n".join(lines)
    assert "- benchmarl: 0.700 " in text and "- lightmarl: 0.800 " in text
    assert "lightmarl − BenchMARL: +0.100" in text
    # lightmarl's seed mean (0.4, then 0.8) first reaches BenchMARL's final mean 0.7 at its second
    # evaluation: 7 s on average, against BenchMARL's 21 s.
    assert "at 7 train s, 0.33 of BenchMARL's 21 s" in text
    # BenchMARL's evaluations at 11 s and 21 s (seed means); lightmarl's latest evaluations by then.
    assert "| 6,000 frames | 11 | 0.300 | 0.800 |" in lines
    assert "| 12,000 frames | 21 | 0.700 | 0.800 |" in lines
    assert compare.seed_mean_table({"benchmarl": runs["benchmarl"], "lightmarl": {0: runs["lightmarl"][0]}}) == []


def test_json_result_has_one_row_per_run_and_every_curve(tmp_path):
    import json

    def curve(returns):
        frames = [6000.0 * (k + 1) for k in range(len(returns))]
        return compare.Curve(frames, [10.0 * (k + 1) for k in range(len(returns))], returns, 99.0).to_json()

    results = {
        "vmas_transport/benchmarl/0": curve([0.0, 0.1, 0.0, 0.0, 0.2, 0.1]),
        "vmas_transport/lightmarl/0": curve([0.0, 1.0, 2.0, 3.0]),
        "vmas_balance/lightmarl/0": curve([9.0]),
        "vmas_transport/random": {"return": -0.0003},
    }
    path = compare.write_json("transport_test", "vmas_transport", results, ["--tasks", "vmas_transport"], tmp_path)
    written = json.loads(path.read_text())
    assert written["command"] == "python benchmarks/benchmarl/compare.py --tasks vmas_transport"
    assert set(written["per_seed"]) == {"0 / benchmarl", "0 / lightmarl", "random"}
    rows = written["table"]["rows"]
    # seed, framework, frames, return at half the frames, final, mean of the last five, best, train s
    assert rows[0] == [0, "benchmarl", 36000.0, 0.0, 0.1, pytest.approx(0.08), 0.2, 60.0]
    assert rows[1] == [0, "lightmarl", 24000.0, 1.0, 3.0, 1.5, 3.0, 40.0]
    assert "uniformly random actions: -0.0003" in written["notes"]
    with pytest.raises(SystemExit):
        compare.write_json("x", "vmas_navigation", results, [], tmp_path)


def test_json_needs_exactly_one_task():
    with pytest.raises(SystemExit):
        compare.main(["--json", "x", "--tasks", "vmas_balance", "vmas_navigation", "--frameworks", "lightmarl"])


def test_frame_budget_must_be_a_multiple_of_benchmarls_batch():
    with pytest.raises(SystemExit):
        compare.main(["--frames", "1000", "--frameworks", "lightmarl"])


def test_several_labelled_recipes_each_get_a_row_next_to_benchmarl(tmp_path):
    assert compare.lightmarl_variants([]) == {"lightmarl": None}
    assert compare.lightmarl_variants(["recipes/a.yaml"]) == {"lightmarl": "recipes/a.yaml"}
    assert compare.lightmarl_variants(["plain=recipes/a.yaml", "taught=recipes/b.yaml"]) == {
        "lightmarl:plain": "recipes/a.yaml",
        "lightmarl:taught": "recipes/b.yaml",
    }
    for wrong in (["recipes/a.yaml", "recipes/b.yaml"], ["a b=recipes/a.yaml"], ["x=a.yaml", "x=b.yaml"]):
        with pytest.raises(ValueError, match=r"LABEL=PATH|given twice"):
            compare.lightmarl_variants(wrong)
    with pytest.raises(SystemExit):  # the parser names the mistake before anything runs
        compare.main(["--tasks", "vmas_transport", "--frameworks", "lightmarl", "--recipe", "a.yaml", "--recipe", "b"])

    def curve(returns):
        frames = [6000.0 * (k + 1) for k in range(len(returns))]
        return compare.Curve(frames, [10.0 * (k + 1) for k in range(len(returns))], returns, 99.0)

    runs = {
        "lightmarl:taught": {0: curve([2.0, 4.0]), 1: curve([3.0, 5.0])},
        "benchmarl": {0: curve([0.0, 0.1]), 1: curve([0.1, 0.0])},
        "lightmarl:plain": {0: curve([0.0, 0.2]), 1: curve([0.1, 0.1])},
    }
    assert [row[1] for row in compare.result_rows(runs)] == ["benchmarl", "lightmarl:plain", "lightmarl:taught"] * 2
    table = compare.task_table("vmas_transport", runs)
    assert sum(line.startswith("| 0 | lightmarl:taught |") and "/ 4.00 |" in line for line in table) == 1
    summaries = "\n".join(compare.seed_mean_tables(runs))
    assert "**lightmarl:plain**" in summaries and "**lightmarl:taught**" in summaries
    assert "lightmarl − BenchMARL: +4.450" in summaries  # taught: mean 4.5 against 0.05
    compare.plot_task("vmas_transport", runs, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_both_frameworks_are_told_absolute_folders_whatever_out_is(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(compare, "run_logged", lambda command, cwd, log: seen.update(command=command, cwd=cwd) or 1.0)
    monkeypatch.setattr(compare, "read_benchmarl_curve", lambda run_dir, seconds: run_dir)
    monkeypatch.chdir(tmp_path)
    run_dir = compare.run_benchmarl(Path("python"), compare.TASKS["vmas_transport"], 0, 6000, Path("runs/x"), 8)
    assert run_dir == tmp_path / "runs" / "x" and seen["cwd"] == run_dir
    folders = [a for a in seen["command"] if a.startswith(("experiment.save_folder=", "hydra.run.dir="))]
    assert len(folders) == 2 and all(Path(a.partition("=")[2]).is_absolute() for a in folders)
    # lightmarl too, through main: a relative --out reaches it absolute, the fit as a sweep's run.
    commands, fits = [], []

    def fit(recipe, seed, frames, out_dir, overrides=(), name="lightmarl", fresh=False):
        spec = compare.lightmarl_sweep(recipe, [seed], frames, out_dir, overrides, name)
        [run] = spec.runs()
        fits.append(fit_command(run, run_directory(spec, run)))
        return compare.Curve([6000.0], [1.0], [0.0], 1.0)

    monkeypatch.setattr(compare, "fit_recipe", fit)
    monkeypatch.setattr(compare, "run_logged", lambda command, cwd, log: commands.append(command) or 1.0)
    monkeypatch.setattr(compare, "read_lightmarl_curve", lambda *a, **k: compare.Curve([6000.0], [1.0], [0.0], 1.0))
    monkeypatch.setattr(compare, "plot_task", lambda *a: None)
    compare.main(
        ["--tasks", "vmas_transport", "--seeds", "0", "--frames", "6000", "--frameworks", "lightmarl", "--out", "out"]
    )
    roots = [
        a.partition("=")[2]
        for command in [*fits, *commands]
        for a in command
        if a.startswith("--trainer.default_root_dir=")
    ]
    assert len(roots) == 2 and all(Path(root).is_absolute() for root in roots)  # fit, then the random policy
    assert Path(roots[0]) == tmp_path / "out" / "vmas_transport" / "lightmarl" / "runs" / "lightmarl" / "seed_0"
    assert "--model.max_frames=6000" in fits[0] and "--seed_everything=0" in fits[0]
    assert f"--model.env.init_args.max_steps={compare.TASKS['vmas_transport'].settings['max_steps']}" in fits[0]


def test_algorithm_table_has_a_row_per_algorithm_and_framework(tmp_path):
    import json

    def curve(returns, train_s, update_s):
        frames = [6000.0 * (k + 1) for k in range(len(returns))]
        return {
            **compare.Curve(frames, train_s, returns, 99.0, update_s).to_json(),
            "optimizer_steps": 100,
            "batch_frames": 6000,
        }

    results = {
        "vmas_balance:masac/benchmarl/0": curve([0.0, 1.0], [10.0, 20.0], [5.0, 10.0]),
        "vmas_balance:masac/benchmarl/1": curve([0.0, 3.0], [10.0, 20.0], [5.0, 10.0]),
        "vmas_balance:masac/lightmarl/0": curve([2.0, 4.0], [4.0, 8.0], [2.0, 4.0]),
        "vmas_balance:masac/lightmarl/1": curve([2.0, 2.0], [4.0, 8.0], [2.0, 4.0]),
        "vmas_balance:masac/random": {"return": -8.0},
        "vmas_balance:iql/lightmarl/0": curve([1.0], [5.0], [1.0]),
        "vmas_balance/benchmarl/0": curve([9.0], [5.0], [1.0]),  # MAPPO with the task's recipe: not an algorithm row
    }
    rows = compare.algorithm_rows(results, "vmas_balance")
    assert [row[:3] for row in rows] == [["masac", "benchmarl", 2], ["masac", "lightmarl", 2], ["iql", "lightmarl", 1]]
    benchmarl, lightmarl = rows[0], rows[1]
    assert benchmarl[4] == 2.0 and lightmarl[4] == 3.0 and benchmarl[7] == -8.0
    assert lightmarl[8] == 12_000 / 8.0  # frames per training second
    assert lightmarl[9] == 200 / 4.0 and benchmarl[9] == 200 / 10.0  # 2 batches x 100 steps over the update seconds
    # lightmarl's seed mean (2.0) first reaches BenchMARL's final mean (2.0) at its first evaluation: 4 s of BenchMARL's 20.
    assert lightmarl[11] == 0.2 and benchmarl[11] is None and rows[2][5] is None  # one seed: no interval
    path = compare.write_algorithms_json(
        "algorithms_test", "vmas_balance", results, ["--algorithms", "masac"], tmp_path
    )
    written = json.loads(path.read_text())
    assert len(written["table"]["rows"]) == 3 and "vmas_balance/benchmarl/0" not in written["per_seed"]


@pytest.mark.timeout(300)
def test_a_lightmarl_run_goes_through_the_sweep_runner_and_is_not_run_twice(tmp_path):
    tiny = [
        "--model.env.num_envs=4",
        "--model.rollout_steps=10",
        "--model.iterations_per_epoch=2",
        "--evaluation.validation.episodes=2",
        "--model.algorithm.init_args.minibatch_size=40",
        "--trainer.enable_model_summary=false",
    ]
    curve = compare.fit_recipe("recipes/quickstart.yaml", 0, 160, tmp_path, tiny)
    run_dir = tmp_path / "runs" / "lightmarl" / "seed_0"
    state = json.loads((run_dir / "sweep_run.json").read_text())
    assert state["status"] == "done" and state["frames"] == 160 and curve.process_s == state["wall_s"]
    assert curve.frames == [80.0, 160.0] and len(curve.returns) == 2 and curve.train_s[0] < curve.train_s[1]
    again = compare.fit_recipe("recipes/quickstart.yaml", 0, 160, tmp_path, tiny)
    assert again == curve and (run_dir / "sweep.log").read_text().count("lightmarl sweep: fit:") == 1
    # A rerun trains afresh in an emptied directory: not read back, not resumed from the old last.ckpt.
    compare.fit_recipe("recipes/quickstart.yaml", 0, 160, tmp_path, tiny, fresh=True)
    rerun = json.loads((run_dir / "sweep_run.json").read_text())
    assert rerun["status"] == "done" and rerun["attempts"] == [{**rerun["attempts"][0], "resumed": False}]
    assert rerun["attempts"][0]["started"] > state["attempts"][0]["started"]
    assert (run_dir / "sweep.log").read_text().count("lightmarl sweep: fit:") == 1
    # One made with other settings is refused, not read back as this one's result.
    with pytest.raises(ValueError, match=r'lightmarl/seed_0 \(model.algorithm.init_args.minibatch_size: "40" → "20"\)'):
        compare.fit_recipe(
            "recipes/quickstart.yaml",
            0,
            160,
            tmp_path,
            [*tiny[:4], "--model.algorithm.init_args.minibatch_size=20", *tiny[5:]],
        )


def test_a_continued_result_keeps_its_seeds_once_and_adds_the_new_ones(tmp_path, monkeypatch):
    def curve(seed: int, framework: str) -> dict:
        # returns that name their run, so that a lost, doubled or re-run seed shows in the table
        value = 10.0 * seed + (1.0 if framework == "lightmarl" else 0.0)
        run = compare.Curve([6000.0, 12000.0], [5.0, 10.0], [value - 1.0, value], 20.0, [2.0, 4.0])
        return {**run.to_json(), "optimizer_steps": 100, "batch_frames": 6000, "load": "1.0 / 1.0 / 1.0"}

    common = [
        "--tasks",
        "vmas_balance",
        "--frames",
        "12000",
        "--benchmarl-setting",
        "experiment.off_policy_n_optimizer_steps=100",
    ]
    first = ["--algorithms", "masac", "iql", *common, "--seeds", "0", "1", "--json", "algos"]
    earlier = {
        f"vmas_balance:{algorithm}/{framework}/{seed}": curve(seed, framework)
        for algorithm in ("masac", "iql")
        for framework in ("benchmarl", "lightmarl")
        for seed in (0, 1)
    }
    earlier |= {"vmas_balance:masac/random": {"return": -7.5}, "vmas_balance:iql/random": {"return": 1.8}}
    compare.write_algorithms_json("algos", "vmas_balance", earlier, first, tmp_path)
    committed = json.loads((tmp_path / "algos.json").read_text())

    ran: list[tuple[str, int]] = []
    fresh_runs: list[bool] = []

    def fake_benchmarl(python, task, seed, frames, run_dir, episodes, algorithm="mappo", settings=()):
        ran.append(("benchmarl", seed))
        return compare.Curve.from_json(curve(seed, "benchmarl"))

    def fake_fit(recipe, seed, frames, out_dir, overrides=(), name="lightmarl", fresh=False):
        ran.append(("lightmarl", seed))
        fresh_runs.append(fresh)
        return compare.Curve.from_json(curve(seed, "lightmarl"))

    monkeypatch.setattr(compare, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(compare, "check_benchmarl", lambda python: None)
    monkeypatch.setattr(compare, "run_benchmarl", fake_benchmarl)
    monkeypatch.setattr(compare, "fit_recipe", fake_fit)
    monkeypatch.setattr(compare, "random_return", lambda *a: pytest.fail("random play is in the committed result"))
    monkeypatch.setattr(compare, "plot_task", lambda *a: None)
    out = ["--out", str(tmp_path / "runs")]
    compare.main(
        ["--algorithms", "masac", "iql", *common, "--seeds", "2", "--from-json", "algos", "--json", "algos", *out]
    )

    assert sorted(ran) == [("benchmarl", 2), ("benchmarl", 2), ("lightmarl", 2), ("lightmarl", 2)]  # only seed 2 ran
    written = json.loads((tmp_path / "algos.json").read_text())
    for key, data in committed["per_seed"].items():
        assert written["per_seed"][key] == data  # every committed run kept as it was
    assert len(written["per_seed"]) == len(committed["per_seed"]) + 4
    rows = written["table"]["rows"]
    assert [row[:3] for row in rows] == [[a, f, 3] for a in ("masac", "iql") for f in ("benchmarl", "lightmarl")]
    # seeds 0, 1, 2 once each: the mean of 10 * seed (+1 for lightmarl) over them
    assert [row[4] for row in rows] == [10.0, 11.0, 10.0, 11.0]
    words = written["command"].split()
    assert "--from-json" not in words and words[words.index("--seeds") + 1 : words.index("--seeds") + 4] == [
        "0",
        "1",
        "2",
    ]
    assert written["extra"]["continued"]["command"] == committed["command"]
    assert "--from-json algos" in written["extra"]["command_run"]

    # Run again: nothing is run twice and the table is the same.
    ran.clear()
    again = ["--algorithms", "masac", "iql", *common, "--seeds", "2", "--from-json", "algos", "--json", "algos", *out]
    compare.main(again)
    assert ran == [] and json.loads((tmp_path / "algos.json").read_text())["table"] == written["table"]
    # Random play measured again replaces the committed figures, and the trainings are still not rerun.
    monkeypatch.setattr(compare, "random_return", lambda recipe, *a: 5.0 if "masac" in recipe else 6.0)
    compare.main([*again, "--rerun-random"])
    rewritten = json.loads((tmp_path / "algos.json").read_text())
    assert ran == [] and [row[7] for row in rewritten["table"]["rows"]] == [5.0, 5.0, 6.0, 6.0]
    assert rewritten["per_seed"]["vmas_balance:masac/random"] == {"return": 5.0}
    compare.main(again)  # the run folder and the rewritten result now agree
    # One algorithm's lightmarl runs trained with settings the map no longer gives: only they run again.
    seeds = ["--seeds", "0", "1", "2"]
    compare.main(
        ["--algorithms", "masac", "iql", *common, *seeds, "--from-json", "algos", "--json", "algos", *out,
         "--frameworks", "lightmarl", "--rerun-algorithms", "masac"]
    )  # fmt: skip
    assert sorted(ran) == [("lightmarl", 0), ("lightmarl", 1), ("lightmarl", 2)]
    assert fresh_runs[-3:] == [True, True, True]  # their run directories emptied first
    rerun = json.loads((tmp_path / "algos.json").read_text())["per_seed"]
    assert all("lightmarl_settings" in rerun[f"vmas_balance:masac/lightmarl/{seed}"] for seed in (0, 1, 2))
    assert "lightmarl_settings" not in rerun["vmas_balance:iql/lightmarl/0"]
    assert rerun["vmas_balance:masac/benchmarl/0"] == committed["per_seed"]["vmas_balance:masac/benchmarl/0"]
    # Rerun again in the same folder, not continuing a result: the written command still reproduces the
    # whole table (both frameworks, every seed), the call's own options recorded beside it.
    ran.clear()
    call = ["--algorithms", "masac", "iql", *common, *seeds, "--json", "algos", *out,
            "--frameworks", "lightmarl", "--rerun-algorithms", "iql"]  # fmt: skip
    compare.main(call)
    assert sorted(ran) == [("lightmarl", 0), ("lightmarl", 1), ("lightmarl", 2)]
    written = json.loads((tmp_path / "algos.json").read_text())
    assert "--frameworks" not in written["command"] and "--rerun-algorithms" not in written["command"]
    assert "--rerun-algorithms iql" in written["extra"]["command_run"]


def test_a_result_is_continued_only_with_its_own_settings(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compare, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(compare, "check_benchmarl", lambda python: None)
    command = (
        "python benchmarks/benchmarl/compare.py --algorithms masac --tasks vmas_balance --frames 12000 --seeds 0 1 "
        "--benchmarl-setting experiment.off_policy_n_optimizer_steps=100 --json algos"
    )
    (tmp_path / "algos.json").write_text(json.dumps({"command": command, "per_seed": {}}))
    same = ["--tasks", "vmas_balance", "--seeds", "2", "--from-json", "algos", "--out", str(tmp_path / "runs")]
    setting = ["--benchmarl-setting", "experiment.off_policy_n_optimizer_steps=100"]
    for other, named in (
        (["--algorithms", "masac", "--frames", "18000", *setting], "--frames"),  # other frames
        (["--algorithms", "masac", "--frames", "12000"], "--benchmarl-setting"),  # BenchMARL's full optimizer steps
        (["--algorithms", "iql", "--frames", "12000", *setting], "--algorithms"),  # would drop masac's runs
    ):
        with pytest.raises(SystemExit):
            compare.main([*other, *same])
        assert f"its runs had {named}" in capsys.readouterr().err
    # The same options, but the map now gives the cell other optimizer steps than its lightmarl run took.
    run = {"returns": [1.0], "optimizer_steps": 45, "batch_frames": 6000}
    (tmp_path / "algos.json").write_text(
        json.dumps({"command": command, "per_seed": {"vmas_balance:masac/lightmarl/0": run}})
    )
    with pytest.raises(SystemExit):
        compare.main(["--algorithms", "masac", "--frames", "12000", *setting, *same])
    assert "ran 45 optimizer steps per 6000-frame batch, the map now gives 100" in capsys.readouterr().err
    # BenchMARL's own run is its (unchanged) command line: its count is read again from the map, not refused.
    plans = {"vmas_balance:masac": compare.algorithm_run(compare.TASKS["vmas_balance"], "masac", 12000, 1, setting[1:])}
    benchmarl_run = {"vmas_balance:masac/benchmarl/0": {"returns": [1.0], "optimizer_steps": 45, "batch_frames": 6000}}
    compare.check_same_updates(benchmarl_run, plans)
    assert benchmarl_run["vmas_balance:masac/benchmarl/0"]["optimizer_steps"] == 100
    # A lightmarl run that recorded other settings than the recipe and the map give now.
    run = {"returns": [1.0], "optimizer_steps": 100, "batch_frames": 6000, "lightmarl_settings": "0123"}
    (tmp_path / "algos.json").write_text(
        json.dumps({"command": command, "per_seed": {"vmas_balance:masac/lightmarl/0": run}})
    )
    with pytest.raises(SystemExit):
        compare.main(["--algorithms", "masac", "--frames", "12000", *setting, *same])
    assert "run it again (--rerun-algorithms masac)" in capsys.readouterr().err
    parser = compare.build_parser()
    args = parser.parse_args(["--algorithms", "masac", "qmix", "--frames", "12000", *setting, *same])
    compare.check_same_settings(parser, args, command)  # an added algorithm is fine
    with pytest.raises(ValueError, match="another run"):
        compare.merge_runs({"c:masac/benchmarl/0": {"returns": [1.0]}}, {"c:masac/benchmarl/0": {"returns": [2.0]}})
    assert compare.reproducing_argv(["--seeds", "2", "--from-json", "x", "--json", "x"], [0, 1, 2]) == [
        "--seeds", "0", "1", "2", "--json", "x"
    ]  # fmt: skip
    assert compare.reproducing_argv(["--from-json=x", "--frames", "6000"], [0, 2]) == [
        "--frames", "6000", "--seeds", "0", "2"
    ]  # fmt: skip
    # Which runs a call ran again, or which framework it ran now, is not part of the result it continues.
    rerun = ["--frameworks", "lightmarl", "--rerun-algorithms", "mappo", "ippo", "--rerun-random", "--json", "x"]
    assert compare.reproducing_argv(rerun, [0, 1]) == ["--json", "x", "--seeds", "0", "1"]
    assert compare.reproducing_argv(rerun, [0], ["lightmarl"]) == [
        "--json",
        "x",
        "--seeds",
        "0",
        "--frameworks",
        "lightmarl",
    ]
    # An --out outside the repository is written as a folder under benchmarks/benchmarl/runs.
    assert compare.command_of(["--out", str(tmp_path / "bm"), "--json", "x"]) == (
        "python benchmarks/benchmarl/compare.py --out benchmarks/benchmarl/runs/bm --json x"
    )
    assert compare.command_of([f"--out={compare.ROOT / 'benchmarks/benchmarl/runs/a'}"]).endswith(
        "--out benchmarks/benchmarl/runs/a"
    )


@pytest.mark.parametrize("algorithm", ["iql", "masac"])
def test_random_play_replaces_the_policy_the_settings_map_names(algorithm, capsys):
    plan = compare.algorithm_run(compare.TASKS["vmas_balance"], algorithm, 30000, 128)
    assert any(a.startswith("--model.policy_bindings=") for a in plan.lightmarl_overrides)  # the map names one
    with pytest.raises(SystemExit):
        main(
            [
                "validate",
                "--config",
                str(ROOT / plan.recipe),
                *compare.random_play_arguments(plan.lightmarl_overrides),
                "--print_config",
            ]
        )
    [binding] = yaml.safe_load(capsys.readouterr().out)["model"]["policy_bindings"]
    assert binding["class_path"] == "lightmarl.policies.UniformRandomPolicy"


def test_first_evaluation_compares_untrained_and_one_batch_in_both_frameworks(tmp_path, monkeypatch):
    first = load_benchmark("benchmarl/first_evaluation.py")
    told: dict[str, tuple] = {}

    def benchmarl(python, task, seed, frames, run_dir, episodes, algorithm="mappo", settings=()):
        told[run_dir.name] = tuple(settings)
        untrained = "experiment.lr=0" in settings
        return compare.Curve([6000.0], [1.0], [float(seed) if untrained else seed + 1.0], 1.0)

    def validate(subcommand, recipe, run_dir, arguments):
        told["validate"] = (subcommand, *arguments)
        return 1.0

    monkeypatch.setattr(first, "check_benchmarl", lambda python: None)
    monkeypatch.setattr(first, "run_benchmarl", benchmarl)
    monkeypatch.setattr(first, "run_lightmarl_cli", validate)
    monkeypatch.setattr(first, "read_lightmarl_curve", lambda *a, **k: compare.Curve([0.0], [0.0], [-1.0], 0.0))
    monkeypatch.setattr(first, "fit_recipe", lambda *a, **k: compare.Curve([6000.0], [1.0], [-3.0], 1.0))
    monkeypatch.setattr(first, "RESULTS_DIR", tmp_path)
    first.main(["--seeds", "0", "1", "--out", str(tmp_path / "runs"), "--json", "first"])
    assert told["benchmarl_untrained"] == ("experiment.off_policy_n_optimizer_steps=1", "experiment.lr=0")
    assert told["benchmarl_after_the_first_batch"] == ("experiment.off_policy_n_optimizer_steps=100",)
    assert told["validate"][0] == "validate" and told["validate"][-1] == "--seed_everything=1"
    benchmarl_row, lightmarl_row = json.loads((tmp_path / "first.json").read_text())["table"]["rows"]
    assert benchmarl_row[:4] == ["iql", "benchmarl", 2, 0.5] and benchmarl_row[6] == 1.5 and benchmarl_row[9] == 1.0
    assert lightmarl_row[3] == -1.0 and lightmarl_row[6] == -3.0 and lightmarl_row[9] == -2.0
    # A comparison's first evaluation stands for the trained stage where it has the run.
    comparison = {"vmas_balance:iql/lightmarl/2": {"returns": [-7.0, 1.0], "load": "2.0 / 2.0 / 2.0"}}
    (tmp_path / "algos.json").write_text(json.dumps({"per_seed": comparison}))
    first.main(["--seeds", "2", "--out", str(tmp_path / "runs"), "--trained-from", "algos"])
    stored = json.loads((tmp_path / "runs" / "results.json").read_text())
    assert stored["iql/lightmarl/after the first batch/2"]["return"] == -7.0
    assert stored["iql/benchmarl/after the first batch/2"]["return"] == 3.0  # not in the comparison: run
