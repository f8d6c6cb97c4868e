"""``--ckpt_path``: a checkpoint file read weights-only and checked, ``last`` resolved, the league mixtures a checkpoint records."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info

from lightmarl.errors import ConfigError
from lightmarl.policies.artifact import read_artifact
from lightmarl.policies.loading import load_torch_file
from lightmarl.policies.run_checkpoints import latest_checkpoint
from lightmarl.training.module import MARLModule


def resolve_last(checkpoint_dirs: Sequence[str], command: str) -> str | None:
    """``--ckpt_path last``: the run's newest checkpoint in ``checkpoint_dirs`` by its counters
    (`lightmarl.policies.run_checkpoints`), said in a line.

    Where there is none, ``fit`` starts afresh (``None``, said in a line): every other command
    would evaluate untrained policies without a word, so it stops.

    Raises:
        ConfigError: no checkpoint, for a command other than ``fit``.
    """
    files = [path for d in checkpoint_dirs if Path(d).is_dir() for path in Path(d).glob("*.ckpt")]
    last = latest_checkpoint(files, field="--ckpt_path last", say=lambda line: rank_zero_info(f"lightmarl: {line}"))
    if last is not None:
        return str(last)  # Lightning's own "last" lookup goes by file times
    where = ", ".join(checkpoint_dirs or ["(no ModelCheckpoint callback in this recipe)"])
    if command == "fit":
        rank_zero_info(f"lightmarl: --ckpt_path last: no checkpoint in {where}; starting a fresh run")
        return None
    # `evaluate` can also play the recipe's untrained policies, on request.
    other = "pass a checkpoint file, or --ckpt_path null" if command == "evaluate" else "or pass a checkpoint file"
    raise ConfigError(f"--ckpt_path last: no last checkpoint in {where}; train first with `lightmarl fit`, {other}")


def read_checkpoint(path: str) -> dict[str, Any]:
    """A checkpoint read weights-only; fails in one line on a missing, truncated, crafted or non-Lightning file."""
    try:
        checkpoint = load_torch_file(path, field="--ckpt_path")
    except ValueError as err:
        raise ConfigError(str(err)) from err
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"--ckpt_path: {str(path)!r} is not a Lightning checkpoint (no 'state_dict')")
    for key, kind in (("state_dict", dict), ("pytorch-lightning_version", str)):
        if not isinstance(checkpoint.get(key), kind):
            raise ConfigError(f"--ckpt_path: {str(path)!r} is not a Lightning checkpoint (no {key!r})")
    return checkpoint


def checkpoint_mixtures(
    path: str, module: MARLModule, bindings: Sequence[str]
) -> dict[str, list[tuple[dict[str, torch.Tensor], float]]]:
    """The league mixtures a checkpoint records for ``bindings``: binding -> each member's weights
    (a snapshot's, or a binding's own) and its meta weight; bindings without one are left out."""
    if not bindings:
        return {}
    try:
        artifact = read_artifact(path, field="--ckpt_path")
    except ValueError as err:
        raise ConfigError(str(err)) from err
    snapshots = {snapshot.id: snapshot for snapshot in artifact.snapshots}
    out = {}
    for binding in bindings:
        members = artifact.mixtures.get(binding) or {}
        out[binding] = [
            (
                artifact.snapshot_weights(snapshots[member])
                if member in snapshots
                else module.policies[member].state_dict(),
                weight,
            )
            for member, weight in members.items()
        ]
    return {binding: members for binding, members in out.items() if members}
