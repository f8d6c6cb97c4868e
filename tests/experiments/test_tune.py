"""``lightmarl tune``: the tune file, and a 6-trial Optuna study killed halfway and resumed from its SQLite file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
import yaml
from tiny_sweeps import QUICKSTART, TINY

from lightmarl.cli import main
from lightmarl.experiments.runner import last_checkpoint, lightmarl_command
from lightmarl.experiments.tune import load_tune

SPACE = {
    "model.algorithm.init_args.lr": {"type": "float", "low": 0.0001, "high": 0.01, "log": True},
    "model.algorithm.init_args.epochs": {"type": "int", "low": 1, "high": 3},
}


def write_tune(path: Path, **fields) -> Path:
    raw = {
        "recipe": QUICKSTART,
        "objective": {"metric": "eval/main/episode_return"},
        "search_space": SPACE,
        **fields,
    }
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_tune_file_is_read_with_its_defaults(tmp_path):
    spec = load_tune(write_tune(tmp_path / "t.yaml"))
    assert spec.name == "t" and spec.trials == 20 and spec.direction == "maximize" and spec.mode == "final"
    assert spec.storage == "sqlite:///tunes/t/study.db" and spec.out_dir == Path("tunes/t")
    assert spec.pruner == {"type": "none"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"recipe": "missing.yaml"}, "recipe: 'missing.yaml': no such file"),
        ({"objective": {"metric": "m", "direction": "up"}}, "objective.direction: expected maximize or minimize"),
        ({"search_space": {"model.x": {"type": "float", "low": 1, "high": 0}}}, "search_space.model.x: low 1"),
        ({"search_space": {"model.x": {"type": "normal"}}}, "search_space.model.x: expected {type:"),
        ({"search_space": {"model.x": {"type": "float", "low": 0, "high": 1, "log": True}}}, "log: true needs"),
        ({"pruner": {"type": "asha"}}, "pruner: expected {type:"),
        ({"storage": "study.db"}, "storage: expected an SQLAlchemy URL"),
        ({"trail": 3}, "unknown field 'trail'"),
    ],
)
def test_tune_file_mistakes_are_one_line(tmp_path, capsys, fields, message):
    tune = write_tune(tmp_path / "t.yaml", **fields)
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--config", str(tune)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lightmarl: error:") and "\n" not in err
    assert message in err


@pytest.mark.slow  # 6 trials of fit + validate processes, killed and resumed: minutes on 2 cores
def test_a_study_killed_halfway_resumes_from_its_sqlite_file(tmp_path):
    """6 trials; SIGKILL to `lightmarl tune` and its fit once two trials are complete and a third has a
    checkpoint; the second call fails the dead trial by its heartbeat, retries it with the same parameters
    from its last.ckpt, and ends with 6 finished trials; best.yaml is the best one as a recipe."""
    tune = write_tune(
        tmp_path / "tune.yaml",
        name="kill",
        overrides=TINY,
        trials=6,
        heartbeat_s=1,
        pruner={"type": "median", "n_startup_trials": 2},
    )
    storage = f"sqlite:///{tmp_path / 'tunes' / 'kill' / 'study.db'}"
    command = [*lightmarl_command(), "tune", "--config", str(tune)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(
        command, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    trials_dir = tmp_path / "tunes" / "kill" / "trials"
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            assert first.poll() is None, "the study ended before it was killed"
            if (tmp_path / "tunes" / "kill" / "study.db").is_file():
                study = optuna.load_study(study_name="kill", storage=storage)
                complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED))
                running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
                if len(complete) >= 2 and running and last_checkpoint(trials_dir / f"trial_{running[0].number}"):
                    break
            time.sleep(0.5)
        else:
            pytest.fail("no two trials finished in time")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    before = {
        t.number: (t.state, t.value, t.params) for t in optuna.load_study(study_name="kill", storage=storage).trials
    }
    (killed,) = [n for n, (state, _, _) in before.items() if state == optuna.trial.TrialState.RUNNING]
    time.sleep(2.5)  # past the heartbeat's grace period

    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    study = optuna.load_study(study_name="kill", storage=storage)
    finished = [
        t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    ]
    assert len(finished) == 6
    assert study.trials[killed].state == optuna.trial.TrialState.FAIL  # failed by its heartbeat, then retried
    (retry,) = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed]
    assert retry.params == before[killed][2] and retry.state != optuna.trial.TrialState.FAIL
    for number, (state, value, _params) in before.items():
        if state == optuna.trial.TrialState.COMPLETE:  # not run again
            assert (study.trials[number].state, study.trials[number].value) == (state, value)
    # The retry resumed the dead trial's run: its second fit restored the checkpoint the first one wrote.
    log = (trials_dir / f"trial_{killed}" / "tune.log").read_text()
    assert "Restoring states from the checkpoint" in log
    # Validations reported by the pruning callback (the retry may resume a fit that had already ended:
    # it then trains no further and reports none).
    assert all(t.intermediate_values for t in finished if t.number != retry.number)
    best = yaml.safe_load((tmp_path / "tunes" / "kill" / "best.yaml").read_text())
    assert best["model"]["algorithm"]["init_args"]["lr"] == study.best_params["model.algorithm.init_args.lr"]
    assert best["model"]["max_frames"] == 160 and best["seed_everything"] == 0
    listed = json.loads((tmp_path / "tunes" / "kill" / "trials.json").read_text())["trials"]
    assert len(listed) == len(study.trials)
