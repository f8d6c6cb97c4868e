"""A sweep's report: aggregate scores with intervals over seeds and tasks, tables and plots.

``lightmarl sweep --config sweep.yaml --report`` writes into ``<out_dir>/report/``:

- ``report.json``: the score metric, the tasks, per method the runs it has, the aggregates (IQM, mean,
  median and, for normalized scores, the optimality gap) with stratified bootstrap intervals, the
  probability of improvement of every pair of methods, the performance profiles and the
  sample-efficiency curves (`lightmarl.experiments.statistics`);
- ``report.md``: the aggregates and the probabilities of improvement as tables;
- ``aggregates.png``, ``performance_profiles.png``, ``sample_efficiency.png``.

A run's score is its final value of the score metric (``score.metric``, the one ``lightmarl validate``
logged), normalized as ``(x - random) / (reference - random)`` where ``score.normalize`` names the
task's random and reference scores. Only ``done`` runs count; a method's matrix has one row per seed
and one column per task, so a method needs as many done runs on every task (extra runs of a task
are left out, in seed order, and the report says so).

Sample-efficiency curves read the score metric at each periodic validation of ``fit`` from the runs'
``metrics.csv`` files (the CSV logger every recipe gets by default). Frames on the x-axis are
``counters/frames``: environment steps summed over the vectorized env copies and the ranks (one frame
= one step of one env copy, whatever the number of agents in it), counted when the validation
ran. A curve holds the frames every run of the method was validated at.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightmarl.evaluation.curves import FRAMES, read_metrics_csv
from lightmarl.experiments import statistics
from lightmarl.experiments.runner import collect_states, metrics_files
from lightmarl.experiments.spec import SweepSpec

log = logging.getLogger(__name__)

REPORT_DIR = "report"
FRAME_COUNTING = (
    "counters/frames: environment steps summed over vectorized env copies and ranks (one step of one env copy is one "
    "frame, whatever its number of agents), at the validation that measured the score"
)


def default_metric(states: Sequence[dict[str, Any]]) -> str | None:
    """The first ``eval/*/episode_return`` metric a done run logged."""
    names = sorted({m for s in states if s.get("status") == "done" for m in s.get("metrics") or {}})
    return next((m for m in names if m.startswith("eval/") and m.endswith("/episode_return")), None)


def normalized(value: float | np.ndarray, task: str, spec: SweepSpec) -> Any:
    bounds = spec.score.normalize.get(task)
    if bounds is None:
        return value
    low, high = bounds
    return (value - low) / (high - low)


def score_matrices(
    spec: SweepSpec, states: Sequence[dict[str, Any]], metric: str
) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
    """method -> ``[runs, tasks]`` scores; the tasks (columns); notes on runs left out."""
    tasks = sorted({s["task"] for s in states})
    by_method: dict[str, dict[str, list[float]]] = {}
    notes: list[str] = []
    for s in sorted(states, key=lambda s: (s["method"], s["task"], s["seed"])):
        if s.get("status") != "done":
            continue
        value = (s.get("metrics") or {}).get(metric)
        if value is None:
            notes.append(f"{s['run_id']}: logged no {metric}")
            continue
        by_method.setdefault(s["method"], {}).setdefault(s["task"], []).append(
            float(normalized(value, s["task"], spec))
        )
    matrices = {}
    for method, per_task in by_method.items():
        missing = [t for t in tasks if not per_task.get(t)]
        if missing:
            notes.append(f"{method}: left out, no done run on {', '.join(missing)}")
            continue
        runs = min(len(per_task[t]) for t in tasks)
        for t in tasks:
            if len(per_task[t]) > runs:
                notes.append(f"{method}: {len(per_task[t]) - runs} run(s) of {t} left out (fewer runs on another task)")
        matrices[method] = np.array([[per_task[t][r] for t in tasks] for r in range(runs)])
    return matrices, tasks, notes


def run_curve(run_dir: Path, metric: str) -> dict[float, float]:
    """frames -> the metric at that validation, over every ``metrics.csv`` of a run (a resumed run has several)."""
    curve: dict[float, float] = {}
    for path in metrics_files(run_dir):
        table = read_metrics_csv(path)
        if metric not in table.columns or FRAMES not in table.columns:
            continue
        x, y = table.series(metric, "frames")
        curve.update(zip(x.tolist(), y.tolist()))
    return curve


def curve_matrices(
    spec: SweepSpec, states: Sequence[dict[str, Any]], metric: str, tasks: Sequence[str], methods: Sequence[str]
) -> dict[str, tuple[list[float], np.ndarray]]:
    """method -> (frames, ``[runs, tasks, frames]`` scores) at the frames every run of the method was validated at."""
    out = {}
    for method in methods:
        per_task: dict[str, list[dict[float, float]]] = {t: [] for t in tasks}
        for s in sorted(states, key=lambda s: s["seed"]):
            if s["method"] == method and s.get("status") == "done":
                per_task[s["task"]].append(run_curve(Path(s["run_dir"]), metric))
        runs = min(len(c) for c in per_task.values())
        if runs == 0:
            continue
        curves = [c for t in tasks for c in per_task[t][:runs]]
        frames = sorted(set.intersection(*(set(c) for c in curves)))
        if not frames:
            continue
        matrix = np.array(
            [[[normalized(per_task[t][r][f], t, spec) for f in frames] for t in tasks] for r in range(runs)]
        )
        out[method] = (frames, matrix)
    return out


def build_report(spec: SweepSpec, *, metric: str | None = None, reps: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The report of the sweep's runs on disk (see the module doc).

    Args:
        spec: the sweep.
        metric: the score metric (default: the sweep's ``score.metric``, else the first ``eval/*/episode_return``).
        reps: bootstrap resamples.
        seed: the bootstrap's random seed.
    """
    states = collect_states(spec)
    metric = metric or spec.score.metric or default_metric(states)
    if metric is None:
        raise ValueError(f"sweep {spec.name}: no done run logged an eval/*/episode_return metric; set score.metric")
    matrices, tasks, notes = score_matrices(spec, states, metric)
    if not matrices:
        raise ValueError(
            f"sweep {spec.name}: no method has a done run with {metric} on every task ({'; '.join(notes)})"
        )
    is_normalized = all(t in spec.score.normalize for t in tasks)
    estimators = list(statistics.ESTIMATORS if is_normalized else statistics.ESTIMATORS[:3])
    methods = sorted(matrices)
    aggregates = statistics.aggregates(matrices, estimators=estimators, reps=reps, seed=seed)
    pairs = [
        {"x": a, "y": b, **statistics.probability_of_improvement(matrices[a], matrices[b], reps=reps, seed=seed)}
        for i, a in enumerate(methods)
        for b in methods[i + 1 :]
    ]
    everything = np.concatenate([m.ravel() for m in matrices.values()])
    taus = np.linspace(float(everything.min()), float(everything.max()), 41)
    profiles = statistics.performance_profiles(matrices, taus, reps=reps, seed=seed)
    curves = curve_matrices(spec, states, metric, tasks, methods)
    iqm = statistics.iqm_curves({m: c[1] for m, c in curves.items()}, reps=reps, seed=seed) if curves else {}
    return {
        "sweep": spec.name,
        "metric": metric,
        "normalized": is_normalized,
        "normalize": {t: {"random": low, "reference": high} for t, (low, high) in spec.score.normalize.items()},
        "tasks": tasks,
        "reps": reps,
        "confidence": 0.95,
        "methods": {
            m: {"runs": int(matrices[m].shape[0]), "scores": matrices[m].tolist(), **aggregates[m]} for m in methods
        },
        "probability_of_improvement": pairs,
        "performance_profiles": {"tau": taus.tolist(), **profiles},
        "sample_efficiency": {
            "frame_counting": FRAME_COUNTING,
            **{m: {"frames": curves[m][0], **iqm[m]} for m in iqm},
        },
        "notes": notes,
    }


def _interval(entry: dict[str, Any]) -> str:
    return f"{entry['value']:.3f} [{entry['ci'][0]:.3f}, {entry['ci'][1]:.3f}]"


def report_markdown(report: dict[str, Any]) -> str:
    """The report's tables: aggregates per method, probability of improvement per pair."""
    kind = "normalized " if report["normalized"] else ""
    estimators = [e for e in statistics.ESTIMATORS if all(e in m for m in report["methods"].values())]
    lines = [
        f"# Sweep {report['sweep']}: {kind}{report['metric']}",
        "",
        f"Tasks: {', '.join(report['tasks'])}. Point estimates with 95% stratified bootstrap intervals "
        f"({report['reps']} resamples, rliable).",
        "",
        "| method | runs | " + " | ".join(estimators) + " |",
        "| --- | --- | " + " | ".join("---" for _ in estimators) + " |",
    ]
    for method, entry in report["methods"].items():
        lines.append(f"| {method} | {entry['runs']} | " + " | ".join(_interval(entry[e]) for e in estimators) + " |")
    if report["probability_of_improvement"]:
        lines += ["", "| P(X > Y) | X | Y |", "| --- | --- | --- |"]
        lines += [f"| {_interval(p)} | {p['x']} | {p['y']} |" for p in report["probability_of_improvement"]]
    if report["notes"]:
        lines += ["", *[f"- {note}" for note in report["notes"]]]
    return "\n".join(lines) + "\n"


def plot_report(report: dict[str, Any], out: Path) -> list[Path]:
    """The report's PNGs (Agg backend): aggregates with intervals, performance profiles, sample-efficiency curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    methods = list(report["methods"])
    label = ("normalized " if report["normalized"] else "") + report["metric"]
    estimators = [e for e in statistics.ESTIMATORS if all(e in m for m in report["methods"].values())]
    fig, axes = plt.subplots(1, len(estimators), figsize=(3.4 * len(estimators), 0.6 + 0.45 * len(methods)))
    for ax, estimator in zip(np.atleast_1d(axes), estimators):
        for row, method in enumerate(methods):
            entry = report["methods"][method][estimator]
            low, high = entry["ci"]
            ax.barh(row, high - low, left=low, height=0.6, alpha=0.6, color=f"C{row}")
            ax.vlines(entry["value"], row - 0.3, row + 0.3, color="k")
        ax.set_yticks(range(len(methods)), methods if ax is np.atleast_1d(axes)[0] else [""] * len(methods))
        ax.set_title(estimator)
    fig.supxlabel(label)
    fig.tight_layout()
    written.append(out / "aggregates.png")
    fig.savefig(written[-1], dpi=100)
    plt.close(fig)

    profiles = report["performance_profiles"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, method in enumerate(methods):
        ax.plot(profiles["tau"], profiles[method]["profile"], color=f"C{i}", label=method)
        ax.fill_between(profiles["tau"], *profiles[method]["ci"], color=f"C{i}", alpha=0.2)
    ax.set_xlabel(f"{label} (τ)")
    ax.set_ylabel("fraction of runs with score > τ")
    ax.legend()
    fig.tight_layout()
    written.append(out / "performance_profiles.png")
    fig.savefig(written[-1], dpi=100)
    plt.close(fig)

    curves = {m: c for m, c in report["sample_efficiency"].items() if m != "frame_counting"}
    if curves:
        fig, ax = plt.subplots(figsize=(6, 4))
        for i, (method, curve) in enumerate(curves.items()):
            ax.plot(curve["frames"], curve["iqm"], color=f"C{i}", label=method, marker="o", markersize=3)
            ax.fill_between(curve["frames"], *curve["ci"], color=f"C{i}", alpha=0.2)
        ax.set_xlabel("frames (counters/frames)")
        ax.set_ylabel(f"IQM {label}")
        ax.legend()
        fig.tight_layout()
        written.append(out / "sample_efficiency.png")
        fig.savefig(written[-1], dpi=100)
        plt.close(fig)
    return written


def write_report(spec: SweepSpec, *, metric: str | None = None, reps: int = 2000, seed: int = 0) -> list[Path]:
    """``report.json``, ``report.md`` and the PNGs in ``<out_dir>/report``; the files written.

    Args:
        spec: the sweep.
        metric: the score metric (default: the sweep's ``score.metric``, else the first ``eval/*/episode_return``).
        reps: bootstrap resamples.
        seed: the bootstrap's random seed.
    """
    report = build_report(spec, metric=metric, reps=reps, seed=seed)
    out = spec.out_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(report_markdown(report))
    return [out / "report.json", out / "report.md", *plot_report(report, out)]
