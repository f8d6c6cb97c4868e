"""Which CPU each env worker process runs on, where workers are pinned (``PettingZooEnvConfig.pin_workers``).

Workers step in lockstep: every step waits for the slowest. Two workers on the two hardware
threads of one physical core (simultaneous multithreading) each run at about 60% speed, and
then so does the whole vector. Left to the scheduler, workers can land like that even with
idle cores elsewhere; pinned, worker ``k`` runs on the ``k``-th CPU of `cpu_order`: one
hardware thread of every physical core first, the second threads after. Torch-free (workers
import it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path

SYSFS_CPUS = Path("/sys/devices/system/cpu")


def read_core(cpu: int) -> tuple[int, int] | None:
    """``(package, core)`` of logical CPU ``cpu`` from Linux's sysfs, or ``None`` where it is not there."""
    topology = SYSFS_CPUS / f"cpu{cpu}" / "topology"
    try:
        return int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text())
    except (OSError, ValueError):
        return None


def cpu_order(cpus: Collection[int], core_of: Callable[[int], tuple[int, int] | None] = read_core) -> list[int]:
    """``cpus`` ordered so that the first ones are on distinct physical cores.

    Round ``r`` takes the ``r``-th hardware thread (by CPU number) of every physical core, cores in
    the order of their lowest CPU number. CPUs whose core is unknown count as cores of their own.

    Args:
        cpus: the logical CPUs to order (e.g. ``os.sched_getaffinity(0)``).
        core_of: ``cpu -> (package, core)`` or ``None``; default: read from sysfs.
    """
    threads: dict[object, list[int]] = {}
    for cpu in sorted(cpus):
        core = core_of(cpu)
        threads.setdefault(("cpu", cpu) if core is None else core, []).append(cpu)
    order: list[int] = []
    for round_ in range(max((len(t) for t in threads.values()), default=0)):
        order += [t[round_] for t in threads.values() if round_ < len(t)]
    return order


def worker_cpus(num_workers: int, cpus: Collection[int] | None = None) -> list[int]:
    """The CPU of each of ``num_workers`` pinned workers: `cpu_order` of ``cpus`` (default: the CPUs
    this process may run on), from the first; past the last CPU, round again."""
    order = cpu_order(os.sched_getaffinity(0) if cpus is None else cpus)
    return [order[k % len(order)] for k in range(num_workers)]


def pin_to(cpu: int | None) -> None:
    """Run this process on ``cpu`` only (``None``: leave it where it may run)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
