"""Statistics over seeds and tasks with rliable (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice").

Scores are a ``[runs, tasks]`` matrix per method (one row per seed; the same tasks, in the same order,
for every method). Intervals are rliable's stratified bootstrap: runs are resampled with replacement
within each task, ``reps`` times, and the interval is the percentile interval of the estimate over the
resamples. The estimators are rliable's own (`rliable.metrics`):

- ``IQM``: the interquartile mean of all runs × tasks scores (the mean of the middle 50%);
- ``mean``, ``median`` (the median over tasks of the per-task mean);
- ``optimality gap``: how far, on average, scores fall short of 1 (``gamma``), for normalized scores;
- probability of improvement ``P(X > Y)``: the chance that a run of method X scores higher than a run of
  method Y on a task drawn at random (Mann-Whitney U per task, averaged over tasks);
- performance profiles: the fraction of runs with a score above each threshold ``tau``.

rliable (``pip install 'lightmarl[experiments]'``) is imported when a function here runs.

A comparison of a few seeds of a few methods on one task (the benchmark scripts' tables) reports each
method's mean over its seeds with a Student-t interval (`seed_mean`) and the Welch interval of a
difference of two methods (`seed_difference`): with two to five seeds the t interval is the honest one,
where a bootstrap's resamples of so few values understate the spread (`lightmarl.evaluation.statistics`
says by how much). Neither needs rliable.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lightmarl.evaluation.statistics import DifferenceSummary, difference_interval, t_interval

HAS_RLIABLE = importlib.util.find_spec("rliable") is not None
#: the aggregate estimators, in report order.
ESTIMATORS = ("IQM", "mean", "median", "optimality gap")


def seed_mean(values: Sequence[float]) -> dict[str, Any]:
    """One method's mean over seeds with its 95% Student-t interval.

    Returns ``{"n", "mean", "ci95", "values"}``; ``ci95`` is ``[low, high]``, or ``None`` for a single seed
    (no spread to estimate).

    Args:
        values: one result per seed (e.g. each run's final exploitability).

    Examples:
        >>> summary = seed_mean([0.1, 0.2, 0.3])
        >>> round(summary["mean"], 3), [round(x, 3) for x in summary["ci95"]]
        (0.2, [-0.048, 0.448])
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("seed_mean: no values (give one result per seed)")
    mean = sum(values) / len(values)
    ci = [float(x) for x in t_interval(values)] if len(values) > 1 else None
    return {"n": len(values), "mean": mean, "ci95": ci, "values": values}


def seed_difference(values: Sequence[float], reference: Sequence[float]) -> DifferenceSummary:
    """``mean(values) - mean(reference)`` over two methods' seeds, with Welch's 95% t interval.

    Args:
        values: one result per seed of the compared method.
        reference: one result per seed of the reference method (seeds need not pair up).
    """
    return difference_interval(values, reference)


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """NumPy's global generator seeded for the block, then restored.

    rliable's ``StratifiedBootstrap`` draws its resamples from ``np.random`` whatever ``random_state``
    it is given (rliable 1.2.0), and so do its performance profiles: the global generator is what
    makes an interval reproducible. rliable also prints a line per method and arch warns about the
    ``random_state`` argument: both are kept out of the command's output.
    """
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            yield
    finally:
        np.random.set_state(state)


def _rliable() -> tuple[Any, Any]:
    if not HAS_RLIABLE:
        raise ImportError("the sweep report needs rliable: pip install 'lightmarl[experiments]'")
    from rliable import library, metrics

    return library, metrics


def aggregates(
    scores: Mapping[str, np.ndarray],
    *,
    estimators: Sequence[str] = ESTIMATORS,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Point estimates and stratified bootstrap intervals: method -> estimator -> ``{"value", "ci": [low, high]}``.

    Args:
        scores: method -> ``[runs, tasks]`` scores.
        estimators: a subset of `ESTIMATORS`.
        reps: bootstrap resamples.
        confidence: the intervals' coverage.
        seed: the bootstrap's random seed (the same scores and seed give the same intervals).
    """
    library, metrics = _rliable()
    functions = {
        "IQM": metrics.aggregate_iqm,
        "mean": metrics.aggregate_mean,
        "median": metrics.aggregate_median,
        "optimality gap": metrics.aggregate_optimality_gap,
    }
    unknown = [e for e in estimators if e not in functions]
    if unknown:
        raise ValueError(f"estimators: {unknown[0]!r} is not one of {', '.join(ESTIMATORS)}")

    def estimate(matrix: np.ndarray) -> np.ndarray:
        return np.array([functions[e](matrix) for e in estimators])

    with _seeded(seed):
        points, intervals = library.get_interval_estimates(
            {m: np.asarray(s, dtype=float) for m, s in scores.items()},
            estimate,
            reps=reps,
            confidence_interval_size=confidence,
            random_state=np.random.RandomState(seed),
        )
    return {
        method: {
            e: {
                "value": float(points[method][i]),
                "ci": [float(intervals[method][0][i]), float(intervals[method][1][i])],
            }
            for i, e in enumerate(estimators)
        }
        for method in scores
    }


def probability_of_improvement(
    x: np.ndarray, y: np.ndarray, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, Any]:
    """``P(X > Y)`` between two methods' ``[runs, tasks]`` scores, with its stratified bootstrap interval.

    Args:
        x: the first method's scores.
        y: the second method's scores (the same tasks).
        reps: bootstrap resamples.
        confidence: the interval's coverage.
        seed: the bootstrap's random seed.
    """
    library, metrics = _rliable()
    with _seeded(seed):
        points, intervals = library.get_interval_estimates(
            {"pair": [np.asarray(x, dtype=float), np.asarray(y, dtype=float)]},
            metrics.probability_of_improvement,
            reps=reps,
            confidence_interval_size=confidence,
            random_state=np.random.RandomState(seed),
        )
    return {"value": float(points["pair"]), "ci": [float(intervals["pair"][0][0]), float(intervals["pair"][1][0])]}


def performance_profiles(
    scores: Mapping[str, np.ndarray], taus: np.ndarray, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, dict[str, list[Any]]]:
    """Score distributions: method -> ``{"profile": [fraction of runs above tau], "ci": [[low...], [high...]]}``.

    Args:
        scores: method -> ``[runs, tasks]`` scores.
        taus: the thresholds.
        reps: bootstrap resamples.
        confidence: the bands' coverage.
        seed: the bootstrap's random seed.
    """
    library, _ = _rliable()
    with _seeded(seed):
        profiles, cis = library.create_performance_profile(
            {m: np.asarray(s, dtype=float) for m, s in scores.items()},
            taus,
            reps=reps,
            confidence_interval_size=confidence,
        )
    return {m: {"profile": profiles[m].tolist(), "ci": [cis[m][0].tolist(), cis[m][1].tolist()]} for m in scores}


def iqm_curves(
    scores: Mapping[str, np.ndarray], *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> dict[str, dict[str, list[Any]]]:
    """IQM at each point of a learning curve: method -> ``{"iqm": [...], "ci": [[low...], [high...]]}``.

    Args:
        scores: method -> ``[runs, tasks, points]`` scores (every run measured at the same frames).
        reps: bootstrap resamples.
        confidence: the bands' coverage.
        seed: the bootstrap's random seed.
    """
    library, metrics = _rliable()

    def iqm_per_point(matrix: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(matrix[..., point]) for point in range(matrix.shape[-1])])

    with _seeded(seed):
        points, intervals = library.get_interval_estimates(
            {m: np.asarray(s, dtype=float) for m, s in scores.items()},
            iqm_per_point,
            reps=reps,
            confidence_interval_size=confidence,
            random_state=np.random.RandomState(seed),
        )
    return {m: {"iqm": points[m].tolist(), "ci": [intervals[m][0].tolist(), intervals[m][1].tolist()]} for m in scores}
