"""How often a nominal 95% interval of the mean covers the true mean: t against percentile bootstrap.

Draws ``--repetitions`` samples of ``n`` returns from a normal and from a skewed (exponential)
distribution, computes :func:`~lightmarl.evaluation.statistics.t_interval` and
:func:`~lightmarl.evaluation.statistics.bootstrap_interval` on each, and prints the share that
contains the true mean. Seeded, so the table is the same on every machine; ``--write-result``
writes ``benchmarks/results/interval_coverage.json`` (docs/evaluation.md, "Which interval").

    PYTHONPATH=src python benchmarks/interval_coverage.py --write-result
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from lightmarl.evaluation.statistics import bootstrap_interval, t_interval

#: name -> (draw n values, true mean)
DISTRIBUTIONS = {
    "normal": (lambda rng, n: rng.normal(size=n), 0.0),
    "exponential (skewed)": (lambda rng, n: rng.exponential(size=n), 1.0),
}


def coverage(draw, mean: float, n: int, repetitions: int, resamples: int, seed: int) -> tuple[float, float]:
    """Shares of ``repetitions`` samples whose t and bootstrap intervals contain ``mean``."""
    rng = np.random.default_rng(seed)
    t_hits = boot_hits = 0
    for k in range(repetitions):
        values = draw(rng, n)
        low, high = t_interval(values)
        t_hits += low <= mean <= high
        low, high = bootstrap_interval(values, seed=k, resamples=resamples)
        boot_hits += low <= mean <= high
    return t_hits / repetitions, boot_hits / repetitions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 30])
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--write-result", action="store_true", help="also write benchmarks/results/interval_coverage.json"
    )
    args = parser.parse_args()
    rows, per_run = [], {}
    print("| returns | n | t | percentile bootstrap |")
    print("| --- | --- | --- | --- |")
    for name, (draw, mean) in DISTRIBUTIONS.items():
        for n in args.sizes:
            t_share, boot_share = coverage(draw, mean, n, args.repetitions, args.resamples, args.seed)
            rows.append([name, n, f"{t_share:.1%}", f"{boot_share:.1%}"])
            per_run[f"{name}, n={n}"] = {"t": t_share, "percentile_bootstrap": boot_share}
            print(f"| {name} | {n} | {t_share:.1%} | {boot_share:.1%} |", flush=True)
    if args.write_result:
        from results import write_result  # benchmarks/results.py, beside this script

        argv = " ".join(a for a in sys.argv[1:] if a != "--write-result")
        path = write_result(
            "interval_coverage",
            command=f"PYTHONPATH=src python benchmarks/interval_coverage.py {argv}".strip(),
            per_seed=per_run,
            columns=["returns", "n", "t", "percentile bootstrap"],
            rows=rows,
            notes=f"{args.repetitions:,} repetitions per row, {args.resamples:,} bootstrap resamples, seed "
            f"{args.seed}: the share of nominal 95% intervals that contain the true mean.",
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
