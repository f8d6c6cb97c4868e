"""The export format: a trained population as a directory that loads without the training run.

``lightmarl export`` (and :meth:`~lightmarl.policies.PolicyDict.export`) write

* ``population.json``: the format version and, per binding, its policy class, keyword
  arguments, agent group (with the group's spaces) and the shared modules it was built with;
* ``weights.safetensors``: every weight, as safetensors (plain tensors: loading runs no code).

No optimizer or trainer state is kept. ``policy_uri: exported/#binding`` loads one binding as a
frozen NPC or league opponent, and :meth:`PolicyDict.load` loads them all for inference.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

#: the ``format`` entry of ``population.json``.
EXPORT_FORMAT = "lightmarl.export/1"
DESCRIPTION_FILE = "population.json"
WEIGHTS_FILE = "weights.safetensors"


def is_export(path: str | Path) -> bool:
    """Whether ``path`` is an exported population directory."""
    return (Path(path) / DESCRIPTION_FILE).is_file()


def write_export(directory: str | Path, description: Mapping[str, Any], state: Mapping[str, torch.Tensor]) -> Path:
    """Write ``description`` (bindings, groups, shared modules) and ``state`` into ``directory``.

    Each file is written to a temporary name and renamed, so a crash never leaves half a file.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # safetensors refuses tensors that share memory (a shared module appears under each user): copy each.
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state.items()}
    with _replacing(directory / WEIGHTS_FILE) as tmp:
        save_file(tensors, tmp)
    with _replacing(directory / DESCRIPTION_FILE) as tmp:
        Path(tmp).write_text(json.dumps({"format": EXPORT_FORMAT, **description}, indent=2, sort_keys=True))
    return directory


def read_export(directory: str | Path, *, field: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The description and weights of an exported population (see the module doc).

    Raises:
        ValueError: naming ``field`` when a file is missing, unreadable or of another format.
    """
    directory = Path(directory)
    try:
        description = json.loads((directory / DESCRIPTION_FILE).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{field}: cannot read {str(directory / DESCRIPTION_FILE)!r}: {err}") from err
    if description.get("format") != EXPORT_FORMAT:
        raise ValueError(
            f"{field}: {str(directory)!r} is format {description.get('format')!r}; this lightmarl reads {EXPORT_FORMAT!r}"
        )
    try:
        state = load_file(str(directory / WEIGHTS_FILE))
    except Exception as err:  # missing or truncated weights: a config error, not a traceback
        raise ValueError(f"{field}: cannot read {str(directory / WEIGHTS_FILE)!r}: {err}") from err
    return description, state


class _replacing:
    """A temporary file beside ``path`` that replaces ``path`` when the block succeeds."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> str:
        handle, self.tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        os.close(handle)
        return self.tmp

    def __exit__(self, kind: Any, *_: Any) -> None:
        if kind is None:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.tmp, 0o666 & ~umask)  # mkstemp makes the file private; an export is a normal file
            os.replace(self.tmp, self.path)
        elif os.path.exists(self.tmp):
            os.remove(self.tmp)
