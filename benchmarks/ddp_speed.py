"""Training speed with 1 and 2 DDP processes on CPU: frames/s of a recipe and the ratio.

Runs ``lightmarl fit --config <recipe>`` for ``--iterations`` iterations, alternately with one
process (no DDP) and with ``--trainer.strategy ddp --trainer.devices 2`` on CPU (gloo), for
``--rounds`` rounds, so load from other processes on a shared machine hits both alike. Each
process steps ``env.num_envs`` copies, so 2 processes collect twice the frames per iteration.

Per run it reads rank 0's logged ``time/fps`` (frames of every process per iteration over
rank 0's wall time of that iteration: collect + update), ``time/collect_s`` and
``time/update_s`` from ``metrics.csv``, leaves out the first ``--warmup`` iterations, and reports
the median. The 1-minute load average before each run and the CPU time the machine's processes
took during it (``/proc/stat``; this run's included, out of ``os.cpu_count()`` cores) say how
contended the machine was. Niced processes of others still count as busy, though they yield to
this run. Run from the repository root with the project's virtualenv::

    python benchmarks/ddp_speed.py                       # quickstart, 3 rounds
    python benchmarks/ddp_speed.py --recipe recipes/ippo_simple_spread.yaml --rounds 5

The result is a Markdown table on stdout (see ``benchmarks/README.md``, "DDP on CPU").
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Run:
    processes: int
    fps: float
    collect_s: float
    update_s: float
    load: float
    busy_cores: float  # CPU time of every process (this run's included) during the run, in cores


def _cpu_busy() -> float:
    """Seconds of CPU time the machine's processes took so far, over every core (user, nice, system, irq)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def _lightmarl() -> str:
    exe = Path(sys.executable).with_name("lightmarl")
    return str(exe) if exe.exists() else (shutil.which("lightmarl") or "lightmarl")


def fit(recipe: Path, processes: int, iterations: int, warmup: int, extra: list[str]) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        ddp = ["--trainer.strategy", "ddp", "--trainer.accelerator", "cpu", "--trainer.devices", str(processes)]
        one = ["--trainer.accelerator", "cpu", "--trainer.devices", "1"]
        overrides = Path(tmp) / "overrides.yaml"
        overrides.write_text(
            f"trainer:\n  enable_progress_bar: false\n  enable_checkpointing: false\n  limit_val_batches: 0\n"
            f"  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n    init_args: {{save_dir: {tmp}}}\n"
        )
        frames = f"--model.max_frames={iterations * processes * frames_per_process(recipe, extra)}"
        cmd = [_lightmarl(), "fit", "--config", str(recipe), "--config", str(overrides), frames,
               f"--model.iterations_per_epoch={iterations}", *(ddp if processes > 1 else one), *extra]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        load = os.getloadavg()[0]
        busy = _cpu_busy()
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
        busy_cores = (_cpu_busy() - busy) / wall
        fps, collect_s, update_s = logged_medians(Path(tmp), warmup)
        return Run(processes, fps, collect_s, update_s, load, busy_cores)


def logged_medians(run_dir: Path, warmup: int) -> tuple[float, float, float]:
    """Rank 0's median ``time/fps``, ``time/collect_s`` and ``time/update_s`` over the iterations
    after the first ``warmup`` ones, from the run's ``metrics.csv``."""
    (metrics,) = run_dir.rglob("metrics.csv")
    rows = [r for r in csv.DictReader(metrics.open()) if r.get("time/fps")][warmup:]
    if not rows:
        raise SystemExit(f"no iteration after the {warmup} warm-up ones in {metrics}")
    return tuple(
        statistics.median(float(r[key]) for r in rows) for key in ("time/fps", "time/collect_s", "time/update_s")
    )  # type: ignore[return-value]


def frames_per_process(recipe: Path, extra: list[str]) -> int:
    """``env.num_envs x rollout_steps`` of the recipe (with command-line overrides of the two)."""
    import yaml

    model = yaml.safe_load(recipe.read_text())["model"]
    num_envs, steps = model["env"].get("num_envs", 16), model.get("rollout_steps", 25)
    for arg in extra:
        if arg.startswith("--model.env.num_envs="):
            num_envs = int(arg.split("=", 1)[1])
        elif arg.startswith("--model.rollout_steps="):
            steps = int(arg.split("=", 1)[1])
    return num_envs * steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--recipe", type=Path, default=REPO / "recipes" / "quickstart.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=12, help="iterations per run")
    parser.add_argument("--warmup", type=int, default=2, help="first iterations left out of the median")
    parser.add_argument("--write-result", action="store_true", help="also write benchmarks/results/ddp_speed.json")
    parser.add_argument("extra", nargs="*", help="more `lightmarl fit` overrides, e.g. --model.env.num_envs=16")
    args = parser.parse_args()
    runs: list[tuple[Run, Run]] = []
    for _ in range(args.rounds):
        one = fit(args.recipe, 1, args.iterations, args.warmup, args.extra)
        two = fit(args.recipe, 2, args.iterations, args.warmup, args.extra)
        runs.append((one, two))
        print(
            f"round {len(runs)}: 1 process {one.fps:.0f} frames/s, 2 processes {two.fps:.0f} frames/s", file=sys.stderr
        )
    lines = [
        f"`{args.recipe.relative_to(REPO) if args.recipe.is_relative_to(REPO) else args.recipe}`, "
        f"{args.iterations} iterations per run (median after {args.warmup}), {os.cpu_count()} CPUs",
        "",
        "| round | processes | frames/s | collect s / it | update s / it | load (1 min) | CPU busy, all processes (cores) | ratio 2 / 1 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows: list[list[object]] = []
    for i, (one, two) in enumerate(runs, 1):
        for run in (one, two):
            ratio = f"{two.fps / one.fps:.2f}×" if run is two else ""
            cells = [f"{run.fps:.0f}", f"{run.collect_s:.3f}", f"{run.update_s:.3f}", f"{run.load:.2f}"]
            rows.append([str(i), str(run.processes), *cells, f"{run.busy_cores:.2f}", ratio])
            lines.append("| " + " | ".join(rows[-1]) + " |")
    ratios = [two.fps / one.fps for one, two in runs]
    lines.append(f"\nmedian ratio {statistics.median(ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    print("\n".join(lines))
    if args.write_result:
        from results import write_result  # benchmarks/results.py, beside this script

        argv = " ".join(a for a in sys.argv[1:] if a != "--write-result")
        path = write_result(
            "ddp_speed",
            command=f"python benchmarks/ddp_speed.py {argv}".strip(),
            per_seed={
                f"round {i}": {f"{run.processes} processes": dataclasses.asdict(run) for run in pair}
                for i, pair in enumerate(runs, 1)
            },
            columns=[c.strip() for c in lines[2].strip("|").split("|")],
            rows=rows,
            notes=f"{args.iterations} iterations per run, medians after {args.warmup} warm-up iterations; median "
            f"ratio {statistics.median(ratios):.2f}×.",
        )
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
