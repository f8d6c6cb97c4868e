"""The process-wide state a ``lightmarl`` command changes, saved and put back.

A command run in the pytest process (``tests/cli_runner.py``, or a test calling
``lightmarl.cli.main`` itself) changes state that outlives it: Lightning's and lightmarl's
signal handlers (`lightmarl.training.preemption.Preemption`, Lightning's SIGTERM handler),
``seed_everything``'s ``PL_GLOBAL_SEED`` and the global RNGs, ``torch.set_num_threads``
(``MARLModule.cpu_threads``), logging levels and handlers (``lightmarl sweep`` calls
``logging.basicConfig``), warnings filters and the working directory. A process of its own
would drop all of it on exit; `ProcessState` puts it back so the next test starts where a
fresh process would.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

#: the signals whose handlers Lightning, lightmarl's `Preemption` and env workers install.
SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP") if hasattr(signal, name)
)


@dataclass
class _LoggerState:
    level: int
    handlers: list[logging.Handler]
    propagate: bool
    disabled: bool


@dataclass
class ProcessState:
    """A snapshot of the process-wide state; `restore` puts it back (`ProcessState.save` takes one)."""

    cwd: str
    environ: dict[str, str]
    argv: list[str]
    signals: dict[int, Any]
    torch_threads: int
    torch_rng: torch.Tensor
    numpy_rng: Any
    python_rng: Any
    default_dtype: torch.dtype
    matmul_precision: str
    warning_filters: list[Any]
    showwarning: Any
    logging_disable: int
    loggers: dict[str, _LoggerState] = field(default_factory=dict)
    #: whether pytest's capture handlers are left as they are at `restore` (see `save`).
    across_test_phases: bool = False

    @classmethod
    def save(cls, *, across_test_phases: bool = False) -> ProcessState:
        """The state now.

        Args:
            across_test_phases: the state is restored in a later phase of the test (a fixture's
                teardown): pytest has swapped its own log capture handlers by then, so those are
                left to pytest. Within one phase (around one command) every handler is put back.
        """
        manager = logging.Logger.manager
        loggers = {"": logging.getLogger()}
        loggers.update({name: lg for name, lg in manager.loggerDict.items() if isinstance(lg, logging.Logger)})
        return cls(
            cwd=os.getcwd(),
            environ=dict(os.environ),
            argv=list(sys.argv),
            signals={signum: signal.getsignal(signum) for signum in SIGNALS},
            torch_threads=torch.get_num_threads(),
            torch_rng=torch.get_rng_state(),
            numpy_rng=np.random.get_state(),
            python_rng=random.getstate(),
            default_dtype=torch.get_default_dtype(),
            matmul_precision=torch.get_float32_matmul_precision(),
            warning_filters=list(warnings.filters),
            showwarning=warnings.showwarning,
            logging_disable=manager.disable,
            loggers={
                name: _LoggerState(lg.level, list(lg.handlers), lg.propagate, lg.disabled)
                for name, lg in loggers.items()
            },
            across_test_phases=across_test_phases,
        )

    def restore(self) -> None:
        os.chdir(self.cwd)
        # In place: modules holding `os.environ` see the restored mapping.
        for name in set(os.environ) - set(self.environ):
            del os.environ[name]
        os.environ.update(self.environ)
        sys.argv[:] = self.argv
        for signum, handler in self.signals.items():
            if handler is not None:  # None: installed outside Python, cannot be set back from here
                signal.signal(signum, handler)
        if torch.get_num_threads() != self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        torch.set_rng_state(self.torch_rng)
        np.random.set_state(self.numpy_rng)
        random.setstate(self.python_rng)
        torch.set_default_dtype(self.default_dtype)
        torch.set_float32_matmul_precision(self.matmul_precision)
        warnings.filters[:] = self.warning_filters
        if hasattr(warnings, "_filters_mutated"):
            warnings._filters_mutated()  # the per-module "already shown" caches follow the filters
        warnings.showwarning = self.showwarning
        manager = logging.Logger.manager
        logging.disable(self.logging_disable)
        for name, lg in list(manager.loggerDict.items()):
            if not isinstance(lg, logging.Logger):
                continue
            saved = self.loggers.get(name)
            if saved is not None:  # a logger first made during the command keeps what its module gave it
                _put_back(lg, saved, self.across_test_phases)
        _put_back(logging.getLogger(), self.loggers[""], self.across_test_phases)


def _is_pytests(handler: logging.Handler) -> bool:
    """pytest's own capture handlers: it adds and removes them around each test phase itself."""
    return type(handler).__module__.split(".")[0] == "_pytest"


def _put_back(lg: logging.Logger, saved: _LoggerState, across_test_phases: bool) -> None:
    lg.setLevel(saved.level)
    added = [h for h in lg.handlers if h not in saved.handlers and not _is_pytests(h)]
    if across_test_phases:
        # pytest's handlers stay as they are now: the one of a test's setup is gone by its teardown.
        kept = [h for h in saved.handlers if not _is_pytests(h)]
        lg.handlers[:] = kept + [h for h in lg.handlers if _is_pytests(h)]
    else:
        lg.handlers[:] = saved.handlers
    lg.propagate = saved.propagate
    lg.disabled = saved.disabled
    for handler in added:
        # A handler the command added (``logging.basicConfig``, a file log): closed, as at process exit.
        if isinstance(handler, logging.FileHandler):
            handler.close()
