"""Soak: memory of a long mixed-population run, to see growth that short runs hide.

Runs ``lightmarl fit --config recipes/soak_mixed.yaml`` (PPO and DQN learning beside a frozen
neural NPC, a validation with a GIF every 10 iterations, ``MemoryMonitor`` logging the resident
memory every iteration) for ``--iterations`` iterations in a temporary directory, then reads
``memory/rss_mb``, ``memory/peak_rss_mb`` and ``memory/children_rss_mb`` from its ``metrics.csv``.

Prints a Markdown table of the curve (``--points`` windows of iterations: median and largest RSS,
the peak so far at the window's end) and the growth after warm-up: the slope
of a least-squares line through the RSS of every iteration after ``--warmup``, in MB per 1,000
iterations, and the peak RSS at the end of warm-up and at the end. ``--png`` also draws the curve.
Run from the repository root with the project's virtualenv::

    python benchmarks/soak.py --iterations 1000 --png soak.png

(see ``benchmarks/README.md``, "Soak").
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "soak_mixed.yaml"
FRAMES_PER_ITERATION = 16 * 25  # the recipe's env.num_envs x rollout_steps


def soak(iterations: int, extra: list[str]) -> tuple[list[dict[str, float]], float]:
    """The per-iteration memory metrics of one run of ``iterations``, and its wall time in seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "assets").symlink_to(REPO / "assets")  # the NPC's checkpoint, as from a checkout
        exe = Path(sys.executable).with_name("lightmarl")
        cmd = [str(exe) if exe.exists() else (shutil.which("lightmarl") or "lightmarl"), "fit", "--config", str(RECIPE),
               f"--model.max_frames={iterations * FRAMES_PER_ITERATION}", "--trainer.enable_progress_bar=false",
               *extra]  # fmt: skip
        started = time.monotonic()
        run = subprocess.run(cmd, cwd=tmp, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
        wall = time.monotonic() - started
        if run.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{run.stderr[-4000:]}")
        (metrics,) = Path(tmp).rglob("metrics.csv")
        rows = [r for r in csv.DictReader(metrics.open()) if r.get("memory/rss_mb")]
    keys = ("counters/iterations", "memory/rss_mb", "memory/peak_rss_mb", "memory/children_rss_mb")
    return [{k: float(r[k]) for k in keys} for r in rows], wall


def slope_per_1000(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(iteration, MB)`` points, in MB per 1,000 iterations."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50, help="iterations before memory must stay flat")
    parser.add_argument("--points", type=int, default=12, help="windows (rows) of the curve table")
    parser.add_argument("--png", type=Path, default=None, help="also draw the curve into this PNG")
    parser.add_argument("extra", nargs="*", help="more `lightmarl fit` overrides")
    args = parser.parse_args()
    rows, wall = soak(args.iterations, args.extra)
    after = [r for r in rows if r["counters/iterations"] > args.warmup]
    print(
        f"`recipes/soak_mixed.yaml`, {len(rows)} iterations ({len(rows) * FRAMES_PER_ITERATION} frames) in {wall:.0f} s\n"
    )
    print(
        "| iterations | median RSS (MB) | max RSS (MB) | peak RSS at the end (MB) | children's RSS (MB) |\n"
        "| --- | --- | --- | --- | --- |"
    )
    size = -(-len(rows) // args.points)
    for start in range(0, len(rows), size):
        window = rows[start : start + size]
        rss = sorted(r["memory/rss_mb"] for r in window)
        print(
            f"| {window[0]['counters/iterations']:.0f}-{window[-1]['counters/iterations']:.0f} | "
            f"{rss[len(rss) // 2]:.1f} | {rss[-1]:.1f} | {window[-1]['memory/peak_rss_mb']:.1f} | "
            f"{max(r['memory/children_rss_mb'] for r in window):.1f} |"
        )
    if after:
        first = min(after, key=lambda r: r["counters/iterations"])
        slope = slope_per_1000([(r["counters/iterations"], r["memory/rss_mb"]) for r in after])
        print(
            f"\nafter iteration {args.warmup}: RSS slope {slope:+.1f} MB per 1,000 iterations; peak RSS "
            f"{first['memory/peak_rss_mb']:.1f} MB at iteration {first['counters/iterations']:.0f}, "
            f"{rows[-1]['memory/peak_rss_mb']:.1f} MB at the end"
        )
    if args.png is not None:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt

        x = [r["counters/iterations"] for r in rows]
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for key, label in (("memory/rss_mb", "RSS"), ("memory/peak_rss_mb", "peak RSS")):
            ax.plot(x, [r[key] for r in rows], label=label)
        ax.axvline(args.warmup, color="grey", linestyle=":", label="end of warm-up")
        ax.set(xlabel="iteration", ylabel="MB", title="recipes/soak_mixed.yaml: training process memory")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)


if __name__ == "__main__":
    main()
