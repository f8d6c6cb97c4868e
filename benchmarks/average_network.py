"""The league's shown mixture, its distilled average network and the live binding, side by side.

One ``lightmarl fit`` of a league recipe (default ``recipes/league_leduc_poker.yaml``) per seed, cut
to ``--frames`` frames, with ``league.average_networks`` distilling the shown mixture into
``main_average`` every ``--every`` iterations and after the last. The recipe's
``OpenSpielExploitability`` callback logs, at the same iterations, the exact exploitability of the
mixture (``league/main/exploitability``), of the average network
(``league/main/average_exploitability``) and of the live binding (``live_exploitability``); the
table gives the last measurement of each run::

    python benchmarks/average_network.py --recipe recipes/league_leduc_poker.yaml --frames 1000000 \\
        --seeds 0 --name average_network_leduc

Runs go to ``runs/average_network/<name>/seed<k>/``; the result to ``benchmarks/results/<name>.json``
(``docs/results/poker_sota.md`` shows it): one row per seed, then, with two seeds or more, the mean
over seeds with its 95% t interval. ``--add-to`` keeps the seeds an earlier result of the same name
and settings holds and adds these (a seed run again replaces its row)::

    python benchmarks/average_network.py --recipe recipes/league_leduc_poker.yaml --frames 1000000 \\
        --seeds 1 2 --name average_network_leduc --add-to
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import RESULTS_DIR, write_result

from lightmarl.experiments.statistics import seed_mean

METRICS = {
    "mixture": "league/main/exploitability",
    "average network": "league/main/average_exploitability",
    "live": "league/main/live_exploitability",
}


def run(recipe: str, frames: int, every: int, distil_frames: int, seed: int, run_dir: Path) -> dict:
    """One fit; the last row that measured all three exploitabilities, and the wall time."""
    started = time.perf_counter()
    subprocess.run(
        [
            "lightmarl",
            "fit",
            "--config",
            recipe,
            f"--seed_everything={seed}",
            f"--model.max_frames={frames}",
            f"--trainer.default_root_dir={run_dir}",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_checkpointing=false",
            f"--model.league.average_networks=[{{player: main, every_n_iterations: {every}, frames: {distil_frames}}}]",
            "--trainer.callbacks=[{class_path: lightmarl.training.exploitability.OpenSpielExploitability, "
            f"init_args: {{binding: main, every_n_iterations: {every}}}}}]",
        ],
        check=True,
    )
    seconds = time.perf_counter() - started
    (metrics,) = sorted(run_dir.glob("csv/version_*/metrics.csv"))[-1:]
    rows = [r for r in csv.DictReader(metrics.open()) if all(r.get(k) for k in METRICS.values())]
    frames_at = {r["step"]: r["counters/frames"] for r in csv.DictReader(metrics.open()) if r.get("counters/frames")}
    last = rows[-1]
    return {
        **{name: float(last[key]) for name, key in METRICS.items()},
        "mixture_size": float(last["league/main/mixture_size"]),
        "frames": float(frames_at.get(last["step"], frames)),
        "wall_s": seconds,
        "load": [round(x, 2) for x in os.getloadavg()],
        "curve": [[float(r["step"]), *(float(r[k]) for k in METRICS.values())] for r in rows],
    }


def table_rows(per_seed: dict[str, dict]) -> list[list]:
    """A row per seed, then (two seeds or more) the mean row: mean [95% t interval] of each exploitability."""
    rows: list[list] = [
        [
            seed,
            r["frames"],
            r["mixture_size"],
            r["mixture"],
            r["average network"],
            r["average network"] - r["mixture"],
            r["live"],
            r["wall_s"],
        ]
        for seed, r in sorted(per_seed.items(), key=lambda item: int(item[0]))
    ]
    if len(rows) < 2:
        return rows

    def mean_interval(column: int, fmt: str) -> str:
        summary = seed_mean([row[column] for row in rows])
        low, high = summary["ci95"]
        return f"{summary['mean']:{fmt}} [{low:{fmt}}, {high:{fmt}}]"

    means = [mean_interval(3, ".3f"), mean_interval(4, ".3f"), mean_interval(5, "+.3f"), mean_interval(6, ".3f")]
    return [*rows, [f"mean of {len(rows)} [95% t interval]", None, None, *means, None]]


def earlier_seeds(name: str, command: str) -> dict[str, dict]:
    """The per-seed results of ``benchmarks/results/<name>.json``, which must come from the same settings."""
    path = Path(RESULTS_DIR) / f"{name}.json"
    earlier = json.loads(path.read_text())
    settings, theirs = command.split(" --seeds ")[0], earlier["command"].split(" --seeds ")[0]
    if settings != theirs:
        raise SystemExit(f"--add-to: {path} was measured with other settings:\n  {theirs}\nnot\n  {settings}")
    # Where each kept seed was measured (a seed recorded before its own load was: the load its file recorded).
    measured = {"commit": earlier["commit"], "date": earlier["date"]}
    return {
        seed: {"load": earlier["machine"]["load"], "measured": measured, **r} for seed, r in earlier["per_seed"].items()
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="recipes/league_leduc_poker.yaml")
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100, help="iterations between distillations / measurements")
    parser.add_argument("--distil-frames", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--name", default="average_network_leduc")
    parser.add_argument(
        "--add-to", action="store_true", help="keep the seeds of the existing result of this name and add these"
    )
    args = parser.parse_args(argv)
    command = "python benchmarks/average_network.py " + shlex.join(
        [
            "--recipe",
            args.recipe,
            "--frames",
            str(args.frames),
            "--every",
            str(args.every),
            "--distil-frames",
            str(args.distil_frames),
            "--seeds",
            *map(str, args.seeds),
            "--name",
            args.name,
        ]
    )
    per_seed = earlier_seeds(args.name, command) if args.add_to else {}
    seeds = sorted({*map(int, per_seed), *args.seeds})
    command = command.split(" --seeds ")[0] + " --seeds " + " ".join(map(str, seeds)) + " --name " + args.name
    per_seed |= {
        str(seed): run(
            args.recipe,
            args.frames,
            args.every,
            args.distil_frames,
            seed,
            Path("runs/average_network") / args.name / f"seed{seed}",
        )
        for seed in args.seeds
    }
    print(
        write_result(
            args.name,
            command=command,
            per_seed=per_seed,
            columns=[
                "seed",
                {"name": "frames", "format": ",.0f"},
                {"name": "mixture members", "format": ".0f"},
                {"name": "mixture", "format": ".3f"},
                {"name": "average network", "format": ".3f"},
                {"name": "average − mixture", "format": "+.3f"},
                {"name": "live binding", "format": ".3f"},
                {"name": "wall s", "format": ".0f"},
            ],
            rows=table_rows(per_seed),
            notes="Exact exploitability (OpenSpiel, NashConv / 2) at the run's last measurement; wall time includes "
            "the distillations and the exact measurements. Load (1 / 5 / 15 min) at the end of each seed's run: "
            + "; ".join(f"seed {seed} {' / '.join(map(str, r['load']))}" for seed, r in sorted(per_seed.items()))
            + "."
            + "".join(
                f" Seed {seed} kept from an earlier result (commit {r['measured']['commit'][:10]}, "
                f"{r['measured']['date']})."
                for seed, r in sorted(per_seed.items())
                if "measured" in r
            ),
        )
    )


if __name__ == "__main__":
    main()
