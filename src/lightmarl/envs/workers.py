"""Env copies stepped in worker processes, results exchanged through shared memory.

:class:`ProcessVecEnv` has the interface of :class:`~lightmarl.envs.pettingzoo.ParallelVecEnv`
but splits its ``num_envs`` copies over ``num_workers`` processes; each worker steps its
contiguous slice of copies (one slice per phase, see :class:`ProcessVecEnv`) serially with the
same code as the in-process vector (:class:`EnvSlice`), so both produce the same trajectories
for the same seeds and actions.

Layout and protocol:

* One :class:`~multiprocessing.shared_memory.SharedMemory` block (:class:`SharedArrays`)
  holds, per group, the actions ``[num_envs, agents, ...]``, the step's results
  (``observation``, ``action_mask``, ``reward``, ``terminated``, ``truncated``, ``done``),
  the observations for the next step (``observation``, ``valid``, ``action_mask``) and one
  root ``ended [num_envs]`` flag; where the env's global state is recorded, also the
  ``state [num_envs, ...]`` after the step and for the next step (under :data:`ROOT`).
  Worker ``k`` writes only the rows of its own copies.
* A duplex pipe per worker carries small commands (``("step", phase)``, ``("reset", phase)``
  with ``phase=None`` for all of the worker's copies, ``("render", index)``, ``("close", None)``)
  and replies (``("ok", payload)`` or ``("error", (message, traceback))``); observations never go
  through the pipe. Between commands a worker spin-waits briefly before it sleeps (``spin_wait``).
* The parent waits on every pending pipe *and* every worker's process sentinel with a
  timeout, so a worker that dies or hangs raises instead of blocking forever.

Workers ignore SIGINT (Ctrl-C reaches the parent, which shuts them down), exit when their pipe
closes or their parent process goes away, and never import torch themselves: this module
imports only NumPy and the standard library at module level, so a worker starts in well under
a second (importing ``torch`` + ``tensordict`` takes about 5 s on a 2-core machine). The
parent-side code imports torch lazily.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing as mp
import os
import select
import signal
import sys
import time
import traceback
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from lightmarl import keys
from lightmarl._imports import import_object

if TYPE_CHECKING:
    import torch
    from tensordict import TensorDict

    from lightmarl.envs.spec import EnvSpec

log = logging.getLogger(__name__)

Arrays = dict[str, dict[str, np.ndarray]]  # group name -> key -> [num_envs, agents_in_group, ...]

#: the ``Arrays`` entry of each env copy as a whole, not of a group: ``{"state": [num_envs, *state_shape]}``
#: (the env's global ``state()``), present only when the vector records it (``EnvSpec.state_shape``).
ROOT = "__root__"

_ALIGN = 64  # byte alignment of each array in the shared block


@dataclass(frozen=True)
class GroupLayout:
    """What a worker needs to know about one group: a torch-free, picklable slice of ``GroupSpec``."""

    name: str
    agents: tuple[str, ...]
    observation_shape: tuple[int, ...]
    has_action_mask: bool
    num_actions: int
    action_shape: tuple[int, ...]
    action_dtype: str  # NumPy dtype name

    @classmethod
    def of(cls, spec: EnvSpec) -> list[GroupLayout]:
        return [
            cls(
                name=g.name,
                agents=tuple(g.agents),
                observation_shape=tuple(g.observation_shape),
                has_action_mask=g.has_action_mask,
                num_actions=g.num_actions,
                action_shape=tuple(g.action_shape),
                action_dtype="float32" if g.action_kind == "continuous" else "int64",
            )
            for g in spec.groups.values()
        ]

    def current_fields(self, num_envs: int) -> list[tuple[str, str, tuple[int, ...]]]:
        """``(key, dtype, shape)`` of what the policies see at the next step."""
        rows = (num_envs, len(self.agents))
        fields = [(keys.OBSERVATION, "float32", (*rows, *self.observation_shape)), (keys.VALID, "bool", rows)]
        if self.has_action_mask:
            fields.append((keys.ACTION_MASK, "bool", (*rows, self.num_actions)))
        return fields

    def next_fields(self, num_envs: int) -> list[tuple[str, str, tuple[int, ...]]]:
        """``(key, dtype, shape)`` of a step's results, in the order ``ParallelVecEnv.step`` returns them."""
        rows = (num_envs, len(self.agents))
        fields = [(keys.OBSERVATION, "float32", (*rows, *self.observation_shape))]
        if self.has_action_mask:
            fields.append((keys.ACTION_MASK, "bool", (*rows, self.num_actions)))
        fields += [(keys.REWARD, "float32", rows), (keys.TERMINATED, "bool", rows), (keys.TRUNCATED, "bool", rows)]
        fields.append((keys.DONE, "bool", rows))
        return fields

    def action_field(self, num_envs: int) -> tuple[str, tuple[int, ...]]:
        return self.action_dtype, (num_envs, len(self.agents), *self.action_shape)


def root_fields(num_envs: int, state_shape: tuple[int, ...] | None) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(key, dtype, shape)`` of the env copies' own entries (under :data:`ROOT`): the global state, if recorded."""
    return [] if state_shape is None else [(keys.STATE, "float32", (num_envs, *state_shape))]


def _with_root(arrays: Arrays, num_envs: int, state_shape: tuple[int, ...] | None) -> Arrays:
    if state_shape is not None:
        arrays[ROOT] = {k: np.zeros(s, dtype=d) for k, d, s in root_fields(num_envs, state_shape)}
    return arrays


def empty_current(groups: Sequence[GroupLayout], num_envs: int, state_shape: tuple[int, ...] | None = None) -> Arrays:
    arrays = {g.name: {k: np.zeros(s, dtype=d) for k, d, s in g.current_fields(num_envs)} for g in groups}
    return _with_root(arrays, num_envs, state_shape)


def empty_next(groups: Sequence[GroupLayout], num_envs: int, state_shape: tuple[int, ...] | None = None) -> Arrays:
    arrays = {g.name: {k: np.zeros(s, dtype=d) for k, d, s in g.next_fields(num_envs)} for g in groups}
    return _with_root(arrays, num_envs, state_shape)


class EnvSlice:
    """Steps env copies ``start .. start + len(envs) - 1`` of a vector, writing their rows of shared arrays.

    The one implementation of stepping, auto-reset and error messages, used by the in-process
    ``ParallelVecEnv`` (one slice over every copy) and by each worker of :class:`ProcessVecEnv`.
    Rows are written, never cleared: the caller hands in zeroed rows. Arrays that carry a
    :data:`ROOT` entry also get each copy's global ``env.state()``, next to its observations.

    Args:
        envs: the env copies of this slice.
        groups: the env's groups.
        seeds: each copy's reset seed (``reset()`` reseeds; auto-resets continue the env's RNG).
        start: index of ``envs[0]`` in the vector.
        env_name: the env's name, for messages.
        possible_agents: every agent name, for messages.
    """

    def __init__(
        self,
        envs: Sequence[Any],
        groups: Sequence[GroupLayout],
        seeds: Sequence[int],
        start: int,
        env_name: str,
        possible_agents: Sequence[str],
    ) -> None:
        if len(envs) != len(seeds):
            raise ValueError(f"{len(envs)} envs but {len(seeds)} seeds")
        self.envs = list(envs)
        self.seeds = list(seeds)
        self.start = start
        self.stop = start + len(self.envs)
        self.env_name = env_name
        self.possible_agents = list(possible_agents)
        # agent name -> (group name, position in group)
        self.slot = {a: (g.name, i) for g in groups for i, a in enumerate(g.agents)}

    def where(self, e: int) -> str:
        """``env 'name' (copy e, seed s)``: how messages name env copy ``e`` (a vector index)."""
        return f"env {self.env_name!r} (copy {e}, seed {self.seeds[e - self.start]})"

    def write_obs(self, arrays: Arrays, e: int, observations: dict, live: Sequence[str]) -> None:
        slot = self.slot
        for agent, obs in observations.items():
            try:
                group, i = slot[agent]
            except KeyError:
                raise RuntimeError(
                    f"{self.where(e)} returned an observation for unknown agent {agent!r}; "
                    f"possible_agents are {self.possible_agents}"
                ) from None
            target = arrays[group]
            try:
                if isinstance(obs, dict):
                    if keys.ACTION_MASK in target:
                        target[keys.ACTION_MASK][e, i] = obs["action_mask"]  # PettingZoo's dict observation
                    obs = obs["observation"]
                target[keys.OBSERVATION][e, i] = obs
            except (ValueError, TypeError, KeyError) as err:
                raise RuntimeError(
                    f"{self.where(e)} returned an observation for agent {agent!r} that does not fit its "
                    f"observation_space (expected shape {target['observation'].shape[2:]}): {type(err).__name__}: {err}"
                ) from None
        for agent in live:
            group, i = slot[agent]
            arrays[group][keys.VALID][e, i] = True

    def reset(self, current: Arrays) -> None:
        """Reset every copy with its seed, writing the first observations into ``current``."""
        for j, env in enumerate(self.envs):
            e = self.start + j
            try:
                observations, _ = env.reset(seed=self.seeds[j])
            except Exception as err:
                raise RuntimeError(f"{self.where(e)} raised in reset(): {type(err).__name__}: {err}") from err
            self.write_obs(current, e, observations, env.agents)
            if ROOT in current:
                self.write_state(current, e, env)

    def write_state(self, arrays: Arrays, e: int, env: Any) -> None:
        try:
            arrays[ROOT][keys.STATE][e] = env.state()
        except Exception as err:
            raise RuntimeError(
                f"{self.where(e)}: recording its global state() failed (expected shape "
                f"{arrays[ROOT]['state'].shape[1:]}): {type(err).__name__}: {err}"
            ) from err

    def step(self, actions: dict[str, np.ndarray], nxt: Arrays, current: Arrays, ended: np.ndarray) -> None:
        """Step every copy; see ``ParallelVecEnv.step``.

        Writes the step's results into ``nxt`` (final observation where the episode ended),
        the observations for the next step into ``current`` (the reset ones where it ended) and
        ``True`` into ``ended`` for copies that were reset.
        """
        slot = self.slot
        for j, env in enumerate(self.envs):
            e = self.start + j
            acting = list(env.agents)  # env.step mutates env.agents
            joint = {}
            for agent in acting:
                group, i = slot[agent]
                value = actions[group][e, i]
                joint[agent] = value.item() if value.ndim == 0 else value
            try:
                observations, rewards, terminations, truncations, _ = env.step(joint)
            except Exception as err:
                raise RuntimeError(f"{self.where(e)} raised in step(): {type(err).__name__}: {err}") from err
            self.write_obs(nxt, e, observations, ())
            if ROOT in nxt:
                self.write_state(nxt, e, env)  # the final state where the episode ended
            for agent in acting:
                group, i = slot[agent]
                arrays = nxt[group]
                arrays[keys.REWARD][e, i] = rewards.get(agent, 0.0)
                arrays[keys.TERMINATED][e, i] = terminations.get(agent, False)
                arrays[keys.TRUNCATED][e, i] = truncations.get(agent, False)
            if env.agents and not all(terminations.get(a, False) or truncations.get(a, False) for a in env.agents):
                for agent in env.agents:
                    group, i = slot[agent]
                    current[group][keys.VALID][e, i] = True
                continue
            # Episode over: mark everyone who was present done, and reset this copy.
            ended[e] = True
            for agent in acting:
                group, i = slot[agent]
                if not (nxt[group][keys.TERMINATED][e, i] or nxt[group][keys.TRUNCATED][e, i]):
                    nxt[group][keys.TRUNCATED][e, i] = True
            try:
                observations, _ = env.reset()
            except Exception as err:
                raise RuntimeError(f"{self.where(e)} raised in reset(): {type(err).__name__}: {err}") from err
            self.write_obs(current, e, observations, env.agents)
            if ROOT in current:
                self.write_state(current, e, env)
        rows = slice(self.start, self.stop)
        going_on = ~ended[rows]
        for group, arrays in nxt.items():
            keep = going_on
            if group != ROOT:
                np.logical_or(arrays[keys.TERMINATED][rows], arrays[keys.TRUNCATED][rows], out=arrays[keys.DONE][rows])
                # Only agents still present: one that just left keeps zeros, not its final observation.
                keep = going_on[:, None] & current[group][keys.VALID][rows]
            # Observations (and state) for the next step: the new ones, except in copies that were reset.
            for key in (keys.OBSERVATION, keys.ACTION_MASK, keys.STATE):
                if key in arrays:
                    current[group][key][rows][keep] = arrays[key][rows][keep]

    def close(self) -> None:
        self.close_all(self.envs)

    @staticmethod
    def close_all(envs: Sequence[Any]) -> None:
        for env in envs:
            try:
                env.close()
            except Exception:
                log.debug("closing env copy failed", exc_info=True)


def slice_class_for(envs: Sequence[Any]) -> type[EnvSlice]:
    """The stepping code for these env copies: :class:`EnvSlice` for parallel envs,
    :class:`~lightmarl.envs.aec.AECSlice` (one turn per step) for AEC envs."""
    from lightmarl.envs.aec import AECSlice, is_aec_env  # imports this module

    return AECSlice if envs and is_aec_env(envs[0]) else EnvSlice


class SharedArrays:
    """Every array a :class:`ProcessVecEnv` exchanges with its workers, in one shared-memory block.

    The layout (offsets) is a function of ``groups``, ``num_envs`` and ``state_shape`` alone, so a
    worker that knows them and the block's name sees the same arrays.

    Args:
        groups: the env's groups.
        num_envs: env copies in the vector.
        name: attach to this existing block (workers); ``None`` creates one (the parent).
        state_shape: shape of the env's global state to record (under :data:`ROOT`), or ``None``.
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


# -- worker side -------------------------------------------------------------------------


@dataclass(frozen=True)
class _WorkerArgs:
    index: int
    env_fn: str
    env_kwargs: dict[str, Any]
    env_name: str
    possible_agents: tuple[str, ...]
    groups: tuple[GroupLayout, ...]
    num_envs: int
    shm_name: str
    chunks: tuple[tuple[int, tuple[int, ...]], ...]  # per phase: (first copy, seeds of its copies)
    state_shape: tuple[int, ...] | None = None
    spin_wait: float = 0.0


def _limit_torch_threads() -> None:
    torch_module = sys.modules.get("torch")  # imported by the parent's __main__ or by the env, if at all
    if torch_module is not None:
        torch_module.set_num_threads(1)


def _describe(err: BaseException) -> tuple[str, str]:
    message = str(err) if isinstance(err, RuntimeError) and str(err).startswith("env ") else None
    return message or f"{type(err).__name__}: {err}", traceback.format_exc()


def _worker_main(conn: Connection, args: _WorkerArgs) -> None:
    """A worker's life: build its env copies, then answer commands until ``close`` or EOF.

    The copies are held as one :class:`EnvSlice` per phase of the vector; ``step`` and
    ``reset`` name a phase (``None``: all of them).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _limit_torch_threads()
    parent = os.getppid()
    shared: SharedArrays | None = None
    envs: list[Any] = []
    try:
        try:
            fn = import_object(args.env_fn, field="env.env_fn")
            blocks = []
            for start, seeds in args.chunks:
                mine = []
                for j, seed in enumerate(seeds):
                    try:
                        mine.append(fn(**args.env_kwargs))
                    except Exception as err:
                        raise RuntimeError(
                            f"env {args.env_name!r} (copy {start + j}, seed {seed}): "
                            f"{args.env_fn}(**{args.env_kwargs!r}) raised {type(err).__name__}: {err}"
                        ) from err
                    envs.append(mine[-1])
                slice_class = slice_class_for(mine)
                blocks.append(slice_class(mine, args.groups, seeds, start, args.env_name, args.possible_agents))
            _limit_torch_threads()  # the env's module may have imported torch
            shared = SharedArrays(args.groups, args.num_envs, name=args.shm_name, state_shape=args.state_shape)
        except Exception as err:  # noqa: BLE001 -- whatever it is, the parent must hear of it
            conn.send(("error", _describe(err)))
            return
        conn.send(("ready", os.getpid()))
        while True:
            # Poll (yielding the CPU to anyone who wants it) before sleeping: the next command
            # usually comes within a few ms, and waking a sleeping process costs 0.3-1 ms on a VM.
            spin_until = time.perf_counter() + args.spin_wait
            while time.perf_counter() < spin_until and not conn.poll(0):
                os.sched_yield()
            while not conn.poll(1.0):
                if os.getppid() != parent:  # parent gone (its pipe may live on in a forked process)
                    return
            command, arg = conn.recv()
            if command == "close":
                return
            try:
                payload: Any = None
                if command == "step":
                    for block in blocks if arg is None else (blocks[arg],):
                        shared.clear_rows(slice(block.start, block.stop))
                        block.step(shared.actions, shared.next, shared.current, shared.ended)
                elif command == "reset":
                    for block in blocks if arg is None else (blocks[arg],):
                        shared.clear_rows(slice(block.start, block.stop), sections=("current",))
                        block.reset(shared.current)
                elif command == "render":
                    block = next(b for b in blocks if b.start <= arg < b.stop)
                    payload = block.envs[arg - block.start].render()
                else:
                    raise ValueError(f"unknown command {command!r}")
                conn.send(("ok", payload))
            except Exception as err:  # noqa: BLE001 -- reported to the parent, which raises it
                conn.send(("error", _describe(err)))
    except (EOFError, OSError):  # the parent closed the pipe or went away
        pass
    finally:
        EnvSlice.close_all(envs)
        if shared is not None:
            shared.release(unlink=False)


# -- parent side -------------------------------------------------------------------------


class _RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (chained as the cause)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


@dataclass
class _Worker:
    index: int
    process: Any  # multiprocessing.context.SpawnProcess / ForkServerProcess
    conn: Connection
    chunks: tuple[tuple[int, tuple[int, ...]], ...]  # per phase: (first copy, seeds of its copies)

    def holds(self, index: int) -> bool:
        return any(start <= index < start + len(seeds) for start, seeds in self.chunks)

    def describe(self) -> str:
        ranges = [f"{s}" if len(seeds) == 1 else f"{s}..{s + len(seeds) - 1}" for s, seeds in self.chunks]
        copies = ("copy " if ranges == [str(self.chunks[0][0])] else "copies ") + ", ".join(ranges)
        seeds = [seed for _, chunk in self.chunks for seed in chunk]
        return f"env worker {self.index} (pid {self.process.pid}, {copies}, seeds {seeds})"


def _shutdown(workers: list[_Worker], shared: SharedArrays, timeout: float = 5.0) -> None:
    """Ask every worker to close, join them (terminate / kill stragglers), free the shared block.

    A module-level function holding no reference to the :class:`ProcessVecEnv`, so it can run
    from ``weakref.finalize`` when the vector is garbage-collected or the interpreter exits.
    """
    for w in workers:
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(("close", None))
    deadline = time.monotonic() + timeout
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.process.is_alive():
            log.warning("%s did not exit within %.0f s of close(); terminating it", w.describe(), timeout)
            w.process.terminate()
            w.process.join(1.0)
        if w.process.is_alive():
            w.process.kill()
            w.process.join(1.0)
        w.conn.close()
    shared.release(unlink=True)


@contextlib.contextmanager
def _single_threaded_children() -> Iterator[None]:
    """Children started inside inherit 1-thread BLAS / OpenMP settings (unless the user set them)."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    added = [n for n in names if n not in os.environ]
    for n in added:
        os.environ[n] = "1"
    try:
        yield
    finally:
        for n in added:
            os.environ.pop(n, None)


@contextlib.contextmanager
def _skip_main_reimport(env_fn: str) -> Iterator[None]:
    """Children started inside do not re-import the parent's ``__main__``.

    ``spawn`` / ``forkserver`` children normally re-run the parent's main script or module
    (``lightmarl``'s CLI, a benchmark, pytest) so that objects defined there unpickle; the
    workers need nothing from it (the env comes by import path), and re-running it would
    import torch, Lightning and the rest in every worker: about 5 s and a few hundred MB
    each. An ``env_fn`` under ``__main__.`` keeps the re-import. Multiprocessing reads
    ``__main__.__spec__`` / ``__file__`` only while ``Process.start()`` runs.
    """
    main = sys.modules.get("__main__")
    if main is None or env_fn.startswith("__main__."):
        yield
        return
    missing = object()
    saved = {attr: main.__dict__.get(attr, missing) for attr in ("__spec__", "__file__")}
    main.__dict__["__spec__"] = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        for attr, value in saved.items():
            if value is missing:
                main.__dict__.pop(attr, None)
            else:
                main.__dict__[attr] = value


def split_evenly(count: int, parts: int) -> list[int]:
    """``parts`` sizes summing to ``count``, the first ``count % parts`` one larger."""
    return [count // parts + (k < count % parts) for k in range(parts)]


class ProcessVecEnv:
    """``num_envs`` PettingZoo envs stepped by ``num_workers`` worker processes, with auto-reset.

    Parallel envs or turn-based AEC envs (one turn per step): each worker steps its copies with
    the slice class :func:`slice_class_for` picks for them.

    Same interface and results as :class:`~lightmarl.envs.pettingzoo.ParallelVecEnv` (copy
    ``i`` reset with ``seeds[i]``): ``reset()`` / ``step()`` return per group tensors shaped
    ``[num_envs, agents_in_group, ...]`` (fresh tensors each call, safe to keep), and an env
    whose episode ended is reset inside ``step``. The parent waits for all workers, so the env
    work of a step runs in parallel while the policy's forward pass runs in the parent between
    steps.

    Phases: with ``num_phases=2`` the copies form two halves (:meth:`phases`, each a
    :class:`VecEnvPhase` with the same interface plus ``step_async`` / ``step_wait``), and
    every worker holds copies of both halves. A collector then sends one half's actions and
    computes the other half's while the workers step the first: the policy's forward pass
    overlaps env stepping instead of alternating with it. Phase ``p`` covers copies
    ``phase_bounds[p] .. phase_bounds[p + 1] - 1``; copy ``i`` is still reset with
    ``seeds[i]``, so the phases step exactly the trajectories of the whole vector.

    Errors: an exception in a worker's env raises :class:`RuntimeError` here naming the env
    copy and its seed, with the worker's traceback chained; a worker that dies or does not
    answer within ``timeout`` seconds raises (and shuts the vector down) instead of hanging.
    :meth:`close` (also run when the vector is garbage-collected or the interpreter exits)
    joins the workers and frees the shared memory.

    Args:
        env_fn: import path of the env constructor (workers import it themselves).
        env_kwargs: its keyword arguments (picklable).
        spec: the env's :class:`EnvSpec` (built in the parent, e.g. by ``PettingZooEnvConfig.spec()``).
        seeds: one reset seed per env copy.
        num_workers: worker processes, ``1 <= num_workers <= len(seeds)``.
        num_phases: ``1``, or ``2`` halves stepped in alternation (needs ``2 * num_workers``
            copies or more: every worker holds at least one copy of each half).
        start_method: ``"spawn"`` (default) or ``"forkserver"``; ``"fork"`` is refused (unsafe
            once torch has started threads).
        timeout: seconds to wait for a step / reset / render answer.
        start_timeout: seconds to wait for the workers to import and build their envs.
        spin_wait: seconds a worker keeps polling for its next command (yielding the CPU to
            any other runnable process) before it sleeps. Between the steps of a rollout the
            next command comes within a few milliseconds, and on a virtual machine waking a
            sleeping process costs 0.3-1 ms, a large part of a step; ``0`` sleeps at once.
    """

    def __init__(
        self,
        env_fn: str,
        env_kwargs: dict[str, Any],
        spec: EnvSpec,
        seeds: Sequence[int],
        num_workers: int,
        *,
        num_phases: int = 1,
        start_method: str = "spawn",
        timeout: float = 300.0,
        start_timeout: float = 120.0,
        spin_wait: float = 0.01,
    ) -> None:
        seeds = [int(s) for s in seeds]
        if not isinstance(num_workers, int) or not 1 <= num_workers <= len(seeds):
            raise ValueError(f"num_workers: expected 1..{len(seeds)} (the number of env copies), got {num_workers!r}")
        if num_phases not in (1, 2) or num_phases * num_workers > len(seeds):
            raise ValueError(
                f"num_phases: expected 1, or 2 with at least 2 env copies per worker; got {num_phases!r} "
                f"for {len(seeds)} copies and {num_workers} workers"
            )
        if start_method not in ("spawn", "forkserver"):
            raise ValueError(f"start_method: expected 'spawn' or 'forkserver', got {start_method!r}")
        self.spec = spec
        self.seeds = seeds
        self.num_envs = len(seeds)
        self.num_workers = num_workers
        self.timeout = timeout
        self.current: dict[str, dict[str, torch.Tensor]] = {}
        self.phase_bounds = [0]
        for size in split_evenly(self.num_envs, num_phases):
            self.phase_bounds.append(self.phase_bounds[-1] + size)
        self._groups = GroupLayout.of(spec)
        self._agent_ids: dict[str, Any] = {}
        self._broken: str | None = None
        self._in_flight: list[int] = []  # phases sent ``step`` whose answers are not read yet, in order
        self._shared = SharedArrays(self._groups, self.num_envs, state_shape=spec.state_shape)
        self._workers: list[_Worker] = []
        # Registered before any process starts, so a failure below still cleans up.
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._shared)
        ctx: Any = mp.get_context(start_method)
        chunks: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in range(num_workers)]
        for first, stop in zip(self.phase_bounds, self.phase_bounds[1:]):
            start = first
            for k, size in enumerate(split_evenly(stop - first, num_workers)):
                chunks[k].append((start, tuple(seeds[start : start + size])))
                start += size
        try:
            with _single_threaded_children(), _skip_main_reimport(env_fn):
                for k in range(num_workers):
                    args = _WorkerArgs(
                        index=k,
                        env_fn=env_fn,
                        env_kwargs=dict(env_kwargs),
                        env_name=spec.name,
                        possible_agents=tuple(spec.possible_agents),
                        groups=tuple(self._groups),
                        num_envs=self.num_envs,
                        shm_name=self._shared.name,
                        chunks=tuple(chunks[k]),
                        state_shape=spec.state_shape,
                        spin_wait=float(spin_wait),
                    )
                    parent_conn, child_conn = ctx.Pipe(duplex=True)
                    process = ctx.Process(
                        target=_worker_main, args=(child_conn, args), name=f"lightmarl-env-worker-{k}", daemon=True
                    )
                    process.start()
                    child_conn.close()  # only the worker holds its end: its death reads as EOF here
                    self._workers.append(_Worker(k, process, parent_conn, args.chunks))
            self._request("start", None, timeout=start_timeout)
        except BaseException:
            self.close()
            raise

    # -- protocol ----------------------------------------------------------------------
    def _request(self, command: str, arg: Any, timeout: float | None, workers: Sequence[_Worker] = ()) -> list[Any]:
        """Send ``command`` to ``workers`` (default: all; ``"start"``: nothing to send) and return
        their payloads in order; answers of steps still in flight are read (and dropped) first."""
        self._drain()
        workers = workers or self._workers
        self._send(workers, command, arg)
        return self._answers(workers, command, timeout)

    def _drain(self) -> None:
        """Read the answers of steps still in flight (e.g. after the collector stopped on an error)."""
        while self._in_flight:
            self._in_flight.pop(0)
            with contextlib.suppress(RuntimeError):  # a worker's error in a step nobody waits for
                self._answers(self._workers, "step", self.timeout)

    def _send(self, workers: Sequence[_Worker], command: str, arg: Any) -> None:
        self._check_usable()
        if command == "start":
            return
        for w in workers:
            try:
                w.conn.send((command, arg))
            except OSError:
                w.process.join(1.0)
                self._fail(RuntimeError(f"{w.describe()} died (exit code {w.process.exitcode}) before {command}"))

    def _answers(self, workers: Sequence[_Worker], command: str, timeout: float | None) -> list[Any]:
        """Every worker's answer to ``command``, in order.

        Waits on the pipes and the process sentinels together: a dead worker is seen at once.
        Every answer is read before a worker's error is raised, so the pipes stay in step and
        the vector stays usable; a dead, silent or unstartable worker shuts the vector down.
        """
        try:
            payloads, error = self._exchange(workers, command, timeout)
        except _Fatal as fatal:
            self._fail(fatal.error)
        except BaseException as err:  # e.g. KeyboardInterrupt while waiting: answers may still come
            self._broken = f"interrupted by {type(err).__name__} during {command}"
            raise
        if error is not None:  # every answer was read: the vector can go on
            raise error
        return payloads

    def _fail(self, error: BaseException) -> NoReturn:
        self._broken = str(error)
        self.close()
        raise error from error.__cause__  # a worker's traceback, or None

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise RuntimeError(f"ProcessVecEnv is unusable: {self._broken}")
        if not self._finalizer.alive:
            raise RuntimeError("ProcessVecEnv is closed")

    def _exchange(
        self, workers: Sequence[_Worker], command: str, timeout: float | None
    ) -> tuple[list[Any], RuntimeError | None]:
        pending = {w.index: w for w in workers}
        payloads: dict[int, Any] = {}
        errors: list[tuple[_Worker, str, str]] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        # A poll object over the pending pipes and sentinels: a third of the cost of
        # multiprocessing's wait(), which builds a selector each call (twice per step).
        poller = select.poll()
        owner: dict[int, _Worker] = {}  # fd -> its worker
        for w in workers:
            for fd in (w.conn.fileno(), w.process.sentinel):
                poller.register(fd, select.POLLIN)
                owner[fd] = w
        while pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = poller.poll(None if remaining is None else math.ceil(remaining * 1000))
            if not events:
                names = "; ".join(w.describe() for w in pending.values())
                raise _Fatal(TimeoutError(f"no answer to {command} within {timeout:g} s from {names}"))
            for index in sorted({owner[fd].index for fd, _ in events}):
                w = pending[index]
                poller.unregister(w.conn.fileno())
                poller.unregister(w.process.sentinel)
                try:
                    if not w.conn.poll():  # the sentinel fired and nothing is left to read
                        raise EOFError
                    status, payload = w.conn.recv()
                except (EOFError, OSError):
                    w.process.join(1.0)
                    raise _Fatal(
                        RuntimeError(f"{w.describe()} died (exit code {w.process.exitcode}) during {command}")
                    ) from None
                del pending[w.index]
                if status == "error":
                    errors.append((w, *payload))
                else:
                    payloads[w.index] = payload
        if errors:
            errors.sort(key=lambda e: e[0].index)
            w, message, remote = errors[0]
            more = f" (and {len(errors) - 1} more worker(s) failed)" if len(errors) > 1 else ""
            error = RuntimeError(f"{message} [in {w.describe()}]{more}")
            error.__cause__ = _RemoteTraceback(remote)
            if command == "start":
                raise _Fatal(error)
            return [], error
        return [payloads[w.index] for w in workers], None

    # -- the vector env interface ------------------------------------------------------
    def _copy_out(self, arrays: Arrays, rows: slice = slice(None)) -> dict[str, dict[str, torch.Tensor]]:
        import torch

        return {g: {k: torch.from_numpy(v[rows].copy()) for k, v in d.items()} for g, d in arrays.items()}

    def _rows(self, phase: int | None) -> slice:
        return slice(None) if phase is None else slice(self.phase_bounds[phase], self.phase_bounds[phase + 1])

    def reset(self) -> dict[str, dict[str, torch.Tensor]]:
        self._reset(None)
        self.current = self._copy_out(self._shared.current)
        return self.current

    def _reset(self, phase: int | None) -> dict[str, dict[str, torch.Tensor]]:
        self._request("reset", phase, self.timeout)
        return self._copy_out(self._shared.current, self._rows(phase))

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[dict[str, dict[str, torch.Tensor]], torch.Tensor]:
        """Step every env copy; arguments and results as in ``ParallelVecEnv.step``."""
        self._drain()
        self._step_async(actions, None)
        nxt, ended, self.current = self._receive(None)
        return nxt, ended

    def _step_async(self, actions: dict[str, torch.Tensor], phase: int | None) -> None:
        """Write ``phase``'s actions into the shared block and tell every worker to step its copies of it."""
        self._check_usable()
        rows = self._rows(phase)
        for g in self._groups:
            target = self._shared.actions[g.name][rows]
            try:
                target[...] = actions[g.name].numpy()
            except KeyError:
                raise KeyError(f"actions: no entry for group {g.name!r}") from None
            except ValueError as err:
                raise ValueError(f"actions[{g.name!r}]: expected shape {tuple(target.shape)}: {err}") from None
        self._send(self._workers, "step", phase)
        self._in_flight.append(-1 if phase is None else phase)

    def _receive(self, phase: int | None) -> tuple[dict[str, dict[str, torch.Tensor]], torch.Tensor, dict]:
        """Read the answers to the oldest step in flight, which must be ``phase``'s: ``(next, ended, current)``."""
        import torch

        expected = -1 if phase is None else phase
        if not self._in_flight or self._in_flight[0] != expected:
            raise RuntimeError(
                f"step_wait: no step of phase {phase} is the next in flight (in flight: {self._in_flight}); "
                "wait for the steps in the order they were sent"
            )
        self._in_flight.pop(0)
        self._answers(self._workers, "step", self.timeout)
        rows = self._rows(phase)
        ended = torch.from_numpy(self._shared.ended[rows].copy())
        return self._copy_out(self._shared.next, rows), ended, self._copy_out(self._shared.current, rows)

    def phases(self) -> list[VecEnvPhase]:
        """The copies as :attr:`num_phases` vectors of their own, to be stepped in alternation."""
        return [VecEnvPhase(self, p) for p in range(self.num_phases)]

    @property
    def num_phases(self) -> int:
        return len(self.phase_bounds) - 1

    def observation_td(self) -> TensorDict:
        """As ``ParallelVecEnv.observation_td``: per group ``observation``, ``valid``, ``agent_id``
        and ``action_mask`` where the env has one; root batch ``[num_envs]``."""
        from lightmarl.envs.pettingzoo import observation_td

        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> Any:
        if not 0 <= index < self.num_envs:
            raise IndexError(f"render: env copy {index} out of range (num_envs={self.num_envs})")
        worker = next(w for w in self._workers if w.holds(index))
        return self._request("render", index, self.timeout, workers=[worker])[0]

    @property
    def worker_processes(self) -> list[Any]:
        """The worker :class:`multiprocessing.Process` objects (for monitoring and tests)."""
        return [w.process for w in self._workers]

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Stop the workers (closing their envs) and free the shared memory; idempotent."""
        self._finalizer()

    def __enter__(self) -> ProcessVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class VecEnvPhase:
    """One phase (a contiguous range of copies) of a :class:`ProcessVecEnv`, as a vector of its own.

    The :class:`~lightmarl.envs.pettingzoo.VecEnv` interface over copies
    ``vector.phase_bounds[phase] ..`` (indices here are relative to the phase), plus
    :meth:`step_async` / :meth:`step_wait`: send this phase's actions, do other work (e.g. the
    other phase's forward pass), then read the results. Steps of different phases must be
    waited for in the order they were sent. :meth:`close` closes the whole vector.
    """

    def __init__(self, vector: ProcessVecEnv, phase: int) -> None:
        self.vector = vector
        self.phase = phase
        self.first = vector.phase_bounds[phase]
        self.num_envs = vector.phase_bounds[phase + 1] - self.first
        self.spec = vector.spec
        self.seeds = vector.seeds[self.first : self.first + self.num_envs]
        self.current: dict[str, dict[str, torch.Tensor]] = {}
        self._agent_ids: dict[str, Any] = {}

    def reset(self) -> dict[str, dict[str, torch.Tensor]]:
        self.current = self.vector._reset(self.phase)
        return self.current

    def step_async(self, actions: dict[str, torch.Tensor]) -> None:
        """Start stepping this phase's copies with ``actions`` (``[num_envs, agents_in_group, ...]`` per group)."""
        self.vector._step_async(actions, self.phase)

    def step_wait(self) -> tuple[dict[str, dict[str, torch.Tensor]], torch.Tensor]:
        """The results of the step :meth:`step_async` started, as ``ParallelVecEnv.step`` returns them."""
        nxt, ended, self.current = self.vector._receive(self.phase)
        return nxt, ended

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[dict[str, dict[str, torch.Tensor]], torch.Tensor]:
        self.step_async(actions)
        return self.step_wait()

    def observation_td(self) -> TensorDict:
        from lightmarl.envs.pettingzoo import observation_td

        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> Any:
        if not 0 <= index < self.num_envs:
            raise IndexError(f"render: env copy {index} out of range (num_envs={self.num_envs})")
        return self.vector.render(self.first + index)

    def close(self) -> None:
        self.vector.close()


class _Fatal(Exception):
    """Internal: the vector cannot go on (a worker died, timed out or failed to start)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error
