"""Greedy evaluation returns and policy entropy of ``lightmarl fit`` runs (and a BenchMARL run), from their logs.

    python benchmarks/benchmarl/transport_curves.py RUN_DIR [RUN_DIR ...]
    python benchmarks/benchmarl/transport_curves.py RUN_DIR ... --benchmarl BENCHMARL_RUN_DIR --json NAME \\
        --command "the command that made the runs"

One line per run: ``frames: eval return (entropy)`` at the first, every fifth and the last
evaluation, then the best evaluation and the mean of the last five. A run directory is named
``<variant>_seed<seed>`` (``benchmarks/benchmarl/transport_sweep.sh``'s layout). ``--benchmarl``
adds a BenchMARL run of ``compare.py`` (its csv scalars); ``--json NAME`` writes every run's
curve and a table of them as ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: (frames, greedy evaluation return, policy entropy logged by the update before it)
Point = tuple[float, float, float]


def lightmarl_curve(run_dir: Path) -> list[Point]:
    """Every evaluation of a ``lightmarl fit`` run (its CSV log)."""
    found = sorted(run_dir.glob("csv/version_*/metrics.csv"))
    if not found:
        return []
    points: list[Point] = []
    frames, entropy = 0.0, float("nan")
    with open(found[-1]) as f:
        for row in csv.DictReader(f):
            if row.get("counters/frames"):
                frames = float(row["counters/frames"])
            if row.get("train/main/entropy"):
                entropy = float(row["train/main/entropy"])
            if row.get("eval/main/episode_return") and frames:
                points.append((frames, float(row["eval/main/episode_return"]), entropy))
    return points


def benchmarl_curve(run_dir: Path) -> list[Point]:
    """Every evaluation of a BenchMARL run (``compare.py``'s run directory: its csv scalars)."""
    found = sorted(run_dir.glob("*/*/scalars/eval_reward_episode_reward_mean.csv"))
    if not found:
        return []
    scalars = found[-1].parent

    def series(name: str) -> dict[int, float]:
        with open(scalars / f"{name}.csv") as f:
            return {int(float(row[0])): float(row[1]) for row in csv.reader(f) if row}

    evals, frames, entropy = (
        series(name) for name in ("eval_reward_episode_reward_mean", "counters_total_frames", "train_agents_entropy")
    )
    return [(frames[k], evals[k], entropy.get(k, float("nan"))) for k in sorted(evals)]


def summary(points: list[Point]) -> dict[str, float]:
    last = [r for _, r, _ in points[-5:]]
    half = [r for f, r, _ in points if f <= points[-1][0] / 2 + 1e-9]
    return {
        "frames": points[-1][0],
        "return_at_half": half[-1] if half else float("nan"),
        "final_return": points[-1][1],
        "last_five": sum(last) / len(last),
        "best": max(r for _, r, _ in points),
        "first_entropy": points[0][2],
        "final_entropy": points[-1][2],
    }


def line(name: str, points: list[Point]) -> str:
    if not points:
        return f"{name}: no evaluations"
    shown = [p for k, p in enumerate(points) if k % 5 == 0 or k == len(points) - 1]
    text = " ".join(f"{f / 1000:.0f}k:{r:.3f}({h:.2f})" for f, r, h in shown)
    s = summary(points)
    return f"{name}: {text} | best {s['best']:.3f}, last five {s['last_five']:.3f}"


def split_name(run_dir: Path) -> tuple[str, str]:
    """``<variant>_seed<seed>`` -> (variant, seed); other names: (the name, "")."""
    variant, sep, seed = run_dir.name.rpartition("_seed")
    return (variant, seed) if sep else (run_dir.name, "")


def write_json(
    name: str,
    command: str,
    runs: dict[tuple[str, str, str], list[Point]],
    notes: str | None,
    measured_on: dict[str, Any] | None = None,
    source: str | None = None,
) -> Path:
    sys.path.insert(0, str(HERE.parent))  # benchmarks/, where results.py lives
    from results import write_result

    rows: list[list[Any]] = []
    per_run: dict[str, Any] = {}
    for (framework, variant, seed), points in runs.items():
        if not points:
            continue
        s = summary(points)
        per_run[f"{framework} / {variant} / {seed}"] = {**s, "curve": [list(p) for p in points]}
        rows.append(
            [
                framework,
                variant,
                seed,
                s["frames"],
                s["return_at_half"],
                s["final_return"],
                s["last_five"],
                s["best"],
                f"{s['first_entropy']:.2f} → {s['final_entropy']:.2f}",
            ]
        )
    return write_result(
        name,
        command=command,
        per_seed=per_run,
        columns=[
            "framework",
            "variant",
            "seed",
            {"name": "frames", "format": ",.0f"},
            {"name": "eval return at half the frames", "format": ".3f"},
            {"name": "final eval return", "format": ".3f"},
            {"name": "mean of the last 5 evaluations", "format": ".3f"},
            {"name": "best evaluation", "format": ".3f"},
            "policy entropy, first → last update",
        ],
        rows=rows,
        notes=notes,
        measured_on=measured_on,
        source=source,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="lightmarl run directories")
    parser.add_argument(
        "--benchmarl",
        type=Path,
        action="append",
        default=[],
        help="a BenchMARL run directory (compare.py's); repeatable",
    )
    parser.add_argument("--max-frames", type=float, help="cut every curve there (compare runs at equal frames)")
    parser.add_argument("--json", metavar="NAME", help="write benchmarks/results/NAME.json")
    parser.add_argument("--command", help="with --json: the command that made the runs")
    parser.add_argument("--notes", help="with --json: the line shown under the table")
    parser.add_argument("--measured-on", help="with --json: the machine the runs ran on (JSON), when not this one")
    parser.add_argument("--source", help="with --json: where the runs' logs came from, when not measured here")
    args = parser.parse_args(argv)
    runs: dict[tuple[str, str, str], list[Point]] = {}
    for run_dir in args.benchmarl:
        variant, seed = split_name(run_dir)
        runs["benchmarl", "MAPPO (its defaults)", seed] = benchmarl_curve(run_dir)
    for run_dir in args.runs:
        runs[("lightmarl", *split_name(run_dir))] = lightmarl_curve(run_dir)
    if args.max_frames:
        runs = {key: [p for p in points if p[0] <= args.max_frames] for key, points in runs.items()}
    for (framework, variant, seed), points in runs.items():
        print(line(f"{framework} {variant} seed {seed}", points))
    if args.json:
        if not args.command:
            parser.error("--json: give --command, the command that made the runs")
        measured_on = json.loads(args.measured_on) if args.measured_on else None
        print("wrote", write_json(args.json, args.command, runs, args.notes, measured_on, args.source))


if __name__ == "__main__":
    main()
