"""Running ``lightmarl`` in the test process, as a shell would see it: exit code, stdout, stderr.

Starting ``lightmarl`` as a subprocess costs 10 s or more before the command does anything
(the interpreter, torch, Lightning, TorchRL); a test of what a command *does* (a recipe
refused with a one-line error, a run trained and validated) gets the same answer from
`run_in_process` in a fraction of that: it calls the console script's entry point
(`lightmarl.cli.main`) with the arguments in a working directory of the test's, captures
what it prints and logs, turns ``SystemExit`` into the exit code a shell would see, and
puts back the process-wide state the command changed (`process_state.ProcessState`).

`run_console_script` starts the real ``lightmarl`` executable instead: for tests where the
process boundary is the behaviour (the console script itself, signals, kill and resume,
DDP ranks, crashed workers).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from process_state import ProcessState


@dataclass(frozen=True)
class CliResult:
    """What a shell sees of one command: the fields of `subprocess.CompletedProcess` tests read."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_in_process(*args: str, cwd: Path) -> CliResult:
    """``lightmarl ARGS...`` run by `lightmarl.cli.main` in this process, in ``cwd``.

    Args:
        args: the command line after ``lightmarl`` (``"fit", "--config", ...``).
        cwd: the working directory of the command (recipes write under ``./runs``).

    An exception the command lets through ends as it would in a process of its own: its
    traceback on stderr and exit code 1.
    """
    from lightmarl.cli import main

    state = ProcessState.save()
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(cwd)
        with (
            warnings.catch_warnings(),
            _console_handlers_to(out, err),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            returncode = _call(main, list(args), err)
    finally:
        state.restore()
    return CliResult(args=["lightmarl", *args], returncode=returncode, stdout=out.getvalue(), stderr=err.getvalue())


def _call(main, args: list[str], err: TextIO) -> int:
    try:
        main(args)
    except SystemExit as exit_:
        # As the interpreter does: None is 0, an integer is the status, anything else is printed and 1.
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=err)
        return 1
    except Exception:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        traceback.print_exc(file=err)
        return 1
    return 0


@contextlib.contextmanager
def _console_handlers_to(out: TextIO, err: TextIO) -> Iterator[None]:
    """Log handlers writing to the console (Lightning's ``lightning.pytorch`` handler, a ``basicConfig``)
    write to the captured streams meanwhile: their lines are part of the command's stderr / stdout."""
    targets = {id(sys.stderr): err, id(sys.__stderr__): err, id(sys.stdout): out, id(sys.__stdout__): out}
    moved: list[tuple[logging.StreamHandler, TextIO]] = []
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for lg in loggers:
        for handler in getattr(lg, "handlers", []):
            if type(handler) is logging.StreamHandler and id(handler.stream) in targets:
                moved.append((handler, handler.setStream(targets[id(handler.stream)])))
    try:
        yield
    finally:
        for handler, stream in moved:
            handler.setStream(stream)


def lightmarl_script() -> str:
    """The ``lightmarl`` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("lightmarl")
    return str(script) if script.exists() else shutil.which("lightmarl") or "lightmarl"


def run_console_script(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``lightmarl ARGS...`` as a process of its own, its output captured.

    Args:
        args: the command line after ``lightmarl``.
        cwd: the working directory of the process.
        timeout: seconds before the process is killed and the test fails.
    """
    return subprocess.run([lightmarl_script(), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
