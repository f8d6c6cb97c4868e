"""MAPPO and IPPO on mpe2 simple_spread for 1M frames over several seeds.

Trains ``recipes/quickstart.yaml`` (MAPPO: the critic reads every agent's observation) and
``recipes/ippo_simple_spread.yaml`` (IPPO: the critic reads the agent's own observation) with
only the frame budget and the seed changed, one run at a time on one thread, and reads each
run's evaluation curve (greedy per-agent return on the recipe's 32 seeded episodes, after every
20,000 frames) from its CSV log. Then it prints a Markdown table of the final returns with a
Student-t 95% interval over seeds, and writes one PNG of the curves (mean over seeds, the band
is the t interval at each evaluation).

    python benchmarks/benchmarl/simple_spread_1m.py --out runs/simple_spread_1m            # 6 runs
    python benchmarks/benchmarl/simple_spread_1m.py --out runs/simple_spread_1m --report   # table again

Runs already in ``OUT/results.json`` are kept, so an interrupted sweep goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from compare import Curve, fit_recipe, load_average, random_return

from lightmarl.evaluation.statistics import t_interval

RECIPES = {"mappo": "recipes/quickstart.yaml", "ippo": "recipes/ippo_simple_spread.yaml"}
# The IPPO recipe also plays a swap-in-scripted scenario every 50k frames; that is not part of
# the learning comparison, and at 1M frames it would add about a tenth to the run.
EXTRA_OVERRIDES = {"ippo": ["--evaluation.every_n_frames=null"]}


def run_key(algorithm: str, seed: int) -> str:
    return f"{algorithm}/seed{seed}"


def train(algorithm: str, seed: int, frames: int, out: Path) -> Curve:
    run_dir = out / algorithm / f"seed{seed}"
    return fit_recipe(RECIPES[algorithm], seed, frames, run_dir, EXTRA_OVERRIDES.get(algorithm, []))


def interval_text(values: Sequence[float]) -> str:
    mean = statistics.fmean(values)
    low, high = t_interval(values)
    if math.isnan(low):
        return f"{mean:.2f}"
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def summary(results: dict[str, dict], random: float | None) -> list[str]:
    """Markdown: per algorithm the final and best-of-run evaluation over seeds, and the frames/s."""
    lines = [
        "| algorithm | seeds | final return, mean [95% t interval] | per seed | mean of the last 5 evaluations | "
        "frames | train s per run | process s per run |",
        "| --- | ---: | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for algorithm in RECIPES:
        curves = [Curve.from_json(v) for k, v in sorted(results.items()) if k.startswith(f"{algorithm}/")]
        if not curves:
            continue
        finals = [c.returns[-1] for c in curves]
        tails = [statistics.fmean(c.returns[-5:]) for c in curves]
        lines.append(
            f"| {algorithm} | {len(curves)} | {interval_text(finals)} | "
            + ", ".join(f"{v:.2f}" for v in finals)
            + f" | {interval_text(tails)} | {int(curves[0].frames[-1]):,} | "
            f"{statistics.fmean(c.train_s[-1] for c in curves):.0f} | {statistics.fmean(c.process_s for c in curves):.0f} |"
        )
    if random is not None:
        lines.append(f"\nUniformly random actions on the same 32 episodes: {random:.2f}.")
    return lines


def plot(results: dict[str, dict], random: float | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2))
    for algorithm in RECIPES:
        curves = [Curve.from_json(v) for k, v in sorted(results.items()) if k.startswith(f"{algorithm}/")]
        if not curves:
            continue
        points = min(len(c.returns) for c in curves)
        frames = curves[0].frames[:points]
        columns = [[c.returns[i] for c in curves] for i in range(points)]
        means = [statistics.fmean(column) for column in columns]
        line = axes.plot(frames, means, label=f"{algorithm} (mean of {len(curves)} seeds)")[0]
        if len(curves) > 1:
            bands = [t_interval(column) for column in columns]
            axes.fill_between(frames, [b[0] for b in bands], [b[1] for b in bands], alpha=0.2, color=line.get_color())
    if random is not None:
        axes.axhline(random, color="grey", linestyle=":", label="uniformly random")
    axes.set_xlabel("training frames (env steps)")
    axes.set_ylabel("greedy per-agent return (32 episodes)")
    axes.set_title("mpe2 simple_spread (N=3, 25 steps, discrete): 95% t band over seeds")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/simple_spread_1m"))
    parser.add_argument("--algorithms", nargs="+", choices=sorted(RECIPES), default=list(RECIPES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--report", action="store_true", help="only print the table and plot from results.json")
    parser.add_argument("--plot", type=Path, default=None, help="PNG path (default: OUT/simple_spread_1m.png)")
    parser.add_argument(
        "--write-result",
        action="store_true",
        help="also write benchmarks/results/simple_spread_1m.json (the docs' table)",
    )
    args = parser.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    stored = json.loads(results_path.read_text()) if results_path.exists() else {}
    results: dict[str, dict] = stored.get("runs", {})
    random = stored.get("random")
    if not args.report:
        if random is None:
            random = random_return(RECIPES["mappo"], args.out / "random")
        # Seed-major, so that a sweep cut short still has as many seeds of each algorithm.
        for seed in args.seeds:
            for algorithm in args.algorithms:
                if run_key(algorithm, seed) in results:
                    continue
                curve = train(algorithm, seed, args.frames, args.out)
                results[run_key(algorithm, seed)] = {**curve.to_json(), "load": load_average()}
                results_path.write_text(json.dumps({"runs": results, "random": random}, indent=1))
        results_path.write_text(json.dumps({"runs": results, "random": random}, indent=1))
    lines = summary(results, random)
    print("\n".join(lines))
    plot(results, random, args.plot or args.out / "simple_spread_1m.png")
    if args.write_result:
        write_table("simple_spread_1m", lines, results, argv if argv is not None else sys.argv[1:], random)


def write_table(
    name: str,
    lines: list[str],
    runs: dict[str, dict],
    argv: Sequence[str],
    random: float | None,
    directory: Path | None = None,
) -> Path:
    """The summary table and every run's curve as ``benchmarks/results/<name>.json``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, where results.py lives
    from results import write_result

    table = [line for line in lines if line.startswith("|")]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table]
    command = " ".join(["python benchmarks/benchmarl/simple_spread_1m.py", *(a for a in argv if a != "--write-result")])
    return write_result(
        name,
        command=command,
        per_seed=runs,
        columns=cells[0],
        rows=cells[2:],
        notes=None if random is None else f"Uniformly random actions on the same 32 episodes: {random:.2f}.",
        directory=directory,
    )


if __name__ == "__main__":
    main()
