"""Env copies stepped in worker processes, results exchanged through shared memory.

[`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv] has the interface of [`InProcessVecEnv`][lightmarl.envs.runners.inprocess.InProcessVecEnv]
but splits its ``num_envs`` copies over ``num_workers`` processes; each worker
(`lightmarl.envs.runners.worker`) steps its contiguous slice of copies (one slice per
phase, see [`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv]) serially with the env family's stepping code (an
`EnvSlice`, the same code the in-process vector runs), so both
produce the same trajectories for the same seeds and actions.

One `SharedArrays` block holds the actions, the
step's results and the next observations; a duplex pipe per worker carries small commands and
replies. The parent waits on every pending pipe *and* every worker's process sentinel with a
timeout, so a worker that dies or hangs is seen instead of blocking forever. Then the vector
either stops (``on_failure="stop"``: shut down, raise [`TrainingFault`][lightmarl.errors.TrainingFault]
naming the worker, its env copies and their seeds) or restarts the worker (``"restart"``): a
new process builds and resets the same copies, whose interrupted episodes end *truncated* at
that step (reward 0, the last observation repeated, see
`end_truncated`), and the other
copies go on untouched.
"""

from __future__ import annotations

import contextlib
import logging
import math
import multiprocessing as mp
import select
import time
import weakref
from collections.abc import Sequence
from typing import Any, Literal, NoReturn

import torch
from tensordict import TensorDict

from lightmarl.envs.base import FastForwardingVecEnv, Outputs, observation_td
from lightmarl.envs.layout import Arrays, GroupLayout, empty_current
from lightmarl.envs.runners.placement import worker_cpus
from lightmarl.envs.runners.shared_memory import SharedArrays
from lightmarl.envs.runners.spawn import (
    RemoteTraceback,
    WorkerHandle,
    shutdown,
    single_threaded_children,
    skip_main_reimport,
    split_evenly,
)
from lightmarl.envs.runners.worker import WorkerArgs, worker_main
from lightmarl.envs.spec import EnvSpec
from lightmarl.errors import TrainingFault

log = logging.getLogger(__name__)

#: what a vector does when a worker dies or does not answer in time.
WorkerFailure = Literal["stop", "restart"]

#: the slice factory of PettingZoo envs (parallel and AEC), the env family worker processes serve today
PETTINGZOO_SLICE = "lightmarl.envs.pettingzoo.slices.pettingzoo_slice"


class ProcessVecEnv(FastForwardingVecEnv):
    """``num_envs`` env copies stepped by ``num_workers`` worker processes, with auto-reset.

    Each worker builds its copies from ``env_fn`` and steps them with the slices ``make_slice``
    builds: by default PettingZoo's (`pettingzoo_slice`:
    parallel envs, or turn-based AEC envs one turn per step).

    Same interface and results as [`InProcessVecEnv`][lightmarl.envs.runners.inprocess.InProcessVecEnv] (copy
    ``i`` reset with ``seeds[i]``): ``reset()`` / ``step()`` return per group tensors shaped
    ``[num_envs, agents_in_group, ...]`` (fresh tensors each call, safe to keep), and an env
    whose episode ended is reset inside ``step``. The parent waits for all workers, so the env
    work of a step runs in parallel while the policy's forward pass runs in the parent between
    steps.

    Phases: with ``num_phases=2`` the copies form two halves ([`phases`][lightmarl.envs.runners.process.ProcessVecEnv.phases], each a
    `VecEnvPhase` with the same interface plus ``step_async`` / ``step_wait``), and
    every worker holds copies of both halves. A collector then sends one half's actions and
    computes the other half's while the workers step the first: the policy's forward pass
    overlaps env stepping instead of alternating with it. Phase ``p`` covers copies
    ``phase_bounds[p] .. phase_bounds[p + 1] - 1``; copy ``i`` is still reset with
    ``seeds[i]``, so the phases step exactly the trajectories of the whole vector.

    Errors: an exception in a worker's env raises `RuntimeError` here naming the env
    copy and its seed, with the worker's traceback chained. A worker that dies or does not
    answer within ``timeout`` seconds is handled by ``on_failure``: a
    restart (at most ``max_restarts`` over the vector's life, during a step) or a stop that
    shuts the vector down and raises [`TrainingFault`][lightmarl.errors.TrainingFault].
    [`close`][lightmarl.envs.runners.process.ProcessVecEnv.close] (also run when the vector is garbage-collected or the interpreter exits)
    joins the workers and frees the shared memory.

    Args:
        env_fn: import path of the env constructor (workers import it themselves).
        env_kwargs: its keyword arguments (picklable).
        spec: the env's [`EnvSpec`][lightmarl.envs.spec.EnvSpec] (built in the parent, e.g. by ``PettingZooEnvConfig.spec()``).
        seeds: one reset seed per env copy.
        num_workers: worker processes, ``1 <= num_workers <= len(seeds)``.
        num_phases: ``1``, or ``2`` halves stepped in alternation (needs ``2 * num_workers``
            copies or more: every worker holds at least one copy of each half).
        start_method: ``"spawn"`` (default) or ``"forkserver"``; ``"fork"`` is refused (unsafe
            once torch has started threads).
        timeout: seconds to wait for a step / reset / render answer.
        start_timeout: seconds to wait for the workers to import and build their envs.
        on_failure: ``"stop"`` or ``"restart"`` a worker that died or timed out during a step.
        max_restarts: restarts allowed over the vector's life; the next failure stops it.
        spin_wait: seconds a worker keeps polling for its next command (yielding the CPU to
            any other runnable process) before it sleeps. Between the steps of a rollout the
            next command comes within a few milliseconds, and on a virtual machine waking a
            sleeping process costs 0.3-1 ms, a large part of a step; ``0`` sleeps at once.
        make_slice: import path of the `SliceFactory` the workers
            step their copies with (they import it, so its module must not import torch).
        pin_cpus: run worker ``k`` on one CPU only, the ``k``-th of
            `cpu_order` over the CPUs this process may
            use (distinct physical cores first); ``False``: the scheduler places them.
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
        make_slice: str = PETTINGZOO_SLICE,
        on_failure: WorkerFailure = "stop",
        max_restarts: int = 3,
        pin_cpus: bool = False,
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
        if on_failure not in ("stop", "restart"):
            raise ValueError(f"on_failure: expected 'stop' or 'restart', got {on_failure!r}")
        if not isinstance(pin_cpus, bool):
            raise TypeError(f"pin_cpus: expected True or False, got {pin_cpus!r}")
        self.spec = spec
        self.seeds = seeds
        self.num_envs = len(seeds)
        self.num_workers = num_workers
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.on_failure = on_failure
        self.max_restarts = max_restarts
        #: workers restarted so far.
        self.restarts = 0
        self.current: Outputs = {}
        self.phase_bounds = [0]
        for size in split_evenly(self.num_envs, num_phases):
            self.phase_bounds.append(self.phase_bounds[-1] + size)
        self._groups = GroupLayout.of(spec)
        self._agent_ids: dict[str, Any] = {}
        self._broken: str | None = None
        self._in_flight: list[int] = []  # phases sent ``step`` whose answers are not read yet, in order
        # Per phase (-1: the whole vector), restarted workers whose copies of it end truncated at its
        # next step instead of stepping (their new envs were reset; the parent has not seen it yet).
        self._stale: dict[int, set[int]] = {}
        self._shared = SharedArrays(self._groups, self.num_envs, state_shape=spec.state_shape)
        # The observations the policies last acted on: the next observation of a step a restart cut short.
        self._seen = empty_current(self._groups, self.num_envs, spec.state_shape)
        self._workers: list[WorkerHandle] = []
        # Registered before any process starts, so a failure below still cleans up.
        self._finalizer = weakref.finalize(self, shutdown, self._workers, self._shared)
        self._ctx: Any = mp.get_context(start_method)
        chunks: list[list[tuple[int, tuple[int, ...]]]] = [[] for _ in range(num_workers)]
        for first, stop in zip(self.phase_bounds, self.phase_bounds[1:]):
            start = first
            for k, size in enumerate(split_evenly(stop - first, num_workers)):
                chunks[k].append((start, tuple(seeds[start : start + size])))
                start += size
        #: the CPU each worker is pinned to (``None``: not pinned).
        self.worker_cpus: list[int | None] = list(worker_cpus(num_workers)) if pin_cpus else [None] * num_workers
        self._args = [
            WorkerArgs(
                index=k,
                env_fn=env_fn,
                env_kwargs=dict(env_kwargs),
                env_name=spec.name,
                possible_agents=tuple(spec.env_agents),
                groups=tuple(self._groups),
                num_envs=self.num_envs,
                shm_name=self._shared.name,
                chunks=tuple(chunks[k]),
                state_shape=spec.state_shape,
                spin_wait=float(spin_wait),
                make_slice=make_slice,
                cpu=self.worker_cpus[k],
            )
            for k in range(num_workers)
        ]
        try:
            for args in self._args:
                self._workers.append(self._spawn(args))
            self._request("start", None, timeout=start_timeout)
        except BaseException:
            self.close()
            raise

    def _spawn(self, args: WorkerArgs) -> WorkerHandle:
        with single_threaded_children(), skip_main_reimport(args.env_fn):
            parent_conn, child_conn = self._ctx.Pipe(duplex=True)
            process = self._ctx.Process(
                target=worker_main, args=(child_conn, args), name=f"lightmarl-env-worker-{args.index}", daemon=True
            )
            process.start()
        child_conn.close()  # only the worker holds its end: its death reads as EOF here
        return WorkerHandle(args.index, process, parent_conn, args.chunks)

    # -- protocol ----------------------------------------------------------------------
    def _request(
        self, command: str, arg: Any, timeout: float | None, workers: Sequence[WorkerHandle] = ()
    ) -> list[Any]:
        """Send ``command`` to ``workers`` (default: all; ``"start"``: nothing to send) and return
        their payloads in order; answers of steps still in flight are read (and dropped) first."""
        self._drain()
        workers = workers or self._workers
        self._send(workers, command, arg)
        return self._answers(workers, command, timeout)

    def _drain(self) -> None:
        """Read the answers of steps still in flight (e.g. after the collector stopped on an error)."""
        while self._in_flight:
            key = self._in_flight.pop(0)
            with contextlib.suppress(RuntimeError):  # a worker's error in a step nobody waits for
                self._wait_step(key)

    def _send(self, workers: Sequence[WorkerHandle], command: str, arg: Any) -> None:
        self._check_usable()
        if command == "start":
            return
        for w in workers:
            try:
                w.conn.send((command, arg))
            except OSError:
                w.process.join(1.0)
                self._fail(TrainingFault(f"{w.describe()} died (exit code {w.process.exitcode}) before {command}"))

    def _answers(self, workers: Sequence[WorkerHandle], command: str, timeout: float | None) -> list[Any]:
        """Every worker's answer to ``command``, in order (``None`` for a worker restarted meanwhile).

        Waits on the pipes and the process sentinels together: a dead worker is seen at once.
        Every answer is read before a worker's error is raised, so the pipes stay in step and
        the vector stays usable; a dead or silent worker is restarted or stops the vector
        (`_recover`), an unstartable one shuts it down.
        """
        try:
            payloads, error, lost = self._exchange(workers, command, timeout)
        except _Fatal as fatal:
            self._fail(fatal.error)
        except BaseException as err:  # e.g. KeyboardInterrupt while waiting: answers may still come
            self._broken = f"interrupted by {type(err).__name__} during {command}"
            raise
        if lost:
            self._recover(lost, command)
        if error is not None:  # every answer was read: the vector can go on
            raise error
        return [payloads.get(w.index) for w in workers]

    def _recover(self, lost: list[tuple[WorkerHandle, str]], command: str) -> None:
        """Restart the ``lost`` workers (dead or silent during a step) where allowed, else stop the vector."""
        for w, what in lost:
            if self.on_failure == "stop":
                why = "env.worker_failure: stop"
            elif command != "step":
                why = f"a restart covers a failed step, not a failed {command}"
            elif self.restarts + len(lost) > self.max_restarts:
                why = f"no restart left: env.max_worker_restarts is {self.max_restarts}"
            else:
                continue
            self._fail(TrainingFault(f"{w.describe()} {what}; stopping ({why})"))
        for w, what in lost:
            self._restart(w, what)

    def _restart(self, w: WorkerHandle, what: str) -> None:
        self.restarts += 1
        log.warning(
            "lightmarl: %s %s; restarting it (restart %d of at most %d): its env copies start new episodes "
            "and the interrupted ones end truncated at this step",
            w.describe(),
            what,
            self.restarts,
            self.max_restarts,
        )
        w.process.kill()  # a hung worker ignores SIGTERM (as every worker does)
        w.process.join(5.0)
        w.conn.close()
        new = self._spawn(self._args[w.index])
        self._workers[w.index] = new
        self._answers([new], "start", self.start_timeout)
        self._send([new], "reset", None)
        self._answers([new], "reset", self.timeout)
        for key in (-1, *range(self.num_phases)):
            self._stale.setdefault(key, set()).add(new.index)

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
        self, workers: Sequence[WorkerHandle], command: str, timeout: float | None
    ) -> tuple[dict[int, Any], RuntimeError | None, list[tuple[WorkerHandle, str]]]:
        """``(payloads by worker index, the first worker's error, workers lost with what happened)``."""
        pending = {w.index: w for w in workers}
        payloads: dict[int, Any] = {}
        errors: list[tuple[WorkerHandle, str, str]] = []
        lost: list[tuple[WorkerHandle, str]] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        # A poll object over the pending pipes and sentinels: a third of the cost of
        # multiprocessing's wait(), which builds a selector each call (twice per step).
        poller = select.poll()
        owner: dict[int, WorkerHandle] = {}  # fd -> its worker
        for w in workers:
            for fd in (w.conn.fileno(), w.process.sentinel):
                poller.register(fd, select.POLLIN)
                owner[fd] = w
        while pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = poller.poll(None if remaining is None else math.ceil(remaining * 1000))
            if not events:
                lost += [(w, f"did not answer {command} within {timeout:g} s") for w in pending.values()]
                break
            for index in sorted({owner[fd].index for fd, _ in events}):
                w = pending.pop(index)
                poller.unregister(w.conn.fileno())
                poller.unregister(w.process.sentinel)
                try:
                    if not w.conn.poll():  # the sentinel fired and nothing is left to read
                        raise EOFError
                    status, payload = w.conn.recv()
                except (EOFError, OSError):
                    w.process.join(1.0)
                    lost.append((w, f"died (exit code {w.process.exitcode}) during {command}"))
                    continue
                if status == "error":
                    errors.append((w, *payload))
                else:
                    payloads[w.index] = payload
        if lost and command == "start":
            w, what = lost[0]
            raise _Fatal(TrainingFault(f"{w.describe()} {what}"))
        if errors:
            errors.sort(key=lambda e: e[0].index)
            w, message, remote = errors[0]
            more = f" (and {len(errors) - 1} more worker(s) failed)" if len(errors) > 1 else ""
            # An env that raised in a step is a fault of the run, like a worker that died (exit code 3).
            kind = TrainingFault if command == "step" else RuntimeError
            error = kind(f"{message} [in {w.describe()}]{more}")
            error.__cause__ = RemoteTraceback(remote)
            if command == "start":
                raise _Fatal(error)
            return payloads, error, lost
        return payloads, None, lost

    def _wait_step(self, key: int) -> None:
        """Read the answers to phase ``key``'s step (-1: the whole vector's); restarted workers' copies end truncated."""
        stale = self._stale.pop(key, set())
        try:
            self._answers([w for w in self._workers if w.index not in stale], "step", self.timeout)
        finally:
            stale |= self._stale.pop(key, set())  # workers restarted while waiting
            if not self.closed:
                for index in sorted(stale):
                    for phase, (start, seeds) in enumerate(self._workers[index].chunks):
                        if key in (-1, phase):
                            self._shared.end_truncated(slice(start, start + len(seeds)), self._seen)

    # -- the vector env interface ------------------------------------------------------
    def _copy_out(self, arrays: Arrays, rows: slice = slice(None)) -> Outputs:
        return {g: {k: torch.from_numpy(v[rows].copy()) for k, v in d.items()} for g, d in arrays.items()}

    def _rows(self, phase: int | None) -> slice:
        return slice(None) if phase is None else slice(self.phase_bounds[phase], self.phase_bounds[phase + 1])

    def reset(self) -> Outputs:
        self._reset(None)
        self.current = self._copy_out(self._shared.current)
        return self.current

    def _reset(self, phase: int | None) -> Outputs:
        self._request("reset", phase, self.timeout)
        if phase is None:
            self._stale.clear()
        else:
            self._stale.pop(phase, None)
        self._shared.remember(self._seen, self._rows(phase))
        return self._copy_out(self._shared.current, self._rows(phase))

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[Outputs, torch.Tensor]:
        """Step every env copy; arguments and results as in [`step`][lightmarl.envs.base.VecEnv.step]."""
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
        key = -1 if phase is None else phase
        stale = self._stale.get(key, set())
        self._send([w for w in self._workers if w.index not in stale], "step", phase)
        self._in_flight.append(key)

    def _receive(self, phase: int | None) -> tuple[Outputs, torch.Tensor, dict]:
        """Read the answers to the oldest step in flight, which must be ``phase``'s: ``(next, ended, current)``."""
        expected = -1 if phase is None else phase
        if not self._in_flight or self._in_flight[0] != expected:
            raise RuntimeError(
                f"step_wait: no step of phase {phase} is the next in flight (in flight: {self._in_flight}); "
                "wait for the steps in the order they were sent"
            )
        self._in_flight.pop(0)
        self._wait_step(expected)
        rows = self._rows(phase)
        self._shared.remember(self._seen, rows)
        ended = torch.from_numpy(self._shared.ended[rows].copy())
        return self._copy_out(self._shared.next, rows), ended, self._copy_out(self._shared.current, rows)

    def _fast_forward(
        self, episodes: Sequence[int], actions: Sequence[dict[str, torch.Tensor]]
    ) -> tuple[list[int], Outputs]:
        return self._restore(None, episodes, actions)

    def _restore(
        self, phase: int | None, episodes: Sequence[int], actions: Sequence[dict[str, torch.Tensor]]
    ) -> tuple[list[int], Outputs]:
        """Fast-forward the copies of ``phase`` (``episodes`` / ``actions`` indexed from its first copy):
        the copies (from the phase's first) whose episode ended early, and the phase's observations."""
        rows = self._rows(phase)
        first = rows.start or 0
        work: dict[int, list[tuple[int, int, dict[str, Any]]]] = {}
        for i, (episode, recorded) in enumerate(zip(episodes, actions)):
            e = first + i
            worker = next(w for w in self._workers if w.holds(e))
            work.setdefault(worker.index, []).append((e, int(episode), {g: a.numpy() for g, a in recorded.items()}))
        self._drain()
        workers = [w for w in self._workers if w.index in work]
        for w in workers:
            self._send([w], "fast_forward", work[w.index])
        diverged = [e - first for payload in self._answers(workers, "fast_forward", self.timeout) for e in payload]
        return diverged, self._copy_out(self._shared.current, rows)

    def phases(self) -> list[VecEnvPhase]:
        """The copies as `num_phases` vectors of their own, to be stepped in alternation."""
        return [VecEnvPhase(self, p) for p in range(self.num_phases)]

    @property
    def num_phases(self) -> int:
        return len(self.phase_bounds) - 1

    def observation_td(self) -> TensorDict:
        """What the policies see now: see `observation_td`."""
        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> Any:
        if not 0 <= index < self.num_envs:
            raise IndexError(f"render: env copy {index} out of range (num_envs={self.num_envs})")
        worker = next(w for w in self._workers if w.holds(index))
        return self._request("render", index, self.timeout, workers=[worker])[0]

    @property
    def worker_processes(self) -> list[Any]:
        """The worker `multiprocessing.Process` objects (for monitoring and tests)."""
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


class VecEnvPhase(FastForwardingVecEnv):
    """One phase (a contiguous range of copies) of a [`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv], as a vector of its own.

    The [`AsyncVecEnv`][lightmarl.envs.base.AsyncVecEnv] interface over copies
    ``vector.phase_bounds[phase] ..`` (indices here are relative to the phase), plus
    `step_async` / `step_wait`: send this phase's actions, do other work (e.g. the
    other phase's forward pass), then read the results. Steps of different phases must be
    waited for in the order they were sent. [`close`][lightmarl.envs.runners.process.ProcessVecEnv.close] closes the whole vector.
    """

    def __init__(self, vector: ProcessVecEnv, phase: int) -> None:
        self.vector = vector
        self.phase = phase
        self.first = vector.phase_bounds[phase]
        self.num_envs = vector.phase_bounds[phase + 1] - self.first
        self.spec = vector.spec
        self.seeds = vector.seeds[self.first : self.first + self.num_envs]
        self.current: Outputs = {}
        self._agent_ids: dict[str, Any] = {}

    def reset(self) -> Outputs:
        self.current = self.vector._reset(self.phase)
        return self.current

    def _fast_forward(
        self, episodes: Sequence[int], actions: Sequence[dict[str, torch.Tensor]]
    ) -> tuple[list[int], Outputs]:
        return self.vector._restore(self.phase, episodes, actions)

    def step_async(self, actions: dict[str, torch.Tensor]) -> None:
        """Start stepping this phase's copies with ``actions`` (``[num_envs, agents_in_group, ...]`` per group)."""
        self.vector._step_async(actions, self.phase)

    def step_wait(self) -> tuple[Outputs, torch.Tensor]:
        """The results of the step `step_async` started, as [`step`][lightmarl.envs.base.VecEnv.step] returns them."""
        nxt, ended, self.current = self.vector._receive(self.phase)
        return nxt, ended

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[Outputs, torch.Tensor]:
        self.step_async(actions)
        return self.step_wait()

    def observation_td(self) -> TensorDict:
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
