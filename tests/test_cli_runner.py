"""tests/cli_runner.py: an in-process ``lightmarl`` answers as the console script does, and leaves no trace."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import numpy as np
import torch

import source_cache
from cli_runner import run_console_script, run_in_process
from process_state import ProcessState

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "recipes/quickstart.yaml")


def test_a_bad_recipe_gets_the_console_scripts_exit_code_and_line_in_process(tmp_path):
    """The one subprocess here: the same refused command, in a process of its own and in this one."""
    command = ("fit", "--config", QUICKSTART, "--model.algorithm.init_args.lr=-1")
    (tmp_path / "own").mkdir()
    (tmp_path / "here").mkdir()
    console = run_console_script(*command, cwd=tmp_path / "own")
    here = run_in_process(*command, cwd=tmp_path / "here")
    assert console.returncode == here.returncode == 2

    def error_lines(stderr: str) -> list[str]:
        return [line for line in stderr.splitlines() if line.startswith("lightmarl: error: ")]

    assert error_lines(here.stderr) == error_lines(console.stderr) != [], (here.stderr, console.stderr[-2000:])
    # Lightning's own log lines reach the captured stderr too, as they reach a shell.
    assert "Seed set to 0" in here.stderr and "Seed set to 0" in console.stderr


def test_stdout_exit_code_and_cwd_are_the_commands(tmp_path):
    printed = run_in_process("fit", "--config", QUICKSTART, "--print_config", cwd=tmp_path)
    assert printed.returncode == 0 and "seed_everything: 0" in printed.stdout
    help_ = run_in_process("--help", cwd=tmp_path)
    assert help_.returncode == 0 and "lightmarl fit" in help_.stdout
    # A relative path is read from the command's working directory.
    (tmp_path / "empty.yaml").write_text("")
    empty = run_in_process("fit", "--config", "empty.yaml", cwd=tmp_path)
    assert empty.returncode == 2 and "empty.yaml" in empty.stderr and os.getcwd() != str(tmp_path)


def test_an_exception_the_command_lets_through_is_exit_1_with_its_traceback(tmp_path, monkeypatch):
    def crash(args):
        raise RuntimeError("an unexpected failure")

    monkeypatch.setattr("lightmarl.cli.main", crash)
    result = run_in_process("fit", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" in result.stderr and "an unexpected failure" in result.stderr


def test_a_fit_in_process_leaves_the_process_as_it_found_it(tmp_path):
    """A real tiny fit sets seeds, Lightning's and lightmarl's signal handlers, threads and env vars:
    all of it is back afterwards."""
    before = ProcessState.save()
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    torch.manual_seed(1234)
    expected_draw = torch.rand(3)
    torch.manual_seed(1234)
    run = run_in_process(
        "fit",
        "--config",
        QUICKSTART,
        "--model.env.num_envs=2",
        "--model.rollout_steps=5",
        "--model.max_frames=10",
        "--model.cpu_threads=2",
        "--model.algorithm.init_args.minibatch_size=10",
        "--evaluation.validation.episodes=1",
        "--trainer.enable_progress_bar=false",
        "--trainer.logger=false",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "runs/quickstart/checkpoints/last.ckpt").is_file()
    assert os.environ.get("PL_GLOBAL_SEED") == before.environ.get("PL_GLOBAL_SEED")
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert torch.get_num_threads() == threads
    assert os.getcwd() == before.cwd
    assert torch.equal(torch.rand(3), expected_draw), "the global RNG is where the command found it"


def test_the_saved_state_is_put_back(tmp_path):
    state = ProcessState.save()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    os.environ["LIGHTMARL_TEST_STATE"] = "1"
    os.chdir(tmp_path)
    signal.signal(signal.SIGTERM, lambda *_: None)
    logging.basicConfig(level=logging.DEBUG, force=True, stream=sys.stderr)
    np.random.seed(7)
    state.restore()
    assert "LIGHTMARL_TEST_STATE" not in os.environ and os.getcwd() == state.cwd
    assert signal.getsignal(signal.SIGTERM) == state.signals[signal.SIGTERM]
    assert root.handlers == handlers and root.level == level
    assert np.array_equal(np.random.get_state()[1], state.numpy_rng[1])


def test_the_source_cache_leaves_the_parser_as_it_is(tmp_path):
    """tests/source_cache.py only skips re-reading sources: help and resolved config are the same without it."""
    commands = [("fit", "--help"), ("fit", "--config", QUICKSTART, "--print_config"), ("evaluate", "--help")]
    cached = [run_in_process(*command, cwd=tmp_path) for command in commands]
    source_cache.uninstall()
    try:
        uncached = [run_in_process(*command, cwd=tmp_path) for command in commands]
    finally:
        source_cache.install()
    for command, with_cache, without in zip(commands, cached, uncached):
        assert with_cache.returncode == without.returncode == 0, command
        assert with_cache.stdout == without.stdout and len(without.stdout) > 1000, command


def test_pytests_own_log_handlers_are_left_to_pytest():
    """pytest swaps its capture handlers between a test's setup and teardown: putting the setup's
    back would leave one more handler on the root logger after every test."""
    from _pytest.logging import LogCaptureHandler

    root = logging.getLogger()
    setup_phase, teardown_phase, added = LogCaptureHandler(), LogCaptureHandler(), logging.StreamHandler()
    root.addHandler(setup_phase)
    state = ProcessState.save(across_test_phases=True)
    root.removeHandler(setup_phase)
    root.addHandler(teardown_phase)
    root.addHandler(added)
    state.restore()
    try:
        assert teardown_phase in root.handlers
        assert setup_phase not in root.handlers and added not in root.handlers
    finally:
        root.removeHandler(teardown_phase)
