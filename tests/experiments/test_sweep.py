"""``lightmarl sweep``: the sweep file, its runs, and a sweep killed halfway and restarted through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tiny_sweeps import QUICKSTART, TINY, write_sweep

from cli_runner import run_in_process
from lightmarl.cli import main
from lightmarl.experiments.runner import STATE_FILE, error_line, fit_command, last_checkpoint, lightmarl_command
from lightmarl.experiments.spec import load_sweep, override_args


def test_a_sweep_expands_configs_grid_and_seeds(tmp_path):
    sweep = write_sweep(
        tmp_path / "s.yaml",
        seeds=[0, 1, 2],
        overrides={"model.max_frames": 100},
        configs=[
            {"name": "a", "recipe": QUICKSTART, "overrides": {"model.gamma": 0.9}},
            {"name": "b", "recipe": [QUICKSTART, QUICKSTART], "task": "t2", "method": "m"},
        ],
        grid={"model.algorithm.init_args.lr": [0.001, 0.01]},
    )
    spec = load_sweep(sweep)
    runs = spec.runs()
    assert len(runs) == 2 * 2 * 3
    assert len({r.run_id for r in runs}) == len(runs)
    first = runs[0]
    assert first.run_id == "a__lr=0.001/seed_0"
    assert first.method == "a lr=0.001" and first.task == "quickstart"
    assert first.overrides == {"model.max_frames": 100, "model.gamma": 0.9, "model.algorithm.init_args.lr": 0.001}
    assert runs[-1].method == "m lr=0.01" and runs[-1].task == "t2" and runs[-1].recipes == (QUICKSTART, QUICKSTART)
    assert spec.out_dir == Path("sweeps/s") and spec.workers is None and spec.validate
    command = fit_command(first, Path("out/run"))
    assert command[: len(lightmarl_command()) + 1] == [*lightmarl_command(), "fit"]
    assert "--ckpt_path=last" in command and "--seed_everything=0" in command
    assert "--trainer.default_root_dir=out/run" in command
    assert override_args({"a.b": True, "c": {"x": [1]}, "d": "s"}) == ["--a.b=true", '--c={"x": [1]}', "--d=s"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"configs": []}, "configs: expected a list"),
        ({"configs": [{"name": "a", "recipe": "missing.yaml"}]}, "configs[0].recipe: 'missing.yaml': no such file"),
        ({"configs": [{"name": "a b", "recipe": QUICKSTART}]}, "configs[0].name: expected a name"),
        ({"configs": [{"name": "a", "recipe": QUICKSTART, "lr": 1}]}, "configs[0]: unknown field 'lr'"),
        ({"seeds": [0, 0]}, "seeds: [0, 0] repeats a seed"),
        ({"workers": 0}, "workers: expected a positive integer"),
        ({"grid": {"model.gamma": 0.9}}, "grid.model.gamma: expected a non-empty list"),
        ({"overrides": {"--model.gamma": 0.9}}, "'--model.gamma' is not a recipe key"),
        ({"score": {"normalize": {"nope": {"random": 0, "reference": 1}}}}, "'nope' is the task of no config"),
        ({"seedz": [1]}, "unknown field 'seedz'"),
    ],
)
def test_sweep_file_mistakes_are_one_line(tmp_path, capsys, fields, message):
    raw = {"seeds": [0], "configs": [{"name": "a", "recipe": QUICKSTART}], **fields}
    sweep = write_sweep(tmp_path / "s.yaml", **raw)
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--config", str(sweep)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lightmarl: error:") and "\n" not in err
    assert message in err


def test_error_line_picks_lightmarls_error():
    output = "Seed set to 0\nlightmarl: error: model.x: bad\nsome trailing noise\n"
    assert error_line(output) == "lightmarl: error: model.x: bad"
    assert error_line("Traceback (most recent call last):\n  File x\nValueError: boom\n") == "ValueError: boom"


def _states(out: Path) -> dict[str, dict]:
    found = {}
    for path in (out / "runs").rglob(STATE_FILE):
        try:
            found[str(path.parent.relative_to(out / "runs"))] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being replaced
    return found


@pytest.mark.slow  # minutes of subprocess runs on 2 cores
def test_a_sweep_killed_halfway_and_restarted_runs_every_run_exactly_once(tmp_path):
    """2 configs x 3 seeds, 2 at once; SIGKILL to the whole sweep (runs included) once two runs are done and
    another has a checkpoint; the restart skips the done runs, resumes the interrupted ones from their
    last.ckpt, and ends with every run done once at exactly its frame budget, a summary and a report."""
    sweep = write_sweep(
        tmp_path / "sweep.yaml",
        name="kill",
        seeds=[0, 1, 2],
        workers=2,
        overrides=TINY,
        configs=[
            {
                "name": "lr_small",
                "recipe": QUICKSTART,
                "task": "spread",
                "overrides": {"model.algorithm.init_args.lr": 0.001},
            },
            {
                "name": "lr_big",
                "recipe": QUICKSTART,
                "task": "spread",
                "overrides": {"model.algorithm.init_args.lr": 0.01},
            },
        ],
        score={"metric": "eval/main/episode_return", "normalize": {"spread": {"random": -60.0, "reference": -10.0}}},
    )
    out = tmp_path / "sweeps" / "kill"
    command = [*lightmarl_command(), "sweep", "--config", str(sweep)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(
        command, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            states = _states(out)
            done = [r for r, s in states.items() if s["status"] == "done"]
            running = [r for r, s in states.items() if s["status"] == "running" and last_checkpoint(out / "runs" / r)]
            if len(done) >= 2 and running:
                break
            assert first.poll() is None, "the sweep ended before it was killed"
            time.sleep(0.2)
        else:
            pytest.fail("no two runs finished in time")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the sweep and every run it started
        first.wait()
    before = _states(out)
    done_before = {r: s for r, s in before.items() if s["status"] == "done"}
    interrupted = [r for r, s in before.items() if s["status"] == "running" and last_checkpoint(out / "runs" / r)]
    assert 2 <= len(done_before) < 6 and interrupted

    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    after = _states(out)
    assert sorted(after) == sorted(f"{c}/seed_{s}" for c in ("lr_small", "lr_big") for s in (0, 1, 2))
    for run_id, state in after.items():
        assert state["status"] == "done", (run_id, state["error"])
        assert state["frames"] == 160.0  # resumed runs train on to the budget, not past it, not from zero
        assert state["metrics"]["eval/main/episodes"] == 2.0
        if run_id in done_before:
            assert state == done_before[run_id]  # skipped: not run a second time
            assert len(state["attempts"]) == 1
            assert f"{run_id} already done" in second.stderr
        else:
            assert f"{run_id} already done" not in second.stderr
    for run_id in interrupted:
        attempts = after[run_id]["attempts"]
        assert len(attempts) == 2 and attempts[-1]["resumed"]  # from its last.ckpt
        # The second fit (the log's second `fit` section) restored the checkpoint the killed one wrote.
        second_fit = (out / "runs" / run_id / "sweep.log").read_text().split("# lightmarl sweep: fit: ")[2]
        assert "Restoring states from the checkpoint" in second_fit.split("# lightmarl sweep: validate: ")[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"done": 6}
    assert sorted(r["run_id"] for r in summary["runs"]) == sorted(after)
    table = (out / "summary.md").read_text()
    assert all(f"| {run_id} |" in table for run_id in after)

    # The report of the finished sweep: rliable aggregates over the 3 seeds of each config.
    report_run = subprocess.run(
        [*command, "--report-only", "--reps", "200"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert report_run.returncode == 0, report_run.stderr[-3000:]
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["normalized"] and report["tasks"] == ["spread"]
    for method in ("lr_small", "lr_big"):
        scores = [(after[f"{method}/seed_{s}"]["metrics"]["eval/main/episode_return"] + 60.0) / 50.0 for s in (0, 1, 2)]
        entry = report["methods"][method]
        assert entry["runs"] == 3
        assert entry["mean"]["value"] == pytest.approx(sum(scores) / 3)
        assert entry["mean"]["ci"][0] <= entry["mean"]["value"] <= entry["mean"]["ci"][1]
        assert set(entry) >= {"IQM", "median", "optimality gap"}
        assert report["sample_efficiency"][method]["frames"] == [80.0, 160.0]
    for png in ("aggregates.png", "performance_profiles.png", "sample_efficiency.png"):
        assert (out / "report" / png).stat().st_size > 1000


@pytest.mark.two_processes
def test_a_failed_run_is_reported_and_the_others_finish(tmp_path):
    sweep = write_sweep(
        tmp_path / "sweep.yaml",
        name="fails",
        seeds=[0],
        workers=2,
        validate=False,
        overrides=TINY,
        configs=[
            {"name": "good", "recipe": QUICKSTART},
            {"name": "broken", "recipe": QUICKSTART, "overrides": {"model.algorithm.init_args.minibatch_size": 100000}},
        ],
    )
    # The sweep in this process; each of its runs is a `lightmarl fit` process of its own, as always.
    done = run_in_process("sweep", "--config", str(sweep), cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]  # not every run is done
    states = _states(tmp_path / "sweeps" / "fails")
    assert states["good/seed_0"]["status"] == "done"
    assert states["good/seed_0"]["metrics"]["eval/main/episodes"] == 2.0  # from fit's own validations
    broken = states["broken/seed_0"]
    assert broken["status"] == "failed"
    assert broken["error"].startswith("fit exited with 2: lightmarl: error:")
    assert "minibatch_size 100000" in broken["error"]
    table = (tmp_path / "sweeps" / "fails" / "summary.md").read_text()
    assert "1 done, 1 failed of 2 runs." in table and "minibatch_size 100000" in table


def test_a_run_directory_made_with_other_settings_is_refused_before_anything_runs(tmp_path):
    """A done run is skipped only when its recorded settings are the sweep's now: an override changed or the
    recipe edited is refused, naming the run and what changed, and nothing is trained or overwritten."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(Path(QUICKSTART).read_text())
    fields = dict(name="same", seeds=[0], workers=1, validate=False, overrides=TINY)
    sweep = write_sweep(tmp_path / "sweep.yaml", **fields, configs=[{"name": "a", "recipe": str(recipe)}])
    first = run_in_process("sweep", "--config", str(sweep), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    state_file = tmp_path / "sweeps" / "same" / "runs" / "a" / "seed_0" / STATE_FILE
    done = json.loads(state_file.read_text())
    assert done["status"] == "done" and done["settings"]["overrides"]["model.max_frames"] == 160

    again = run_in_process("sweep", "--config", str(sweep), cwd=tmp_path)
    assert again.returncode == 0 and json.loads(state_file.read_text()) == done  # skipped, not run again

    changed = {**TINY, "model.algorithm.init_args.lr": 0.01}
    write_sweep(sweep, **{**fields, "overrides": changed}, configs=[{"name": "a", "recipe": str(recipe)}])
    refused = run_in_process("sweep", "--config", str(sweep), cwd=tmp_path)
    assert refused.returncode == 2
    assert "a/seed_0 (model.algorithm.init_args.lr: (unset) → 0.01)" in refused.stderr
    assert json.loads(state_file.read_text()) == done  # untouched

    write_sweep(sweep, **fields, configs=[{"name": "a", "recipe": str(recipe)}])
    recipe.write_text(recipe.read_text() + "\n# edited\n")
    refused = run_in_process("sweep", "--config", str(sweep), cwd=tmp_path)
    assert refused.returncode == 2 and f"a/seed_0 ({recipe} edited)" in refused.stderr
    assert json.loads(state_file.read_text()) == done
