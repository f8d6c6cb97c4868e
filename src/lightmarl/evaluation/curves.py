"""Learning curves from Lightning ``CSVLogger`` files: read runs' ``metrics.csv``, align seeds, band them.

A ``metrics.csv`` has one column per logged metric and one row per ``log`` call; a row leaves
empty the metrics it did not log. Training rows carry the counters (``counters/frames``,
``counters/iterations``, ``time/collect_s``, ``time/update_s``); validation rows
(``eval/...``) do not, so their x value is looked up through the ``step`` column they share
with the training row logged just before. Several seeds of one configuration are
interpolated onto a common x grid and summarised as a mean with a t interval across seeds.

Examples:
    >>> import numpy as np
    >>> curve = aggregate_seeds([(np.array([0.0, 10.0]), np.array([0.0, 1.0])), (np.array([0.0, 10.0]), np.array([2.0, 3.0]))], points=3)
    >>> curve.x.tolist(), curve.mean.tolist(), curve.seeds
    ([0.0, 5.0, 10.0], [1.0, 1.5, 2.0], 2)
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

import numpy as np

from lightmarl.evaluation.statistics import t_quantile

XAxis = Literal["frames", "iterations", "time"]

# Metric names written by MARLModule's training step (lightmarl.training.module).
FRAMES = "counters/frames"
ITERATIONS = "counters/iterations"
COLLECT_SECONDS = "time/collect_s"
UPDATE_SECONDS = "time/update_s"
STEP = "step"
# Columns Lightning's CSVLogger writes beside the metrics.
_BOOKKEEPING = (STEP, "epoch")
X_AXES: dict[str, str] = {
    "frames": "env frames (counters/frames)",
    "iterations": "training iterations (counters/iterations)",
    "time": "training time in s (sum of time/collect_s + time/update_s)",
}


@dataclass(frozen=True)
class MetricsTable:
    """One ``metrics.csv``: every column as a float array, NaN where a row left it empty.

    Attributes:
        path: the file.
        columns: column name -> values, one per row.
    """

    path: Path
    columns: dict[str, np.ndarray]

    @property
    def metrics(self) -> list[str]:
        """Logged metric names (Lightning's ``step`` / ``epoch`` columns left out), sorted."""
        return sorted(name for name, values in self.columns.items() if name not in _BOOKKEEPING)

    def series(self, metric: str, x: XAxis = "frames") -> tuple[np.ndarray, np.ndarray]:
        """``(x, y)`` of every row that logged ``metric``, in row order, rows without an x value left out."""
        if metric not in self.columns or metric in _BOOKKEEPING:
            raise ValueError(f"{self.path}: no metric {metric!r}; it has {', '.join(self.metrics)}")
        if x not in X_AXES:
            raise ValueError(f"x axis {x!r} is not one of {sorted(X_AXES)}")
        x_values = self._x_values(x)
        y = self.columns[metric]
        keep = ~np.isnan(y) & ~np.isnan(x_values)
        return x_values[keep], y[keep]

    def _x_values(self, x: XAxis) -> np.ndarray:
        if x == "time":
            needed = [COLLECT_SECONDS, UPDATE_SECONDS]
        else:
            needed = [FRAMES if x == "frames" else ITERATIONS]
        missing = [name for name in needed if name not in self.columns]
        if missing:
            raise ValueError(f"{self.path}: x axis {x!r} needs the metric(s) {missing}, which this file does not have")
        if x == "time":
            seconds = np.nan_to_num(self.columns[COLLECT_SECONDS]) + np.nan_to_num(self.columns[UPDATE_SECONDS])
            own = np.where(np.isnan(self.columns[COLLECT_SECONDS]), np.nan, np.cumsum(seconds))
        else:
            own = self.columns[needed[0]].copy()
        steps = self.columns.get(STEP)
        if steps is None:
            return own
        # Rows without the counter (validation) take the x of the last counted row with their step.
        by_step: dict[float, float] = {}
        filled = own.copy()
        for row, (step, value) in enumerate(zip(steps, own)):
            if not math.isnan(value):
                by_step[step] = value
            elif not math.isnan(step):
                filled[row] = by_step.get(step, math.nan)
        return filled


def read_metrics_csv(path: str | Path) -> MetricsTable:
    """Read a Lightning ``CSVLogger`` ``metrics.csv`` (see `MetricsTable`)."""
    path = Path(path)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as err:
        raise ValueError(f"{path}: cannot read metrics ({err.strerror or err})") from None
    if not rows:
        raise ValueError(f"{path}: empty file, no metrics header")
    header, body = rows[0], rows[1:]
    columns: dict[str, np.ndarray] = {}
    for index, name in enumerate(header):
        values = np.full(len(body), np.nan)
        for row_index, row in enumerate(body):
            cell = row[index] if index < len(row) else ""
            if cell:
                try:
                    values[row_index] = float(cell)
                except ValueError:
                    raise ValueError(
                        f"{path}: row {row_index + 2}, column {name!r}: {cell!r} is not a number"
                    ) from None
        columns[name] = values
    return MetricsTable(path, columns)


def find_metrics_files(directory: str | Path) -> list[Path]:
    """The ``metrics.csv`` of every seed of one configuration under ``directory``.

    ``directory`` is a CSVLogger folder (``runs/x/csv``) whose ``version_*`` subfolders are the
    seeds, or one ``version_*`` folder, or a ``metrics.csv`` file. Raises ``ValueError`` naming
    the path when there is none.
    """
    directory = Path(directory)
    if directory.is_file():
        return [directory]
    own = directory / "metrics.csv"
    if own.is_file():
        return [own]
    found = sorted(directory.glob("version_*/metrics.csv"), key=lambda p: _version_number(p.parent.name))
    if not found:
        raise ValueError(f"{directory}: no metrics.csv (looked for {own} and {directory}/version_*/metrics.csv)")
    return found


def _version_number(name: str) -> tuple[int, str]:
    suffix = name.removeprefix("version_")
    return (int(suffix), "") if suffix.isdigit() else (1 << 62, name)


@dataclass(frozen=True)
class Curve:
    """Mean learning curve of several seeds on a common x grid.

    Attributes:
        x: grid, over the x range every seed covers.
        mean: mean over seeds at each grid point.
        low: lower end of the interval band (equal to ``mean`` for one seed).
        high: upper end of the interval band.
        seeds: number of seeds.
    """

    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int


def aggregate_seeds(
    series: Sequence[tuple[np.ndarray, np.ndarray]], points: int = 200, confidence: float = 0.95
) -> Curve:
    """Interpolate each seed's ``(x, y)`` onto a shared grid; mean and t interval across seeds.

    The grid spans the x range every seed reached (a seed that stopped early does not drag the
    end of the mean). Fewer than two seeds give no band (``low == high == mean``).
    """
    cleaned = []
    for x, y in series:
        if len(x) == 0:
            raise ValueError("aggregate_seeds: a seed has no points for this metric")
        order = np.argsort(x, kind="stable")
        cleaned.append((np.asarray(x, dtype=np.float64)[order], np.asarray(y, dtype=np.float64)[order]))
    if not cleaned:
        raise ValueError("aggregate_seeds: no seeds")
    start = max(x[0] for x, _ in cleaned)
    stop = min(x[-1] for x, _ in cleaned)
    if start > stop:
        raise ValueError(f"aggregate_seeds: the seeds' x ranges do not overlap ({start} > {stop})")
    grid = np.linspace(start, stop, points) if stop > start else np.array([start])
    values = np.stack([np.interp(grid, x, y) for x, y in cleaned])
    mean = values.mean(axis=0)
    n = len(cleaned)
    if n < 2:
        return Curve(grid, mean, mean.copy(), mean.copy(), 1)
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * values.std(axis=0, ddof=1) / math.sqrt(n)
    return Curve(grid, mean, mean - half, mean + half, n)


def learning_curves(
    tables: Mapping[str, Sequence[MetricsTable]],
    metric: str,
    x: str = "frames",
    points: int = 200,
    confidence: float = 0.95,
) -> dict[str, Curve]:
    """Label -> ``metric`` over ``x``, aggregated over the label's seeds (`aggregate_seeds`)."""
    if x not in X_AXES:
        raise ValueError(f"x axis {x!r} is not one of {sorted(X_AXES)}")
    axis = cast("XAxis", x)
    curves = {}
    for label, group in tables.items():
        try:
            curves[label] = aggregate_seeds([table.series(metric, axis) for table in group], points, confidence)
        except ValueError as err:
            if str(err).startswith("aggregate_seeds"):
                raise ValueError(f"{metric!r} of {label!r} over {x}: {err}") from None
            raise
    return curves
