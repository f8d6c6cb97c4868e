"""How collection with env worker processes scales with the number of workers, on the machine at hand.

An env-bound PettingZoo setup (default: mpe2 ``simple_spread_v3`` with N=6 agents, 25-step
episodes, 256 env copies: the pure-Python env costs far more per step than the policy's forward
on the batch) collected by :class:`~lightmarl.data.collector.RolloutCollector` with an
``MLPActorCritic`` (64, 64), with ``num_workers`` = 0 (in process), 1, 2, 4, 8 and every core
(``--workers``). Each setting is measured on its own (workers of another setting would compete
for the cores), ``--repeats`` times for ``--seconds`` each; the best run counts. The speed-up
is frames/s over the 1-worker frames/s, the efficiency the speed-up over the workers. With
``--raw``, the raw PettingZoo loop split over as many processes (synchronised once per 25 steps)
is measured next to each: the ceiling for that many processes on this machine. With ``--pin``,
each worker count is measured again with the workers pinned one per physical core first
(``env.pin_workers``). The JSON records the machine's CPU topology (hardware threads per core),
since workers stepping in lockstep go at the pace of any two that share a core. Run from the
repository root with the project's virtualenv::

    python benchmarks/worker_scaling.py --json benchmarks/results/worker_scaling_cpu.json

``--json`` writes the result through ``results.write_result`` (the file's stem is its name): the
rows, keyed by the number of workers, as ``per_seed``, and the table the docs show.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import collector_speed
import torch
from collector_speed import Runner, collector_runner, raw_processes_runner
from results import command_line, machine, write_result

from lightmarl.envs import PettingZooEnvConfig


def rate(runner: Runner, seconds: float, repeats: int) -> list[float]:
    runner.run()  # warm-up
    rates = []
    for _ in range(repeats):
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            steps += runner.run()
        rates.append(steps / (time.perf_counter() - start))
    return rates


COLUMNS = [
    "workers",
    {"name": "frames/s", "format": ",.0f"},
    {"name": "speed-up over 1 worker", "format": ".2f"},
    {"name": "efficiency", "format": ".2f"},
    {"name": "raw loop, as many processes", "format": ",.0f"},
    {"name": "load (1 min)", "format": ".2f"},
]
#: the columns with ``--pin``: the pinned workers' rate and speed-up over 1 pinned worker too.
PINNED_COLUMNS = [
    *COLUMNS[:4],
    {"name": "pinned: frames/s", "format": ",.0f"},
    {"name": "pinned: speed-up", "format": ".2f"},
    {"name": "pinned: efficiency", "format": ".2f"},
    *COLUMNS[4:],
]


def result_rows(per_workers: dict[str, dict]) -> list[list]:
    """The table of a result's ``per_seed`` (``{"2": {"frames_per_s": ..., ...}}``): one row per worker count."""
    pinned = any("pinned_frames_per_s" in row for row in per_workers.values())
    return [
        [int(workers) or "in process", row["frames_per_s"], row.get("speedup_over_1"), row.get("efficiency"),
         *([row.get("pinned_frames_per_s"), row.get("pinned_speedup_over_1"), row.get("pinned_efficiency")]
           if pinned else []),
         row.get("raw_processes_frames_per_s"), row["load_1min"]]
        for workers, row in per_workers.items()
    ]  # fmt: skip


def cpu_topology() -> dict:
    """Logical CPUs, physical cores and hardware threads per core as Linux's sysfs reports them."""
    from lightmarl.envs.runners.placement import cpu_order, read_core

    cpus = sorted(os.sched_getaffinity(0))
    cores = {read_core(cpu) for cpu in cpus}
    return {
        "logical_cpus": len(cpus),
        "physical_cores": len(cores) if None not in cores else None,
        "pinning_order": cpu_order(cpus),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--env-fn", default="mpe2.simple_spread_v3.parallel_env")
    parser.add_argument("--env-kwargs", default='{"N": 6, "max_cycles": 25}', help="JSON")
    parser.add_argument("--num-envs", type=int, default=256, help="env copies in all (split over the workers)")
    cores = os.cpu_count() or 1
    parser.add_argument("--workers", type=int, nargs="+", default=sorted({0, 1, 2, 4, 8, cores}))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--raw", action="store_true", help="also the raw loop over as many processes")
    parser.add_argument("--pin", action="store_true", help="also with the workers pinned (env.pin_workers)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    torch.set_num_threads(1)
    config = PettingZooEnvConfig(env_fn=args.env_fn, env_kwargs=json.loads(args.env_kwargs))
    collector_speed.ENV_CONFIG = config  # collector_runner and the raw loop read the module's config
    command, load_before, where = command_line(), [round(x, 2) for x in os.getloadavg()], machine()
    rows = []
    for workers in args.workers:
        if workers > args.num_envs:
            continue
        load = os.getloadavg()[0]
        runner = collector_runner(args.num_envs, args.seed, two_bindings=False, num_workers=workers)
        try:
            runs = rate(runner, args.seconds, args.repeats)
        finally:
            runner.close()
        row = {"workers": workers, "name": runner.name, "frames_per_s": max(runs), "runs": runs, "load_1min": load}
        if args.pin and workers > 0:
            pinned = collector_runner(args.num_envs, args.seed, two_bindings=False, num_workers=workers, mode="pinned")
            try:
                row["pinned_runs"] = rate(pinned, args.seconds, args.repeats)
                row["pinned_frames_per_s"] = max(row["pinned_runs"])
            finally:
                pinned.close()
        if args.raw and workers > 0:
            raw = raw_processes_runner(args.num_envs, args.seed, workers)
            try:
                row["raw_processes_frames_per_s"] = max(rate(raw, args.seconds, args.repeats))
            finally:
                raw.close()
        rows.append(row)
        print(f"{workers} workers: {max(runs):,.0f} frames/s (load {load:.2f})", file=sys.stderr)
    one = next((r["frames_per_s"] for r in rows if r["workers"] == 1), None)
    one_pinned = next((r.get("pinned_frames_per_s") for r in rows if r["workers"] == 1), None)
    for row in rows:
        if one_pinned and "pinned_frames_per_s" in row:
            row["pinned_speedup_over_1"] = row["pinned_frames_per_s"] / one_pinned
            row["pinned_efficiency"] = row["pinned_speedup_over_1"] / row["workers"]
    topology = cpu_topology()
    print(f"CPU topology: {topology}", file=sys.stderr)
    print(
        f"{args.env_fn} {args.env_kwargs}, {args.num_envs} env copies, {cores} CPUs ({where['cpu']}), "
        f"best of {args.repeats} × {args.seconds:g} s\n"
    )
    pinned_header = " pinned: frames/s (speed-up) |" if args.pin else ""
    print(f"| workers | frames/s | speed-up over 1 worker | efficiency |{pinned_header} raw loop, as many processes | "
          "load (1 min) |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: |" + (" ---: |" if args.pin else "") + " ---: | ---: |")
    for row in rows:
        if one and row["workers"] > 0:
            row["speedup_over_1"] = row["frames_per_s"] / one
            row["efficiency"] = row["speedup_over_1"] / row["workers"]
        speedup = f"{row['speedup_over_1']:.2f}x" if "speedup_over_1" in row else ""
        efficiency = f"{row['efficiency']:.2f}" if "efficiency" in row else ""
        raw = f"{row['raw_processes_frames_per_s']:,.0f}" if "raw_processes_frames_per_s" in row else ""
        pinned = (
            f" pinned {row['pinned_frames_per_s']:,.0f} ({row.get('pinned_speedup_over_1', 0):.2f}x) |"
            if "pinned_frames_per_s" in row
            else ""
        )
        print(f"| {row['workers'] or 'in process'} | {row['frames_per_s']:,.0f} | {speedup} | {efficiency} |{pinned} "
              f"{raw} | {row['load_1min']:.2f} |")  # fmt: skip
    if args.json:
        per_workers = {str(row["workers"]): row for row in rows}
        write_result(
            Path(args.json).stem,
            command=command,
            per_seed=per_workers,
            columns=PINNED_COLUMNS if args.pin else COLUMNS,
            rows=result_rows(per_workers),
            notes=f"{args.env_fn} {args.env_kwargs}, {args.num_envs} env copies in all, each worker count measured "
                  f"on its own: the best of {args.repeats} × {args.seconds:g} s; efficiency = speed-up / workers.",
            directory=Path(args.json).parent,
            measured_on=where,
            extra={"env_fn": args.env_fn, "env_kwargs": json.loads(args.env_kwargs), "num_envs": args.num_envs,
                   "rollout_steps": collector_speed.ROLLOUT_STEPS, "seconds": args.seconds, "repeats": args.repeats,
                   "load_before": load_before, "cpu_topology": topology},
        )  # fmt: skip


if __name__ == "__main__":
    main()
