"""How well the population does: evaluation episodes and per-binding metrics."""

from lightmarl.evaluation.episodes import evaluate_episodes

__all__ = ["evaluate_episodes"]
