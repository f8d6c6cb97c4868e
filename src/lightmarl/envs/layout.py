"""The arrays every vector of env copies fills: per group ``[num_envs, agents_in_group, ...]`` entries.

`GroupLayout` is the torch-free, picklable part of a
[`GroupSpec`][lightmarl.envs.spec.GroupSpec] that stepping code needs; `empty_current` /
`empty_next` allocate what policies see before a step and what a step returns. The same
layout is used in process ([`InProcessVecEnv`][lightmarl.envs.runners.inprocess.InProcessVecEnv]) and in the
shared-memory block of worker processes (`lightmarl.envs.runners.shared_memory`). This
module imports no torch (worker processes import it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np

from lightmarl import keys
from lightmarl.envs.spec import observation_storage_dtype

if TYPE_CHECKING:
    from lightmarl.envs.spec import EnvSpec

Arrays = dict[str, dict[str, np.ndarray]]  # group name -> key -> [num_envs, agents_in_group, ...]

#: the ``Arrays`` entry of each env copy as a whole, not of a group: ``{"state": [num_envs, *state_shape]}``
#: (the env's global ``state()``), present only when the vector records it (``EnvSpec.state_shape``).
ROOT = "__root__"


@dataclass(frozen=True)
class GroupLayout:
    """What a worker needs to know about one group: a torch-free, picklable slice of ``GroupSpec``.

    ``agents`` are the env's own ids (``GroupSpec.env_agents``): stepping code talks to the env.
    """

    name: str
    agents: tuple[Hashable, ...]
    observation_shape: tuple[int, ...]
    has_action_mask: bool
    num_actions: int
    action_shape: tuple[int, ...]
    action_dtype: str  # NumPy dtype name
    observation_dtype: str = "float32"  # NumPy dtype name observations are kept in (observation_storage_dtype)
    info_fields: tuple[str, ...] = ()  # EnvSpec.info_fields

    @classmethod
    def of(cls, spec: EnvSpec) -> list[GroupLayout]:
        return [
            cls(
                name=g.name,
                agents=tuple(g.env_agents),
                observation_shape=tuple(g.observation_shape),
                has_action_mask=g.has_action_mask,
                num_actions=g.num_actions,
                action_shape=tuple(g.action_shape),
                action_dtype="float32" if g.action_kind == "continuous" else "int64",
                observation_dtype=observation_storage_dtype(g.observation_dtype),
                info_fields=tuple(spec.info_fields),
            )
            for g in spec.groups.values()
        ]

    def current_fields(self, num_envs: int) -> list[tuple[str, str, tuple[int, ...]]]:
        """``(key, dtype, shape)`` of what the policies see at the next step."""
        rows = (num_envs, len(self.agents))
        fields = [
            (keys.OBSERVATION, self.observation_dtype, (*rows, *self.observation_shape)),
            (keys.VALID, "bool", rows),
        ]
        if self.has_action_mask:
            fields.append((keys.ACTION_MASK, "bool", (*rows, self.num_actions)))
        return fields

    def next_fields(self, num_envs: int) -> list[tuple[str, str, tuple[int, ...]]]:
        """``(key, dtype, shape)`` of a step's results, in the order ``ParallelVecEnv.step`` returns them."""
        rows = (num_envs, len(self.agents))
        fields = [(keys.OBSERVATION, self.observation_dtype, (*rows, *self.observation_shape))]
        if self.has_action_mask:
            fields.append((keys.ACTION_MASK, "bool", (*rows, self.num_actions)))
        fields += [(keys.REWARD, "float32", rows), (keys.TERMINATED, "bool", rows), (keys.TRUNCATED, "bool", rows)]
        fields.append((keys.DONE, "bool", rows))
        fields += [(keys.info_key(name), "float32", rows) for name in self.info_fields]
        return fields

    def action_field(self, num_envs: int) -> tuple[str, tuple[int, ...]]:
        return self.action_dtype, (num_envs, len(self.agents), *self.action_shape)


def write_infos(
    arrays: Arrays, e: int, slot: dict[Hashable, tuple[str, int]], infos: Any, fields: Sequence[str], where: str
) -> None:
    """Write the numeric ``fields`` of an env's per-agent ``infos`` into row ``e`` of ``arrays``.

    Every agent's entry of every field is written: the value where the agent's info holds a
    number (``bool``, ``int``, ``float`` or a one-element array), NaN otherwise, so a stale
    value never outlives its step.

    Raises:
        RuntimeError: a field holds something that is not one number, naming ``where`` (the
            env copy), the agent and the value.
    """
    for entries in arrays.values():
        for name in fields:
            key = keys.info_key(name)
            if key in entries:
                entries[key][e] = np.nan
    if not isinstance(infos, dict):
        return
    for agent, info in infos.items():
        position = slot.get(agent)
        if position is None or not isinstance(info, dict):
            continue
        group, i = position
        for name in fields:
            value = info.get(name)
            if value is None:
                continue
            try:
                arrays[group][keys.info_key(name)][e, i] = float(np.asarray(value, dtype=np.float64).reshape(()))
            except (TypeError, ValueError):
                raise RuntimeError(
                    f"{where}: info field {name!r} of agent {agent!r} is {value!r}, not one number; "
                    "env info_fields must name numeric fields"
                ) from None


def root_fields(num_envs: int, state_shape: tuple[int, ...] | None) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(key, dtype, shape)`` of the env copies' own entries (under `ROOT`): the global state, if recorded."""
    return [] if state_shape is None else [(keys.STATE, "float32", (num_envs, *state_shape))]


def _with_root(arrays: Arrays, num_envs: int, state_shape: tuple[int, ...] | None) -> Arrays:
    if state_shape is not None:
        arrays[ROOT] = {k: np.zeros(s, dtype=d) for k, d, s in root_fields(num_envs, state_shape)}
    return arrays


class EnvSlice(Protocol):
    """The stepping code of one env family for copies ``start .. stop - 1`` of a vector.

    It reads actions from and writes results into arrays of this module's layout (rows of its
    own copies only, never clearing them: the caller hands in zeroed rows), and resets a copy
    whose episode ended. [`InProcessVecEnv`][lightmarl.envs.runners.inprocess.InProcessVecEnv] runs one slice over
    every copy; each worker of [`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv] runs one per
    phase. PettingZoo's are `ParallelSlice` and
    `AECSlice`.
    """

    envs: list[Any]
    start: int
    stop: int

    def reset(self, current: Arrays) -> None:
        """Reset every copy with its seed, writing the first observations into ``current``."""

    def step(self, actions: dict[str, np.ndarray], nxt: Arrays, current: Arrays, ended: np.ndarray) -> None:
        """Step every copy: results into ``nxt``, next observations into ``current``, resets into ``ended``."""

    def fast_forward(self, e: int, episode: int, actions: dict[str, np.ndarray], current: Arrays) -> bool:
        """Reset copy ``e`` (a vector index) for its episode ``episode`` and step it with ``actions``.

        Args:
            e: the copy.
            episode: the episode's number in the copy (0: the first): the copy is reset with
                `episode_seed` of its seed and ``episode``, and later resets continue from there.
            actions: group -> ``[steps, agents_in_group, ...]``: the actions the episode was
                stepped with so far.
            current: the copy's observations after the last action are written into its rows.

        Returns:
            ``False`` where the episode ended before the last action (the env is not
            deterministic given its seed and actions); the copy is then left where it ended.
        """

    def close(self) -> None:
        """Close every copy."""


#: builds the `EnvSlice` of some env copies from ``(envs, groups, seeds, start, env_name,
#: possible_agents)`` (the env's own agent ids, ``EnvSpec.env_agents``; e.g. PettingZoo's picks
#: parallel or AEC stepping by env).
SliceFactory: TypeAlias = Callable[
    [Sequence[Any], Sequence[GroupLayout], Sequence[int], int, str, Sequence[Hashable]], EnvSlice
]


def episode_seed(seed: int, episode: int) -> int:
    """The reset seed of episode ``episode`` (0, 1, ...) of the env copy seeded ``seed``.

    The first episode is reset with ``seed`` itself; the others with a seed drawn from
    NumPy's ``SeedSequence([seed, episode])``, so any episode of any copy can be started again
    from its number alone ((resuming a run fast-forwards the episodes in flight this way)).
    """
    if episode == 0:
        return seed
    return int(np.random.SeedSequence([seed & 0xFFFFFFFFFFFFFFFF, episode]).generate_state(1)[0])


def empty_current(groups: Sequence[GroupLayout], num_envs: int, state_shape: tuple[int, ...] | None = None) -> Arrays:
    arrays = {g.name: {k: np.zeros(s, dtype=d) for k, d, s in g.current_fields(num_envs)} for g in groups}
    return _with_root(arrays, num_envs, state_shape)


def empty_next(groups: Sequence[GroupLayout], num_envs: int, state_shape: tuple[int, ...] | None = None) -> Arrays:
    arrays = {g.name: {k: np.zeros(s, dtype=d) for k, d, s in g.next_fields(num_envs)} for g in groups}
    return _with_root(arrays, num_envs, state_shape)
