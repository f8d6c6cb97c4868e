"""The evaluation report: a versioned JSON document, its loader and its Markdown summary table.

A report (schema ``report.schema.json`` beside this module, `SCHEMA_VERSION`) holds, per
scenario, the summary of every binding ([`summarize_episodes`][lightmarl.evaluation.statistics.summarize_episodes]),
the per-episode data it was computed from, and for head-to-head scenarios the payoff matrix and
ratings ([`summarize_games`][lightmarl.evaluation.head_to_head.summarize_games]). Beside it, ``marl_eval``
repeats the per-episode returns and lengths (and the win rate) in the raw-data layout of
marl-eval (Gorsane et al. 2022), ``{env: {scenario: {binding: {run: {"step_0": {...},
"absolute_metrics": {...}}}}}}``, so its aggregation and plotting tools read the file as it is.

Examples:
    >>> from lightmarl.evaluation.statistics import ScenarioEpisodes
    >>> episodes = ScenarioEpisodes(returns={"main": [1.0, 2.0, 3.0]}, lengths={"main": [25, 25, 25]})
    >>> report = build_report({"spread": episodes}, env_name="simple_spread_v3")
    >>> report["marl_eval"]["simple_spread_v3"]["spread"]["main"]["seed_0"]["step_0"]["episode_return"]
    [1.0, 2.0, 3.0]
    >>> print(markdown_summary(report).splitlines()[2])
    | spread | main | 2.00 [-0.48, 4.48] | 25.0 | – | 3 |
"""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import json
import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from lightmarl.evaluation.head_to_head import Game, summarize_games
from lightmarl.evaluation.statistics import (
    BOOTSTRAP_RESAMPLES,
    IntervalMethod,
    ScenarioEpisodes,
    summarize_episodes,
)

#: version of the report layout; raised when a field is removed or changes meaning.
SCHEMA_VERSION = 2
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
#: step key of the one evaluation a report holds, in the marl-eval layout.
MARL_EVAL_STEP = "step_0"

Report = dict[str, Any]


@cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema of `SCHEMA_VERSION` reports (shipped as ``report.schema.json``)."""
    return json.loads(SCHEMA_PATH.read_text())


def _generator() -> str:
    try:
        return f"lightmarl {importlib.metadata.version('lightmarl')}"
    except importlib.metadata.PackageNotFoundError:
        return "lightmarl"


def _json_list(values: Sequence[float] | np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else v for v in np.asarray(values, dtype=np.float64).reshape(-1).tolist()]


def _episodes_dict(episodes: ScenarioEpisodes, binding: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "episode_return": _json_list(episodes.returns[binding]),
        "episode_length": _json_list(episodes.lengths[binding]),
    }
    if episodes.outcomes and binding in episodes.outcomes:
        out["outcomes"] = [str(o) for o in episodes.outcomes[binding]]
    if episodes.seats and binding in episodes.seats:
        out["seats"] = [str(s) for s in episodes.seats[binding]]
    info = (episodes.info or {}).get(binding)
    if info:
        out["info"] = {}
        for key, values in info.items():
            try:
                out["info"][key] = _json_list(values)
            except (TypeError, ValueError):
                continue  # non-numeric fields are not summarised either
    return out


def _marl_eval_metrics(summary: Mapping[str, Any], episodes: Mapping[str, Any]) -> dict[str, list[float]]:
    metrics = {"episode_return": episodes["episode_return"], "episode_length": episodes["episode_length"]}
    outcomes = summary["outcomes"]
    if outcomes is not None and outcomes["n"] > 0:
        # marl-eval takes a rate computed over all evaluation episodes as a one-element list.
        metrics["win_rate"] = [outcomes["win"]["rate"]]
    return metrics


def build_report(
    scenarios: Mapping[str, ScenarioEpisodes],
    env_name: str,
    head_to_head_games: Mapping[str, Sequence[Game]] | None = None,
    run: str = "seed_0",
    step_count: int = 0,
    confidence: float = 0.95,
    interval: IntervalMethod = "t",
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    metadata: Mapping[str, Any] | None = None,
    setups: Mapping[str, Mapping[str, Any]] | None = None,
    teams: Mapping[str, Mapping[str, Any]] | None = None,
) -> Report:
    """Summarise every scenario into a report (a plain, JSON-ready dict).

    Args:
        scenarios: scenario name -> its per-episode results (empty in a report that holds only
            exploitability or best responses, added to it afterwards).
        env_name: the environment (marl-eval's ``environment_name``).
        head_to_head_games: scenario name -> its games ``(home, away, home's result)``, for
            head-to-head scenarios.
        run: name of the evaluated run, e.g. ``seed_<training seed>`` (marl-eval's run key).
        step_count: env frames the policies were trained for (marl-eval's ``step_count``).
        confidence: nominal coverage of every interval.
        interval: ``"t"`` or ``"bootstrap"`` for the intervals of means (see
            [`lightmarl.evaluation.statistics`][lightmarl.evaluation.statistics]).
        seed: bootstrap seed.
        resamples: bootstrap resamples.
        metadata: free-form context stored as is (recipe, checkpoint, commit).
        setups: scenario name -> how it was played (kind, maps, episodes, seed, ...), stored as is.
        teams: scenario name -> its team block (replace-one-agent scenarios:
            `lightmarl.evaluation.suite.team_summary`), stored as is.
    """
    for what, given in (("head_to_head_games", head_to_head_games), ("setups", setups), ("teams", teams)):
        unknown = sorted(set(given or {}) - set(scenarios))
        if unknown:
            raise ValueError(f"{what}: scenarios {unknown} are not in scenarios {sorted(scenarios)}")
    body: dict[str, Any] = {}
    marl_eval: dict[str, Any] = {}
    for name, episodes in scenarios.items():
        summaries = summarize_episodes(episodes, confidence, interval, seed, resamples)
        games = (head_to_head_games or {}).get(name)
        scenario: dict[str, Any] = {
            "bindings": {binding: summary.to_dict() for binding, summary in summaries.items()},
            "episodes": {binding: _episodes_dict(episodes, binding) for binding in episodes.bindings},
            "head_to_head": None,
            "team": None if name not in (teams or {}) else dict((teams or {})[name]),
        }
        if name in (setups or {}):
            scenario["setup"] = dict((setups or {})[name])
        if games is not None:
            scenario["head_to_head"] = {
                **summarize_games(games).to_dict(),
                "results": [[home, away, result] for home, away, result in games],
            }
        body[name] = scenario
        marl_eval[name] = {
            binding: _marl_eval_metrics(scenario["bindings"][binding], scenario["episodes"][binding])
            for binding in episodes.bindings
        }
    # marl-eval needs one metric set per environment: keep the metrics every binding has.
    metric_sets = [set(metrics) for by_binding in marl_eval.values() for metrics in by_binding.values()]
    common = set.intersection(*metric_sets) if metric_sets else set()
    for by_binding in marl_eval.values():
        for binding, metrics in by_binding.items():
            kept = {key: values for key, values in metrics.items() if key in common}
            by_binding[binding] = {
                run: {
                    MARL_EVAL_STEP: {"step_count": int(step_count), **kept},
                    # One evaluation, so the "absolute" metrics are the same episodes (marl-eval
                    # asks for 10x the episodes of a step; play more episodes for that).
                    "absolute_metrics": dict(kept),
                }
            }
    report: Report = {
        "schema_version": SCHEMA_VERSION,
        "generator": _generator(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "env_name": env_name,
        "run": run,
        "step_count": int(step_count),
        "statistics": {
            "confidence": confidence,
            "interval": interval,
            "bootstrap_seed": seed,
            "bootstrap_resamples": resamples,
        },
        "scenarios": body,
        "marl_eval": {env_name: marl_eval},
    }
    if metadata:
        report["metadata"] = dict(metadata)
    return report


def validate_report(report: Mapping[str, Any]) -> None:
    """Check ``report`` against `report_schema`; raise ``ValueError`` naming the first bad field.

    Needs the ``jsonschema`` package (``pip install 'lightmarl[test]'``).
    """
    if importlib.util.find_spec("jsonschema") is None:
        raise ImportError("validate_report needs jsonschema: pip install 'lightmarl[test]' (or jsonschema)")
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(report_schema()).iter_errors(report))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise ValueError(f"evaluation report: {where}: {error.message}")


def write_report(report: Mapping[str, Any], path: str | Path) -> Path:
    """Write ``report`` as indented JSON to ``path`` (parent folders are created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # allow_nan=False: NaN is not JSON; summaries already write undefined statistics as null.
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    return path


def load_report(path: str | Path) -> Report:
    """Read a report written by [`write_report`][lightmarl.evaluation.report.write_report], checking its version (and schema, with jsonschema)."""
    path = Path(path)
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable evaluation report ({err})") from None
    version = report.get("schema_version") if isinstance(report, dict) else None
    if version != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {version!r}; this lightmarl reads version {SCHEMA_VERSION}")
    if importlib.util.find_spec("jsonschema") is not None:
        try:
            validate_report(report)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
    return report


def merge_marl_eval(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One marl-eval raw-data dict from several reports, e.g. one per training seed (each its own ``run``).

    marl-eval aggregates over runs, so write this to a JSON file for its tools. Two reports
    that hold the same environment, scenario, binding and run are an error.
    """
    merged: dict[str, Any] = {}
    for report in reports:
        for env, tasks in report["marl_eval"].items():
            for task, algorithms in tasks.items():
                for algorithm, runs in algorithms.items():
                    target = merged.setdefault(env, {}).setdefault(task, {}).setdefault(algorithm, {})
                    clash = sorted(set(runs) & set(target))
                    if clash:
                        raise ValueError(
                            f"merge_marl_eval: run(s) {clash} of {env}/{task}/{algorithm} appear in two reports; "
                            "give each report its own run= (e.g. seed_<training seed>)"
                        )
                    target.update(runs)
    return merged


def scenario_episodes(report: Mapping[str, Any], scenario: str) -> ScenarioEpisodes:
    """The per-episode results of ``scenario`` in ``report``, as they were given to [`build_report`][lightmarl.evaluation.report.build_report]."""
    if scenario not in report["scenarios"]:
        raise ValueError(f"scenario {scenario!r} is not in the report; it has {sorted(report['scenarios'])}")
    data = report["scenarios"][scenario]["episodes"]

    def column(name: str) -> dict[str, Any] | None:
        found = {binding: episodes[name] for binding, episodes in data.items() if name in episodes}
        return found or None

    info = column("info")
    return ScenarioEpisodes(
        returns=column("episode_return") or {},
        lengths=column("episode_length") or {},
        outcomes=column("outcomes"),
        seats=column("seats"),
        info=None
        if info is None
        else {
            binding: {key: [math.nan if v is None else v for v in values] for key, values in fields.items()}
            for binding, fields in info.items()
        },
    )


def _number(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown_summary(report: Mapping[str, Any], digits: int = 2) -> str:
    """A Markdown table, one row per scenario and binding, then each head-to-head payoff matrix.

    Columns: mean return with its interval, mean episode length, win / draw / loss rates (``–``
    where the scenario has no winner) and episodes. Env info fields, where reported, get a
    table of their own.
    """
    level = round(100 * report["statistics"]["confidence"])
    lines = (
        [
            f"| scenario | binding | return (mean [{level}% CI]) | length | W / D / L | episodes |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        if report["scenarios"]
        else []  # a report of exploitability or best responses alone
    )
    for name, scenario in report["scenarios"].items():
        for binding, summary in scenario["bindings"].items():
            ret, length, outcomes = summary["episode_return"], summary["episode_length"], summary["outcomes"]
            interval = f"[{_number(ret['ci_low'], digits)}, {_number(ret['ci_high'], digits)}]"
            wdl = (
                "–"
                if outcomes is None
                else " / ".join(_number(outcomes[key]["rate"], digits) for key in ("win", "draw", "loss"))
            )
            lines.append(
                f"| {name} | {binding} | {_number(ret['mean'], digits)} {interval} | "
                f"{_number(length['mean'], 1)} | {wdl} | {ret['n']} |"
            )
    for name, scenario in report["scenarios"].items():
        h2h = scenario["head_to_head"]
        if h2h is None:
            continue
        players = h2h["players"]
        lines += [
            "",
            f"Head-to-head `{name}`: row player's score against column player (draw = ½), Elo.",
            "",
            "| | " + " | ".join(players) + " | Elo |",
            "| --- " * (len(players) + 2) + "|",
        ]
        for i, player in enumerate(players):
            cells = [_number(value, digits + 1) for value in h2h["score"][i]]
            lines.append(f"| {player} | " + " | ".join(cells) + f" | {h2h['elo'][player]:.0f} |")
    if report.get("exploitability"):
        lines += ["", "| binding | game | exploitability | NashConv |", "| --- | --- | --- | --- |"]
        for binding, value in report["exploitability"].items():
            shown = f"{binding} ({value['policy']})" if value.get("policy") else binding
            lines.append(
                f"| {shown} | {value['game']} | {_number(value['exploitability'], digits + 2)} | "
                f"{_number(value['nash_conv'], digits + 2)} |"
            )
    if report.get("best_response"):
        lines += [
            "",
            "Approximate exploitability: the return of best responses trained against the target "
            "(exact values where the game allows).",
            "",
            "| measurement | target | frames | runs | return of the best response | exact return | exploitability |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, block in report["best_response"].items():
            value = block["value"]
            target = block["target"]
            lines.append(
                f"| {name} | {target.get('binding')} ({target.get('policy')}) | {block['frames']} | "
                f"{len(block['runs'])} | {_number(value['mean'], digits + 2)} "
                f"[{_number(value['ci_low'], digits + 2)}, {_number(value['ci_high'], digits + 2)}] | "
                f"{_number(block.get('exact_return'), digits + 2)} | {_number(block.get('exploitability'), digits + 2)} |"
            )
    info_rows = [
        (name, binding, field_name, value)
        for name, scenario in report["scenarios"].items()
        for binding, summary in scenario["bindings"].items()
        for field_name, value in summary["info"].items()
    ]
    if info_rows:
        lines += [
            "",
            f"Env info fields: mean [{level}% CI] over the episodes that reported the field.",
            "",
            "| scenario | binding | field | mean [CI] | episodes |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, binding, field_name, value in info_rows:
            interval = f"[{_number(value['ci_low'], digits)}, {_number(value['ci_high'], digits)}]"
            lines.append(
                f"| {name} | {binding} | {field_name} | {_number(value['mean'], digits)} {interval} | {value['n']} |"
            )
    changed = {name: s["team"] for name, s in report["scenarios"].items() if s["team"] and s["team"]["change"]}
    if changed:
        lines += [
            "",
            f"Replace one agent: the team's return (mean of its agents) and its change against the unchanged "
            f"team (Welch {level}% CI).",
            "",
            "| scenario | replaced | team return | change [CI] | episodes |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, team in changed.items():
            change = team["change"]
            interval = f"[{_number(change['ci_low'], digits)}, {_number(change['ci_high'], digits)}]"
            lines.append(
                f"| {name} | {team['replaced']} | {_number(team['episode_return']['mean'], digits)} | "
                f"{_number(change['difference'], digits)} {interval} | {change['n']} |"
            )
    return "\n".join(lines).lstrip("\n") + "\n"  # no blank first line where there is no scenario table
