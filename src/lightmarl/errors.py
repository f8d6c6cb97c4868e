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
