"""How a command ends: each kind of failure as one ``lightmarl: error: ...`` line and its exit code.

| what went wrong | exit code |
| --- | --- |
| a user error (`ConfigError`: recipe, flags, checkpoint file), or a checkpoint of another recipe (Lightning's ``load_state_dict``) | 2 |
| a checkpoint that cannot be written (`CheckpointWriteError`) | 1 |
| a run that cannot go on (`TrainingFault`) | ``TRAINING_FAULT_EXIT_CODE`` |
| a stop by SIGTERM / SIGINT (`Preemption`), after a final checkpoint or at once on a second signal | ``PREEMPTED_EXIT_CODES`` |

``LIGHTMARL_DEBUG=1`` lets every error through with its full traceback instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from lightning.pytorch.utilities.exceptions import SIGTERMException

from lightmarl.cli.commands import DEBUG_ENV
from lightmarl.errors import TRAINING_FAULT_EXIT_CODE, CheckpointWriteError, ConfigError, TrainingFault
from lightmarl.training.preemption import PREEMPTED_EXIT_CODES, Preemption


def one_line(err: BaseException) -> str:
    """An error message on one line (an env's or a library's message may span several)."""
    return " ".join(str(err).split())


def _fail(message: str, code: int) -> None:
    print(f"lightmarl: error: {message}", file=sys.stderr)  # noqa: T201 - the command's output
    raise SystemExit(code) from None


@contextmanager
def exit_codes(preemption: Preemption) -> Iterator[None]:
    """Run a command, turning what it raises into one line and the exit code of the table above."""
    debug = bool(os.environ.get(DEBUG_ENV))
    try:
        yield
    except SIGTERMException:
        preemption.stopped_by = "SIGTERM"  # Lightning's own exit after the stop; it carries no exit code
    except (SystemExit, KeyboardInterrupt):
        if preemption.forced_by is None:
            raise
        # A second signal: Lightning's "Detected KeyboardInterrupt" exit 1, said in lightmarl's words.
        _fail(
            f"stopped at once by a second {preemption.forced_by}, without a final checkpoint; "
            "resume from the last one with --ckpt_path last",
            PREEMPTED_EXIT_CODES[preemption.forced_by],
        )
    except ConfigError as err:
        if debug:
            raise
        _fail(one_line(err), 2)  # raised while building the run
    except CheckpointWriteError as err:
        if debug:
            raise
        _fail(one_line(err), 1)  # a fault during the run (a full disk): the run's own failure exit code
    except TrainingFault as err:
        if debug:
            raise
        _fail(one_line(err), TRAINING_FAULT_EXIT_CODE)  # stop policies, env workers: names the binding or copy
    except RuntimeError as err:
        # Lightning's load_state_dict of a checkpoint from another recipe: say so in one line.
        if debug or "Error(s) in loading state_dict" not in str(err):
            raise
        detail = " ".join(str(err).split())[:400]
        _fail(f"--ckpt_path: the checkpoint does not fit this recipe's population ({detail})", 2)
    if preemption.stopped_by is not None:
        print(  # noqa: T201
            f"lightmarl: stopped by {preemption.stopped_by} after a final checkpoint; resume with --ckpt_path last",
            file=sys.stderr,
        )
        raise SystemExit(PREEMPTED_EXIT_CODES[preemption.stopped_by])
