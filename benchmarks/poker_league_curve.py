"""A poker_league.py result's exploitability over frames, its live binding beside its shown mixture,
against another result's league and self-play at the same frames.

Both results come from ``benchmarks/poker_league.py`` runs that measured every ``--every`` iterations
of ``--frames-per-iteration`` frames (the Leduc recipes: 25 iterations of 128 x 32 = 4,096 frames), so
the ``k``-th measurement of either is at ``k x every x frames_per_iteration`` frames. Writes a result
(``results.write_result``) whose table has one row per ``--at`` frames: the run's mixture and live
binding (mean over its seeds) and the baseline's league mixture and naive self-play (mean over its seeds).

    python benchmarks/poker_league_curve.py --result benchmarks/results/poker_league_leduc_poker_mmd.json \
        --method mmd --baseline benchmarks/results/poker_league_leduc_poker.json \
        --at 409600 819200 1228800 1638400 2048000 --name leduc_mmd_curve
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

from results import write_result

ROOT = Path(__file__).resolve().parents[1]
COLUMNS: list[Any] = [
    {"name": "frames", "format": ",.0f"},
    {"name": "run: shown mixture", "format": ".3f"},
    {"name": "run: live binding", "format": ".3f"},
    {"name": "baseline: league mixture", "format": ".3f"},
    {"name": "baseline: naive self-play", "format": ".3f"},
]


def value_at(curve: list[list[float]], index: int) -> float | None:
    """The ``index``-th measurement's exploitability (``[seconds, value, ...]`` rows), ``None`` past the end."""
    return curve[index][1] if 0 <= index < len(curve) else None


def mean_at(runs: list[list[list[float]]], index: int) -> float | None:
    """The mean over runs of their ``index``-th measurement, ``None`` unless every run reached it."""
    values = [value_at(curve, index) for curve in runs]
    return None if any(v is None for v in values) else fmean(v for v in values if v is not None)


def curve_rows(
    result: dict[str, Any], method: str, baseline: dict[str, Any], at: list[int], frames_per_measurement: int
) -> list[list[Any]]:
    """One row per frame count in ``at``: the run's mixture and live binding, the baseline's league and self-play."""
    runs = [seed[method] for seed in result["per_seed"].values() if method in seed]
    if not runs:
        raise ValueError(f"--method {method}: the result has no run of it")
    rows = []
    for frames in at:
        index = frames // frames_per_measurement - 1
        rows.append(
            [
                frames,
                mean_at([r["curve"] for r in runs], index),
                mean_at([r.get("live_curve", []) for r in runs], index),
                mean_at([s["league"]["curve"] for s in baseline["per_seed"].values() if "league" in s], index),
                mean_at([s["selfplay"]["curve"] for s in baseline["per_seed"].values() if "selfplay" in s], index),
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", required=True, help="a poker_league.py result (its method's runs)")
    parser.add_argument("--method", default="mmd", help="the method of --result to show")
    parser.add_argument("--baseline", required=True, help="a poker_league.py result with league and selfplay runs")
    parser.add_argument("--at", type=int, nargs="+", required=True, help="frame counts, multiples of a measurement")
    parser.add_argument("--every", type=int, default=25, help="iterations between measurements (both results)")
    parser.add_argument("--frames-per-iteration", type=int, default=4096)
    parser.add_argument("--name", required=True, help="the result's name (benchmarks/results/<name>.json)")
    parser.add_argument("--directory", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    step = args.every * args.frames_per_iteration
    bad = [f for f in args.at if f <= 0 or f % step]
    if bad:
        parser.error(f"--at {bad}: give multiples of one measurement, {step:,} frames")
    result, baseline = (json.loads(Path(p).read_text()) for p in (args.result, args.baseline))
    rows = curve_rows(result, args.method, baseline, args.at, step)
    command = shlex.join(["python", "benchmarks/poker_league_curve.py", *(sys.argv[1:] if argv is None else argv)])
    return write_result(
        args.name,
        command=command,
        per_seed={
            str(row[0]): dict(
                zip(("run_mixture", "run_live", "baseline_league", "baseline_selfplay"), row[1:], strict=True)
            )
            for row in rows
        },
        columns=COLUMNS,
        rows=rows,
        notes=f"Exact exploitability (OpenSpiel) at each frame count, mean over seeds: the run is "
        f"`{result['command']}` ({args.method}), the baseline `{baseline['command']}`; — where a run "
        "had not reached the frames.",
        directory=args.directory,
        measured_on=result.get("machine"),
        date=result.get("date"),
        commit=result.get("commit"),
        source="derived from the two results named in the note (no new measurement)",
    )


if __name__ == "__main__":
    print(f"wrote {main()}")
