"""The export container: a saved population as a directory that loads without the training run.

``lightmarl export`` (and [`export`][lightmarl.policies.policy_dict.PolicyDict.export]) write

* ``population.json``: the population's description
  ([`SavedPopulation.to_dict`][lightmarl.policies.artifact.SavedPopulation.to_dict], the same layout a
  checkpoint and a league snapshot carry): per binding its policy class, keyword arguments, agent
  group and shared modules; the groups' spaces, the env, the env transforms with their settings, the
  agent -> binding map, the run's counters and the league's snapshots and mixtures
  (``docs/export_format.md`` lists every field);
* ``weights.safetensors``: every weight, as safetensors (plain tensors: loading runs no code);
* ``transforms.safetensors``: the transforms' tensors (e.g. normalization statistics), where any;
* ``snapshots/<player>.safetensors``: each league snapshot's weights.

No optimizer or trainer state is kept. ``policy_uri: exported/#binding`` loads one binding as a
frozen NPC or league opponent and [`lightmarl.load_population`][lightmarl.inference.population.load_population]
loads everything needed to act; both read it with `lightmarl.policies.artifact.read_artifact`.
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

DESCRIPTION_FILE = "population.json"
WEIGHTS_FILE = "weights.safetensors"
TRANSFORMS_FILE = "transforms.safetensors"
SNAPSHOT_DIR = "snapshots"
#: how ``population.json`` points at a tensor stored in ``transforms.safetensors``.
TENSOR_REF = "__tensor__"


def is_export(path: str | Path) -> bool:
    """Whether ``path`` is an exported population directory."""
    return (Path(path) / DESCRIPTION_FILE).is_file()


def write_export(
    directory: str | Path,
    description: Mapping[str, Any],
    state: Mapping[str, torch.Tensor],
    *,
    transform_tensors: Mapping[str, torch.Tensor] | None = None,
    snapshots: Mapping[str, Mapping[str, torch.Tensor]] | None = None,
) -> Path:
    """Write ``description`` and the tensors into ``directory``.

    Args:
        directory: created if missing.
        description: plain data: `SavedPopulation.to_dict` with its tensors split out (`split_tensors`).
        state: ``<binding>.<parameter>`` -> tensor.
        transform_tensors: tensors that ``description["transforms"]`` points at (`split_tensors`).
        snapshots: league snapshot file name (without suffix) -> its state dict.

    Each file is written to a temporary name and renamed, so a crash never leaves half a file.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _save_tensors(directory / WEIGHTS_FILE, state)
    if transform_tensors:
        _save_tensors(directory / TRANSFORMS_FILE, transform_tensors)
    for name, weights in (snapshots or {}).items():
        (directory / SNAPSHOT_DIR).mkdir(exist_ok=True)
        _save_tensors(directory / SNAPSHOT_DIR / f"{name}.safetensors", weights)
    with _replacing(directory / DESCRIPTION_FILE) as tmp:
        Path(tmp).write_text(json.dumps(dict(description), indent=2, sort_keys=True))
    return directory


def _save_tensors(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    # safetensors refuses tensors that share memory (a shared module appears under each user): copy each.
    copies = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    with _replacing(path) as tmp:
        save_file(copies, tmp)


def read_export(directory: str | Path, *, field: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The description and weights of an exported population.

    Raises:
        ValueError: naming ``field`` when a file is missing or unreadable (the description's format is
            checked by `SavedPopulation.from_dict`).
    """
    directory = Path(directory)
    try:
        description = json.loads((directory / DESCRIPTION_FILE).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{field}: cannot read {str(directory / DESCRIPTION_FILE)!r}: {err}") from err
    if not isinstance(description, dict):
        raise ValueError(f"{field}: {str(directory / DESCRIPTION_FILE)!r} is not a JSON table")
    return description, read_tensors(directory / WEIGHTS_FILE, field=field)


def read_tensors(path: str | Path, *, field: str) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; a ``ValueError`` naming ``field`` where it is missing or broken."""
    try:
        return load_file(str(path))
    except Exception as err:  # missing or truncated weights: a config error, not a traceback
        raise ValueError(f"{field}: cannot read {str(path)!r}: {err}") from err


def split_tensors(value: Any, prefix: str) -> tuple[Any, dict[str, torch.Tensor]]:
    """``value`` (nested dicts and lists) with every tensor replaced by ``{"__tensor__": key}``, and the tensors by key."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(item: Any, key: str) -> Any:
        if isinstance(item, torch.Tensor):
            tensors[key] = item
            return {TENSOR_REF: key}
        if isinstance(item, Mapping):
            return {str(k): walk(v, f"{key}.{k}") for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [walk(v, f"{key}.{i}") for i, v in enumerate(item)]
        return item

    return walk(value, prefix), tensors


def join_tensors(value: Any, tensors: Mapping[str, torch.Tensor], *, field: str) -> Any:
    """The inverse of `split_tensors`."""
    if isinstance(value, Mapping):
        if set(value) == {TENSOR_REF}:
            try:
                return tensors[value[TENSOR_REF]]
            except KeyError:
                raise ValueError(f"{field}: tensor {value[TENSOR_REF]!r} is missing from {TRANSFORMS_FILE}") from None
        return {k: join_tensors(v, tensors, field=field) for k, v in value.items()}
    if isinstance(value, list):
        return [join_tensors(v, tensors, field=field) for v in value]
    return value


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
