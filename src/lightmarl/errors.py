"""Errors lightmarl reports to users."""

from __future__ import annotations


class ConfigError(ValueError):
    """A recipe cannot run as written; raised before training starts, naming the field and value."""


class EnvContractError(ValueError):
    """An env (or vector of envs) does not behave as lightmarl's collector needs; the message names the env.

    Defined here, below ``envs/``, because the torch-free stepping code of env worker processes
    raises it as well as the vector checks.
    """


class CheckpointWriteError(OSError):
    """Writing a checkpoint failed (a full disk, an unwritable directory); the previous checkpoint file is unchanged."""


class TrainingFault(RuntimeError):
    """A run that started cannot go on as configured; the message names the binding or env copy and the cause.

    Raised during ``fit`` (never at set-up): a non-finite loss or gradient, or a diverging binding,
    under a ``stop`` policy, or an env worker that hung or died under ``worker_failure: stop``.
    The CLI prints it as one line and exits with `TRAINING_FAULT_EXIT_CODE`.
    """


#: exit code of a run stopped by a [`TrainingFault`][lightmarl.errors.TrainingFault] (config errors exit with 2, preemption with 128 + signal).
TRAINING_FAULT_EXIT_CODE = 3


def load_failure_reason(err: BaseException) -> str:
    """What a failed ``torch.load`` says about the file, in one short line.

    A weights-only failure opens with a paragraph on ``weights_only`` (advice that would run the
    file's code); the reason is the ``WeightsUnpickler error`` that follows it.
    """
    text = str(err).strip()
    if "WeightsUnpickler error:" in text:
        reason = " ".join(text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation")[0].split())
        return f"not a weights-only torch file ({reason})"[:300]
    lines = text.splitlines()
    return lines[0].split(". ")[0][:300] if lines else type(err).__name__
