"""The life of one env worker process: build its env copies, then step them on command.

[`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv] starts `worker_main` in each worker
process. A worker imports only this module and what it imports: NumPy, the standard library,
the env layout and the env family's slice code, never torch, so it starts in well under a second
(importing ``torch`` + ``tensordict`` takes about 5 s on a 2-core machine);
``tests/envs/test_workers.py`` checks it. The env and its stepping code (an
`EnvSlice` factory) come by import path.

Protocol: a duplex pipe carries small commands (``("step", phase)``, ``("reset", phase)`` with
``phase=None`` for all of the worker's copies, ``("fast_forward", [(copy, episode, actions), ...])`` to
put copies back mid-episode (a resumed run), ``("render", index)``, ``("close", None)``) and
replies (``("ok", payload)`` or ``("error", (message, traceback))``); observations never go
through the pipe but through `SharedArrays`.
Between commands a worker spin-waits briefly before it sleeps (``spin_wait``). Workers ignore
SIGINT and SIGTERM (they reach the parent, which shuts them down) and exit when their pipe closes or
their parent process goes away.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from lightmarl._imports import import_object
from lightmarl.envs.layout import EnvSlice, GroupLayout
from lightmarl.envs.runners.placement import pin_to
from lightmarl.envs.runners.shared_memory import SharedArrays

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerArgs:
    """What one worker needs to build and step its copies (picklable, torch-free)."""

    index: int
    env_fn: str
    env_kwargs: dict[str, Any]
    env_name: str
    possible_agents: tuple[Hashable, ...]  # the env's own ids
    groups: tuple[GroupLayout, ...]
    num_envs: int
    shm_name: str
    chunks: tuple[tuple[int, tuple[int, ...]], ...]  # per phase: (first copy, seeds of its copies)
    make_slice: str  # import path of the env family's EnvSlice factory
    state_shape: tuple[int, ...] | None = None
    spin_wait: float = 0.0
    cpu: int | None = None  # the one CPU to run on (pinned workers), or None


def limit_torch_threads() -> None:
    torch_module = sys.modules.get("torch")  # imported by the parent's __main__ or by the env, if at all
    if torch_module is not None:
        torch_module.set_num_threads(1)


def _describe(err: BaseException) -> tuple[str, str]:
    message = str(err) if isinstance(err, RuntimeError) and str(err).startswith("env ") else None
    return message or f"{type(err).__name__}: {err}", traceback.format_exc()


def worker_main(conn: Connection, args: WorkerArgs) -> None:
    """A worker's life: build its env copies, then answer commands until ``close`` or EOF.

    The copies are held as one `EnvSlice` per phase of the
    vector; ``step`` and ``reset`` name a phase (``None``: all of them).
    """
    # Ctrl-C and a scheduler's SIGTERM reach the whole process group: the parent handles them (it
    # finishes the iteration, checkpoints, then shuts the workers down), so a worker must not die first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    limit_torch_threads()
    parent = os.getppid()
    shared: SharedArrays | None = None
    envs: list[Any] = []
    try:
        try:
            try:
                pin_to(args.cpu)
            except OSError as err:
                raise RuntimeError(f"env worker {args.index}: cannot run on CPU {args.cpu}: {err}") from err
            fn = import_object(args.env_fn, field="env.env_fn")
            make_slice = import_object(args.make_slice, field="make_slice")
            blocks: list[EnvSlice] = []  # one per phase
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
                blocks.append(make_slice(mine, args.groups, seeds, start, args.env_name, args.possible_agents))
            limit_torch_threads()  # the env's module may have imported torch
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
                elif command == "fast_forward":  # [(copy, episode, actions)]: put copies back mid-episode
                    diverged = []
                    for e, episode, actions in arg:
                        block = next(b for b in blocks if b.start <= e < b.stop)
                        shared.clear_rows(slice(e, e + 1), sections=("current",))
                        if not block.fast_forward(e, episode, actions, shared.current):
                            diverged.append(e)
                    payload = diverged
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
        close_envs(envs)
        if shared is not None:
            shared.release(unlink=False)


def close_envs(envs: Sequence[Any]) -> None:
    """Close every env, logging (not raising) failures: a worker going away must not fail on them."""
    for env in envs:
        try:
            env.close()
        except Exception:
            log.debug("closing env copy failed", exc_info=True)
