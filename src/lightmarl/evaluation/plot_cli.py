"""``lightmarl plot``: comparison PNGs from runs' metrics.csv files, and the figures of an evaluation report.

Each run directory given is one *label* (a configuration); its ``version_*/metrics.csv``
files are that label's seeds, aggregated into a mean with a t interval band::

    lightmarl plot runs/ippo/csv runs/mappo/csv --metric collect/main/episode_return --x frames --out plots/
    lightmarl plot --report eval/report.json --out plots/

Errors (no metrics.csv, a metric a run did not log) end in one line naming the path or metric
and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, cast

from lightmarl.evaluation.curves import (
    X_AXES,
    MetricsTable,
    XAxis,
    find_metrics_files,
    learning_curves,
    read_metrics_csv,
)
from lightmarl.evaluation.plots import file_stem, plot_learning_curves, plot_report
from lightmarl.evaluation.report import load_report

_DEFAULT_SUFFIX = "/episode_return"
_LOGGER_FOLDERS = {"csv", "metrics.csv"}


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors as one ``lightmarl plot: error: ...`` line, without argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        _fail(f"{message} (`lightmarl plot --help` lists every option)")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="lightmarl plot",
        description="Plot learning curves of one or several runs (seeds aggregated) and evaluation report figures.",
    )
    parser.add_argument(
        "runs",
        nargs="*",
        type=Path,
        help="CSVLogger folders (e.g. runs/ippo/csv), one per label; their version_* subfolders are the seeds",
    )
    parser.add_argument(
        "--metric",
        action="append",
        help="metric to plot (repeatable); default: every */episode_return metric all runs logged",
    )
    parser.add_argument("--x", choices=sorted(X_AXES), default="frames", help="x axis (default: frames)")
    parser.add_argument("--label", action="append", help="label per run folder, in order (default: folder names)")
    parser.add_argument("--out", type=Path, default=Path("plots"), help="output folder (default: plots/)")
    parser.add_argument("--points", type=int, default=200, help="grid points of the aggregated curves")
    parser.add_argument("--confidence", type=float, default=0.95, help="coverage of the seed band (default 0.95)")
    parser.add_argument("--report", type=Path, help="an evaluation report JSON: also plot its returns and payoffs")
    parser.add_argument("--kind", choices=["box", "violin"], default="box", help="return distribution plot kind")
    return parser


def default_label(run: Path) -> str:
    """A label for a run folder: its name, skipping logger folders (``runs/ippo/csv`` -> ``ippo``)."""
    parts = [p for p in run.resolve().parts if p not in _LOGGER_FOLDERS and not p.startswith("version_")]
    return parts[-1] if parts else str(run)


def _labels(runs: Sequence[Path], given: Sequence[str] | None) -> list[str]:
    if given is not None and len(given) != len(runs):
        raise ValueError(f"--label: {len(given)} labels for {len(runs)} run folders; give one per folder")
    labels = list(given) if given is not None else [default_label(run) for run in runs]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"run folders share the label(s) {duplicates}; name them with --label, one per folder")
    return labels


def _default_metrics(tables: Sequence[MetricsTable], x: XAxis) -> list[str]:
    common = set.intersection(*(set(table.metrics) for table in tables))
    candidates = sorted(m for m in common if m.endswith(_DEFAULT_SUFFIX))
    # A curve needs two points per seed (a short run validates once): leave those metrics out.
    metrics = [m for m in candidates if all(len(table.series(m, x)[0]) >= 2 for table in tables)]
    if not metrics:
        raise ValueError(
            f"no metric ending in {_DEFAULT_SUFFIX!r} with two or more points in every run; "
            f"pass --metric, one of {', '.join(sorted(common))}"
        )
    return metrics


def load_runs(runs: Sequence[Path], labels: Sequence[str] | None = None) -> dict[str, list[MetricsTable]]:
    """Label -> the metrics of each of its seeds (``version_*`` subfolders), one label per run folder."""
    names = _labels(runs, labels)
    return {label: [read_metrics_csv(path) for path in find_metrics_files(run)] for label, run in zip(names, runs)}


def plot_runs(
    runs: Sequence[Path],
    out: Path,
    metrics: Sequence[str] | None = None,
    x: str = "frames",
    labels: Sequence[str] | None = None,
    points: int = 200,
    confidence: float = 0.95,
) -> list[Path]:
    """Write one PNG per metric comparing ``runs``; returns the paths."""
    if x not in X_AXES:
        raise ValueError(f"--x: {x!r} is not one of {sorted(X_AXES)}")
    tables = load_runs(runs, labels)
    chosen = (
        list(metrics)
        if metrics
        else _default_metrics([t for group in tables.values() for t in group], cast("XAxis", x))
    )
    written = []
    for metric in chosen:
        curves = learning_curves(tables, metric, x, points, confidence)
        written.append(
            plot_learning_curves(curves, out / f"{file_stem(metric)}_{x}.png", metric, X_AXES[x], confidence)
        )
    return written


def main(args: Sequence[str] | None = None) -> None:
    """Entry point of ``lightmarl plot`` (``lightmarl.cli.main`` hands it the arguments after ``plot``)."""
    parsed = _parser().parse_args(list(sys.argv[1:] if args is None else args))
    if not parsed.runs and parsed.report is None:
        _fail("give run folders with metrics.csv files, or --report REPORT.json")
    if parsed.points < 2:
        _fail(f"--points: expected at least 2 grid points for a curve, got {parsed.points}")
    if not 0 < parsed.confidence < 1:
        _fail(f"--confidence: expected a coverage between 0 and 1 (e.g. 0.95), got {parsed.confidence}")
    try:
        written = []
        if parsed.runs:
            written += plot_runs(
                parsed.runs, parsed.out, parsed.metric, parsed.x, parsed.label, parsed.points, parsed.confidence
            )
        if parsed.report is not None:
            written += plot_report(load_report(parsed.report), parsed.out, parsed.kind)
    except ValueError as err:
        _fail(str(err))
    for path in written:
        print(path)  # noqa: T201 - the command's output: the files it wrote


def _fail(message: str) -> NoReturn:
    print(f"lightmarl plot: error: {message}", file=sys.stderr)  # noqa: T201
    raise SystemExit(2)
