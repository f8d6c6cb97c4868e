"""Time for a recipe to reach a training return, on a given accelerator: ``lightmarl fit`` until the return is reached.

Runs ``lightmarl fit --config <recipe>`` with the overrides given after ``--`` and
``--trainer.accelerator`` (``--accelerator``), logging to CSV, and stops it (Lightning's
``EarlyStopping`` with ``stopping_threshold``) once the running training return of the first
binding (``collect/<binding>/episode_return``, the mean over the last ``stats_window`` episodes)
reaches ``--target``, or when ``--max-seconds`` of wall time have passed. Reports, per
iteration, frames, return and the training time so far (collection plus update, summed from
``time/collect_s`` and ``time/update_s``), and the time and frames at which the target was first
reached (``null`` when it was not). Run from the repository root, e.g. the GPU-sized VMAS
navigation recipe on a GPU and then on the CPU::

    python benchmarks/time_to_return.py --recipe recipes/vmas_navigation_gpu.yaml --accelerator gpu \\
        --target 0.6 --json benchmarks/results/time_to_return_navigation_gpu_h200.json
    python benchmarks/time_to_return.py --recipe recipes/vmas_navigation_gpu.yaml --accelerator cpu \\
        --target 0.6 --json benchmarks/results/time_to_return_navigation_gpu_cpu.json -- --model.env.device=cpu

``--json`` writes the result through ``results.write_result`` (the file's stem is its name): the
run's numbers (curve included) as ``per_seed["run"]`` and a one-row table.
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from results import command_line, machine, write_result

COLUMNS = [
    "device",
    "target",
    {"name": "training time to target (s)", "format": ".1f"},
    {"name": "frames to target", "format": ",.0f"},
    "iterations logged",
    {"name": "last return", "format": ".3f"},
    {"name": "wall time (s)", "format": ".1f"},
    "stopped by the clock",
]


def result_rows(device: str, run: dict) -> list[list]:
    """The one-row table of a run's numbers (``per_seed["run"]``); ``—`` where the target was not reached."""
    final = run.get("final") or {}
    return [[device, run["target_return"], run["train_s_to_target"], run["frames_to_target"], len(run["curve"]),
             final.get("return"), run["wall_s"], run["stopped_by_clock"]]]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--accelerator", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--target", type=float, required=True, help="training return to reach")
    parser.add_argument("--binding", default="main")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="wall time before the run is stopped")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the run (default: all cores)")
    parser.add_argument("--json", default=None)
    parser.add_argument("overrides", nargs="*", help="more `lightmarl fit` arguments (after --)")
    args = parser.parse_args()
    command, load_before = command_line(), [round(x, 2) for x in os.getloadavg()]
    gpu = torch.cuda.get_device_name(0) if args.accelerator == "gpu" and torch.cuda.is_available() else None
    metric = f"collect/{args.binding}/episode_return"
    with tempfile.TemporaryDirectory() as tmp:
        extra = Path(tmp) / "time_to_return.yaml"
        extra.write_text(
            "trainer:\n  enable_progress_bar: false\n  enable_checkpointing: false\n  limit_val_batches: 0\n"
            f"  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n    init_args: {{save_dir: {tmp}}}\n"
            "  callbacks:\n    - class_path: lightning.pytorch.callbacks.EarlyStopping\n"
            f"      init_args: {{monitor: {metric}, mode: max, stopping_threshold: {args.target}, patience: 1000000000,"
            " check_on_train_epoch_end: true, strict: false, verbose: false}\n"
        )
        exe = Path(sys.executable).with_name("lightmarl")
        cmd = [str(exe) if exe.exists() else "lightmarl", "fit", "--config", str(Path(args.recipe).resolve()),
               "--config", str(extra), f"--trainer.accelerator={args.accelerator}", "--trainer.devices=1",
               "--model.iterations_per_epoch=1", *args.overrides]  # fmt: skip
        env = dict(os.environ)
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)  # fmt: skip
        try:
            output, _ = proc.communicate(timeout=args.max_seconds)
            stopped_by_clock = False
        except KeyboardInterrupt:  # stopped from outside: the run must not outlive this script
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        except subprocess.TimeoutExpired:
            # Every finished iteration is already in metrics.csv: the one under way is not waited for.
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            stopped_by_clock = True
        wall = time.monotonic() - started
        metrics = sorted(Path(tmp).rglob("metrics.csv"))
        rows = [r for r in csv.DictReader(metrics[0].open()) if r.get("time/fps")] if metrics else []
    curve, train_s, reached = [], 0.0, None
    for r in rows:
        train_s += float(r["time/collect_s"]) + float(r["time/update_s"])
        value = float(r[metric]) if r.get(metric) else float("nan")
        point = {"frames": float(r["counters/frames"]), "train_s": round(train_s, 3), "return": value,
                 "fps": float(r["time/fps"])}  # fmt: skip
        curve.append(point)
        if reached is None and value >= args.target:
            reached = point
    numbers = {
        "recipe": args.recipe,
        "overrides": args.overrides,
        "accelerator": args.accelerator,
        "threads": args.threads or os.cpu_count(),
        "torch_threads_default": torch.get_num_threads(),
        "target_return": args.target,
        "reached": reached is not None,
        "train_s_to_target": reached["train_s"] if reached else None,
        "frames_to_target": reached["frames"] if reached else None,
        "wall_s": round(wall, 1),
        "stopped_by_clock": stopped_by_clock,
        "returncode": proc.returncode,
        "final": curve[-1] if curve else None,
        "curve": curve,
    }
    if not rows:
        numbers["output_tail"] = output[-3000:]
    print(
        f"{args.recipe} on {gpu or 'CPU'} ({args.accelerator}): "
        + (f"return {args.target} reached after {reached['train_s']:.1f} s of training, {reached['frames']:.0f} frames"
           if reached else f"return {args.target} not reached in {wall:.0f} s (last: {curve[-1] if curve else None})")
    )  # fmt: skip
    if args.json:
        where = machine(gpu)
        device = gpu or f"{where['cores']} CPU cores"
        write_result(
            Path(args.json).stem,
            command=command,
            per_seed={"run": numbers},
            columns=COLUMNS,
            rows=result_rows(device, numbers),
            notes=f"`lightmarl fit --config {' '.join([args.recipe, *args.overrides])}` until the training return "
                  f"(`{metric}`) reaches {args.target:g}, or {args.max_seconds:g} s of wall time; training time "
                  "is collection plus update, wall time includes the start.",
            directory=Path(args.json).parent,
            measured_on=where,
            extra={"load_before": load_before},
        )  # fmt: skip


if __name__ == "__main__":
    main()
