"""How well the population does: evaluation episodes, their statistics, head-to-head results and reports.

Plots (`lightmarl.evaluation.plots`, matplotlib) and the ``lightmarl plot`` command
(`lightmarl.evaluation.plot_cli`) are imported from their modules.
"""

from lightmarl.evaluation.episodes import evaluate_episodes
from lightmarl.evaluation.head_to_head import HeadToHead, PayoffMatrix, payoff_matrix, summarize_games
from lightmarl.evaluation.report import build_report, load_report, markdown_summary, validate_report, write_report
from lightmarl.evaluation.statistics import (
    BindingSummary,
    ScenarioEpisodes,
    summarize_episodes,
    summarize_outcomes,
    summarize_values,
    wilson_interval,
)

__all__ = [
    "BindingSummary",
    "HeadToHead",
    "PayoffMatrix",
    "ScenarioEpisodes",
    "build_report",
    "evaluate_episodes",
    "load_report",
    "markdown_summary",
    "payoff_matrix",
    "summarize_episodes",
    "summarize_games",
    "summarize_outcomes",
    "summarize_values",
    "validate_report",
    "wilson_interval",
    "write_report",
]
