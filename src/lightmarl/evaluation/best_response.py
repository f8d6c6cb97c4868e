"""Approximate exploitability: what a freshly trained best response earns against a frozen policy.

Exact exploitability (`lightmarl.evaluation.exploitability`) walks a game's whole tree and
is out of reach beyond small games. The approximation trains a *new* learner, with the recipe's
network and algorithm, for a fixed frame budget against the frozen target (a binding's weights,
or the mixture a league player shows: one member drawn per episode with its meta weight), seats
swapped from one episode to the next, and reports the return it earns against the target,
with an interval. The trained learner is a lower bound on a best response, so the figure
bounds exploitability from below (``gap`` says by how much, where the exact value exists); it is
the measure of Timbers et al. 2022 ("Approximate Exploitability: Learning a Best Response") and
of AlphaStar's exploiters (Vinyals et al. 2019).

`BestResponseConfig` is one entry of ``evaluation.best_response``; the training itself
runs in `lightmarl.training.best_response` (``lightmarl evaluate`` calls it after the
scenarios). `summarize_runs` turns the runs' results into the report's block.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightmarl.evaluation.statistics import summarize_values

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass
class BestResponseConfig:
    """One approximate-exploitability measurement of ``evaluation.best_response``.

    Attributes:
        name: the measurement's name (letters, digits, ``_.-``): report ``best_response.<name>``,
            metrics ``eval/best_response/<name>/...``.
        target: the frozen binding the best response plays against (a recipe binding, read from
            the checkpoint, or one of ``evaluation.bindings``).
        mixture: where the checkpoint records a league mixture for ``target`` (the policy its
            player shows), play against that mixture (one member per episode, drawn with its meta
            weight); ``false``: against the binding's own weights.
        network: the recipe binding whose policy class and ``policy_kwargs`` the best response is
            built with (default: ``target``, or the first trainable binding where ``target`` is
            not a recipe binding, e.g. a scripted one).
        frames: training budget of each best response, in env steps summed over env copies.
        algorithm: fields of ``network``'s algorithm (the recipe's) to change for the best response
            only, e.g. ``{entropy_coeff: 0.01, final_entropy_coeff: 0.0}``; a nested setting (a
            ``magnet``) takes a mapping of its own fields, and ``null`` removes it where the field
            allows. A best response needs no exploration kept for a league's sake: the recipe's
            settings are tuned for a learner that must keep moving, not for one that must commit.
            Empty: the recipe's settings.
        runs: best responses trained, each from its own seed (the report's interval over runs
            needs two or more).
        seed: seed of the first run (run ``i`` uses ``seed + i``).
        num_envs: env copies of the training (default: the recipe's; raised to the number of
            mixture members, so every member has a copy from the start).
        rollout_steps: env steps per copy per update (default: the recipe's).
        episodes: evaluation episodes of each trained best response against the target (each
            an independent draw of member and seat; both sides sample their actions, as the
            target plays).
        eval_seed: base seed of the evaluation env copies.
    """

    name: str
    target: str
    mixture: bool = True
    network: str | None = None
    frames: int = 200_000
    algorithm: dict[str, Any] = field(default_factory=dict)
    runs: int = 1
    seed: int = 0
    num_envs: int | None = None
    rollout_steps: int | None = None
    episodes: int = 2_000
    eval_seed: int = 20_000

    def __post_init__(self) -> None:
        where = f"evaluation.best_response[{self.name!r}]"
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"evaluation.best_response.name: {self.name!r} must be letters, digits and '_.-'")
        for field_name in ("frames", "runs", "episodes"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{where}.{field_name}: expected a positive integer, got {value!r}")
        if not isinstance(self.algorithm, Mapping) or not all(isinstance(k, str) for k in self.algorithm):
            raise ValueError(
                f"{where}.algorithm: expected a mapping of algorithm field names to values, got {self.algorithm!r}"
            )
        for field_name in ("num_envs", "rollout_steps"):
            value = getattr(self, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{where}.{field_name}: expected a positive integer or null, got {value!r}")


def check_best_response(
    configs: Sequence[BestResponseConfig], recipe_bindings: Mapping[str, bool], evaluation_bindings: Sequence[str]
) -> None:
    """Check ``evaluation.best_response`` against the population, before anything is played.

    Args:
        configs: the entries.
        recipe_bindings: the recipe's binding ids -> trainable.
        evaluation_bindings: the ids of ``evaluation.bindings``.

    Raises:
        ValueError: a repeated name, an unknown ``target`` or ``network``, or no network to build.
    """
    names = [c.name for c in configs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"evaluation.best_response: names {repeated} appear more than once")
    known = [*recipe_bindings, *evaluation_bindings]
    for config in configs:
        where = f"evaluation.best_response[{config.name!r}]"
        if config.target not in known:
            raise ValueError(f"{where}.target: {config.target!r} is not a binding; bindings: {known}")
        if config.network is not None and config.network not in recipe_bindings:
            raise ValueError(
                f"{where}.network: {config.network!r} is not a recipe binding; bindings: {list(recipe_bindings)}"
            )
        if network_of(config, recipe_bindings) is None:
            raise ValueError(
                f"{where}.network: target {config.target!r} is not a recipe binding and the recipe has no "
                "trainable binding: name the binding whose network the best response uses"
            )


def network_of(config: BestResponseConfig, recipe_bindings: Mapping[str, bool]) -> str | None:
    """The recipe binding whose network the best response of ``config`` is built with (``None``: none)."""
    if config.network is not None:
        return config.network
    if config.target in recipe_bindings:
        return config.target
    return next((b for b, trainable in recipe_bindings.items() if trainable), None)


@dataclass(frozen=True)
class BestResponseRun:
    """One trained best response against the target.

    Attributes:
        seed: the run's seed.
        frames: frames it trained for.
        returns: its return in each evaluation episode (mean over its agents), seats alternating.
        seats: each episode's seat of the best response (0 or 1).
        exact_return: its exact expected return against the target (mean over the two seats) in
            a two-player zero-sum OpenSpiel game, else ``None``.
        exact_greedy_return: the same for its mode action at every information state.
        train_seconds: wall time of the training.
    """

    seed: int
    frames: int
    returns: list[float]
    seats: list[int]
    exact_return: float | None
    exact_greedy_return: float | None
    train_seconds: float


def summarize_runs(
    config: BestResponseConfig,
    runs: Sequence[BestResponseRun],
    target: Mapping[str, Any],
    confidence: float = 0.95,
    exact: float | None = None,
) -> dict[str, Any]:
    """The report's block of one measurement.

    ``value`` is the mean over runs of each run's mean return against the target; with one run its
    interval is the episodes' t-interval, with several the t-interval over the runs' means.
    ``exact_return`` is the same over the runs' exact returns; ``exploitability`` the target's
    exact value (``exact``) and ``gap`` how far the best responses fall short of it; ``algorithm``
    the settings changed from the recipe's for the best responses.
    """
    means = [float(np.mean(r.returns)) for r in runs]
    if len(runs) == 1:
        value = summarize_values(runs[0].returns, confidence).to_dict()
    else:
        value = summarize_values(means, confidence).to_dict()
        value["over"] = "runs"
    exact_returns = [r.exact_return for r in runs if r.exact_return is not None]
    out: dict[str, Any] = {
        "target": dict(target),
        "frames": config.frames,
        "algorithm": dict(config.algorithm),
        "value": value,
        "runs": [
            {
                "seed": r.seed,
                "frames": r.frames,
                "train_seconds": r.train_seconds,
                "episode_return": summarize_values(r.returns, confidence).to_dict(),
                "seat_returns": [
                    float(np.mean([v for v, s in zip(r.returns, r.seats) if s == seat])) if seat in r.seats else None
                    for seat in (0, 1)
                ],
                "exact_return": r.exact_return,
                "exact_greedy_return": r.exact_greedy_return,
            }
            for r in runs
        ],
        "exact_return": float(np.mean(exact_returns)) if exact_returns else None,
        "exploitability": exact,
        "gap": None,
    }
    if exact is not None and exact_returns:
        out["gap"] = exact - out["exact_return"]
    if exact is not None and value["mean"] is not None:
        out["sampled_gap"] = exact - value["mean"]
    return out


def best_response_logs(report: Mapping[str, Any]) -> dict[str, float]:
    """``eval/best_response/<name>/{value,value_ci_low,value_ci_high,exact_return,gap}`` of a report."""
    logs: dict[str, float] = {}
    for name, block in report.get("best_response", {}).items():
        prefix = f"eval/best_response/{name}"
        for key, value in (
            ("value", block["value"]["mean"]),
            ("value_ci_low", block["value"]["ci_low"]),
            ("value_ci_high", block["value"]["ci_high"]),
            ("exact_return", block.get("exact_return")),
            ("gap", block.get("gap")),
        ):
            if value is not None:
                logs[f"{prefix}/{key}"] = float(value)
    return logs
