"""PNG figures of an evaluation: learning curves with seed bands, payoff heatmaps, return distributions.

Figures are drawn on matplotlib's Agg canvas through `matplotlib.figure.Figure`, never
through ``pyplot``: no global figure state, no display needed, safe to call from a training
process. Every function writes one PNG and returns its path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lightmarl.evaluation.curves import Curve
from lightmarl.evaluation.head_to_head import PayoffMatrix

DistributionKind = Literal["box", "violin"]


def file_stem(name: str) -> str:
    """``name`` (a metric or scenario) as a file name: characters other than letters, digits, ``.-_`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "unnamed"


def _save(figure: Figure, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.savefig(out, format="png", dpi=120, bbox_inches="tight")
    return out


def plot_learning_curves(
    curves: Mapping[str, Curve],
    out: str | Path,
    metric: str,
    x_label: str = "env frames",
    confidence: float = 0.95,
) -> Path:
    """One line per label (its mean over seeds) with a shaded interval band where it has ≥ 2 seeds.

    Args:
        curves: label -> aggregated curve (`aggregate_seeds`).
        out: PNG path.
        metric: the plotted metric, for the y label and title.
        x_label: x axis label.
        confidence: the band's coverage, for the legend.
    """
    figure = Figure(figsize=(7.0, 4.2))
    axes = figure.add_subplot()
    for label, curve in curves.items():
        line = axes.plot(curve.x, curve.mean, label=f"{label} ({curve.seeds} seed{'s' * (curve.seeds != 1)})")[0]
        if curve.seeds >= 2:
            axes.fill_between(curve.x, curve.low, curve.high, color=line.get_color(), alpha=0.25, linewidth=0)
    axes.set_xlabel(x_label)
    axes.set_ylabel(metric)
    axes.set_title(f"{metric}: mean over seeds, {round(100 * confidence)}% t interval band")
    axes.grid(alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    return _save(figure, out)


def plot_payoff_heatmap(payoff: PayoffMatrix, out: str | Path, title: str = "payoff") -> Path:
    """Heatmap of the row player's mean score against each column player (draw = ½), games annotated."""
    return plot_score_heatmap(payoff.players, payoff.score, payoff.games, out, title)


def plot_score_heatmap(
    players: Sequence[str], score: np.ndarray, games: np.ndarray, out: str | Path, title: str = "payoff"
) -> Path:
    """`plot_payoff_heatmap` from arrays: ``score`` (NaN where unplayed) and ``games``, row against column.

    Any payoff table can be drawn without being converted (the league's decayed payoff is).
    """
    players = list(players)
    size = len(players)
    figure = Figure(figsize=(1.2 * size + 2.5, 1.0 * size + 1.5))
    axes = figure.add_subplot()
    image = axes.imshow(np.ma.masked_invalid(score), vmin=0.0, vmax=1.0, cmap="RdBu")
    figure.colorbar(image, ax=axes, label="row player's score")
    axes.set_xticks(range(size), players, rotation=45, ha="right")
    axes.set_yticks(range(size), players)
    axes.set_xlabel("opponent")
    axes.set_ylabel("player")
    for i in range(size):
        for j in range(size):
            if games[i, j]:
                text = f"{score[i, j]:.2f}\n({games[i, j]})"
                color = "white" if abs(score[i, j] - 0.5) > 0.3 else "black"
                axes.text(j, i, text, ha="center", va="center", fontsize="small", color=color)
    axes.set_title(title)
    return _save(figure, out)


def plot_return_distributions(
    returns: Mapping[str, Mapping[str, Sequence[float]]], out: str | Path, kind: DistributionKind = "box"
) -> Path:
    """Per scenario one panel, per binding one box (or violin) of its episode returns.

    Args:
        returns: scenario -> binding -> per-episode returns.
        out: PNG path.
        kind: ``"box"`` or ``"violin"``.
    """
    if kind not in ("box", "violin"):
        raise ValueError(f"kind: {kind!r} is not one of ['box', 'violin']")
    if not returns:
        raise ValueError("plot_return_distributions: no scenarios")
    figure = Figure(figsize=(max(4.0, 3.2 * len(returns)), 4.0))
    # One env, one return scale: a shared y axis lets the panels be compared by eye.
    panels = figure.subplots(1, len(returns), squeeze=False, sharey=True)[0]
    for axes, (scenario, by_binding) in zip(panels, returns.items()):
        labels = list(by_binding)
        data = [np.asarray(by_binding[label], dtype=np.float64) for label in labels]
        if kind == "box":
            axes.boxplot(data, tick_labels=labels, showmeans=True)
        else:
            axes.violinplot(data, showmeans=True)
            axes.set_xticks(range(1, len(labels) + 1), labels)
        # Generated names are long (swap/agent_1_by_scripted): one line per part keeps panels apart.
        axes.set_title(scenario.replace("/", "/\n"), fontsize="medium")
        axes.grid(alpha=0.3, axis="y")
    panels[0].set_ylabel("episode return")
    return _save(figure, out)


def plot_report(report: Mapping[str, Any], out_dir: str | Path, kind: DistributionKind = "box") -> list[Path]:
    """All figures of an evaluation report: ``returns.png`` and one ``payoff_<scenario>.png`` per head-to-head
    (none for a report of exploitability or best responses alone)."""
    out_dir = Path(out_dir)
    scenarios = report["scenarios"]
    if not scenarios:
        return []
    returns = {
        name: {binding: episodes["episode_return"] for binding, episodes in scenario["episodes"].items()}
        for name, scenario in scenarios.items()
    }
    written = [plot_return_distributions(returns, out_dir / "returns.png", kind)]
    for name, scenario in scenarios.items():
        if scenario["head_to_head"] is not None:
            payoff = PayoffMatrix.from_dict(scenario["head_to_head"])
            written.append(
                plot_payoff_heatmap(payoff, out_dir / f"payoff_{file_stem(name)}.png", title=f"payoff: {name}")
            )
    return written
