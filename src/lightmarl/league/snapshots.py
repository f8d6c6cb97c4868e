"""Snapshot files of league players, and a bounded in-memory cache of opponents' weights.

Two failure modes of other leagues shape this module: snapshots that keep *references* to the
live weights and silently follow training (RLlib), and leagues that keep every historical policy
in memory (growing RAM with the league). A snapshot here is a deep copy written to disk
atomically; at most ``max_resident`` snapshots are held in memory and the rest load on demand.

A snapshot written with a ``description`` (what a league in ``lightmarl fit`` does) describes
itself: ``{"format": SNAPSHOT_FORMAT, "player", "policy": {class_path, policy_kwargs, group_spec},
"shared_modules", "transforms", "env", "state_dict"}``, so ``policy_uri: snapshot.pt`` and
``lightmarl.load_population("snapshot.pt")`` open it alone. [`SnapshotStore.load`][lightmarl.league.snapshots.SnapshotStore.load] returns
the state dict either way.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch

from lightmarl.errors import load_failure_reason
from lightmarl.keys import SNAPSHOT_FORMAT

log = logging.getLogger(__name__)

__all__ = ["SNAPSHOT_FORMAT", "SnapshotStore", "detached_copy"]


def detached_copy(state: Any) -> Any:
    """A deep copy of a (nested) state dict whose tensors share no memory with the original, on CPU."""
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, Mapping):
        return {key: detached_copy(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(detached_copy(value) for value in state)
    return state


class SnapshotStore:
    """Saves policy state dicts to files and serves them through an LRU cache.

    Files are written with `torch.save` to a temporary file in the same folder and moved
    into place with `os.replace`, so a reader never sees half a snapshot; they load with
    ``torch.load(weights_only=True)``. Not locked: one thread (the training process's) saves and loads.

    Args:
        max_resident: most snapshots held in memory at once (0 disables the cache).

    Examples:
        >>> import tempfile, torch
        >>> store = SnapshotStore(max_resident=2)
        >>> path = f"{tempfile.mkdtemp()}/main_0.pt"
        >>> store.save(path, torch.nn.Linear(2, 2).state_dict())
        >>> sorted(store.load(path))
        ['bias', 'weight']
    """

    def __init__(self, max_resident: int = 8) -> None:
        if max_resident < 0:
            raise ValueError(f"max_resident must be >= 0, got {max_resident}")
        self.max_resident = max_resident
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.loads_from_disk = 0

    def save(
        self, path: str | os.PathLike[str], state_dict: Mapping[str, Any], description: Mapping[str, Any] | None = None
    ) -> None:
        """Write a deep copy of ``state_dict`` to ``path`` atomically (replacing any file there);
        with ``description`` (plain data: the policy's class, kwargs, group, ...), a self-describing file."""
        path = os.fspath(path)
        snapshot = detached_copy(state_dict)
        content = snapshot if description is None else {**detached_copy(description), "format": SNAPSHOT_FORMAT}
        if description is not None:
            content["state_dict"] = snapshot
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=folder, prefix=".snapshot-", suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                torch.save(content, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        self._remember(path, snapshot)
        log.debug("saved league snapshot %s", path)

    def load(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The state dict saved at ``path``, from memory when resident; treat it as read-only."""
        path = os.fspath(path)
        if path in self._cache:
            self._cache.move_to_end(path)
            return self._cache[path]
        if not os.path.exists(path):
            raise FileNotFoundError(f"league snapshot {path!r} does not exist (was it saved?)")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 -- truncated, overwritten or foreign: say which file
            raise ValueError(
                f"league snapshot {path!r} cannot be read: {load_failure_reason(err)}; the file is damaged "
                "(restore it from a copy, or start the league afresh)"
            ) from None
        if isinstance(state, dict) and state.get("format") == SNAPSHOT_FORMAT:
            state = state.get("state_dict")  # a self-describing snapshot: its weights
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise ValueError(f"league snapshot {path!r} is not a state dict of tensors")
        self.loads_from_disk += 1
        self._remember(path, state)
        return state

    @property
    def resident(self) -> list[str]:
        """Paths held in memory, least recently used first."""
        return list(self._cache)

    def _remember(self, path: str, state: dict[str, Any]) -> None:
        if self.max_resident == 0:
            return
        self._cache[path] = state
        self._cache.move_to_end(path)
        while len(self._cache) > self.max_resident:
            self._cache.popitem(last=False)
