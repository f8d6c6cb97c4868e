"""One shared-memory block holding every array a [`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv] exchanges.

Per group the actions ``[num_envs, agents, ...]``, the step's results and the observations for
the next step (the layout of `lightmarl.envs.layout`), the global state where it is
recorded, and one root ``ended [num_envs]`` flag. Worker ``k`` writes only the rows of its own
copies. This module imports no torch (worker processes import it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from lightmarl import keys
from lightmarl.envs.layout import ROOT, Arrays, GroupLayout, root_fields

log = logging.getLogger(__name__)

_ALIGN = 64  # byte alignment of each array in the shared block


class SharedArrays:
    """Every array a `ProcessVecEnv` exchanges with its workers, in one shared-memory block.

    The layout (offsets) is a function of ``groups``, ``num_envs`` and ``state_shape`` alone, so a
    worker that knows them and the block's name sees the same arrays.

    Args:
        groups: the env's groups.
        num_envs: env copies in the vector.
        name: attach to this existing block (workers); ``None`` creates one (the parent).
        state_shape: shape of the env's global state to record (under `ROOT`), or ``None``.
    """

    def __init__(
        self,
        groups: Sequence[GroupLayout],
        num_envs: int,
        name: str | None = None,
        state_shape: tuple[int, ...] | None = None,
    ) -> None:
        fields: list[tuple[str, str, str, str, tuple[int, ...]]] = []  # (section, group, key, dtype, shape)
        for g in groups:
            fields += [("current", g.name, k, d, s) for k, d, s in g.current_fields(num_envs)]
            fields += [(keys.NEXT, g.name, k, d, s) for k, d, s in g.next_fields(num_envs)]
            dtype, shape = g.action_field(num_envs)
            fields.append(("actions", g.name, keys.ACTION, dtype, shape))
        for k, d, s in root_fields(num_envs, state_shape):
            fields += [("current", ROOT, k, d, s), (keys.NEXT, ROOT, k, d, s)]
        fields.append(("ended", "", "ended", "bool", (num_envs,)))
        offsets, size = [], 0
        for *_, dtype, shape in fields:
            offsets.append(size)
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            size += -(-nbytes // _ALIGN) * _ALIGN
        self.shm = SharedMemory(name=name, create=name is None, size=max(size, _ALIGN) if name is None else 0)
        self.name = self.shm.name
        self.current: Arrays = {g.name: {} for g in groups}
        self.next: Arrays = {g.name: {} for g in groups}
        self.actions: dict[str, np.ndarray] = {}
        self.ended = np.zeros(0, dtype=bool)
        for (section, group, key, dtype, shape), offset in zip(fields, offsets):
            array = np.ndarray(shape, dtype=dtype, buffer=self.shm.buf, offset=offset)
            if section == "actions":
                self.actions[group] = array
            elif section == "ended":
                self.ended = array
            else:
                getattr(self, section).setdefault(group, {})[key] = array

    def clear_rows(self, rows: slice, sections: Sequence[str] = ("current", keys.NEXT)) -> None:
        for section in sections:
            for arrays in getattr(self, section).values():
                for array in arrays.values():
                    array[rows] = 0
        self.ended[rows] = False

    def remember(self, seen: Arrays, rows: slice) -> None:
        """Copy the ``current`` rows (what the policies are about to act on) into the parent's ``seen`` arrays."""
        for group, arrays in self.current.items():
            for key, array in arrays.items():
                seen[group][key][rows] = array[rows]

    def end_truncated(self, rows: slice, seen: Arrays) -> None:
        """Write a step that cut the episodes of copies ``rows`` short: what a restarted worker's copies report.

        Each agent's episode ends *truncated* (``done``, not ``terminated``) with a reward of 0 and
        the last observation the parent saw (``seen``) as its next one, so a value bootstrap reads
        a real state of that episode; ``ended`` says the copies restarted (``current`` holds their
        new first observations, written by the worker's reset).
        """
        for group, arrays in self.next.items():
            for key, array in arrays.items():
                if key in (keys.OBSERVATION, keys.ACTION_MASK, keys.STATE):
                    array[rows] = seen[group][key][rows]
                else:
                    array[rows] = key in (keys.TRUNCATED, keys.DONE)
        self.ended[rows] = True

    def release(self, unlink: bool) -> None:
        """Drop the views and unmap the block; ``unlink`` (the creator) also removes it."""
        self.current, self.next, self.actions = {}, {}, {}
        self.ended = np.zeros(0, dtype=bool)
        try:
            self.shm.close()
        except BufferError:  # a view escaped; the mapping goes when the process does
            log.debug("shared memory %s still has views", self.name)
        if unlink:
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()
