"""AlphaStar's three roles vs PFSP-only vs naive self-play, scored by how exploitable each run's main player is.

For a game, per seed, three recipes train to the same number of frames (``--frames``, default the
recipes' ``max_frames``; ``trainer.max_time`` lifted), as one sweep through
``benchmarks/connect_four_league_compare.py``'s ``run_fits`` (each run its own ``lightmarl fit``
process with one thread in ``<workdir>/runs/<method>/seed_<n>/``, a checkpoint every epoch; the same
``--workdir`` again skips finished runs and resumes an interrupted one):

- ``league``: a ``MainPlayer``, a ``MainExploiter`` and a ``LeagueExploiter``;
- ``pfsp``: one ``SelfPlayPlayer`` with ``pfsp_prob: 1`` (PFSP over its own snapshots);
- ``selfplay``: one ``SelfPlayPlayer`` with ``pfsp_prob: 0`` (naive self-play).

The three recipes of a game differ only in their league section. Each run's main player is its
binding ``main`` with its live weights at the last checkpoint: what an export ships. It is scored

- on ``connect_four`` (``recipes/league_connect_four_plain{,_pfsp,_selfplay}.yaml``) by
  **approximate exploitability**: ``lightmarl evaluate`` with one ``evaluation.best_response``
  entry (target ``main``, ``mixture: false``) trains a fresh best response (the recipe's network
  and PPO settings, ``--br-frames`` frames) against the frozen main player, then plays
  ``--br-episodes`` episodes against it (seat drawn per episode, both sampling). The table shows
  the best response's score (win 1, draw ½: ``(return + 1) / 2``); 0.5 is a main player the best
  response cannot beat. Beside it, from the connect-four comparison's own code
  (``score_run``, ``head_to_head``): the main player (greedy) against the heuristic and a depth-3
  search, head to head within each seed (the opponent sampling), and each epoch checkpoint against
  the heuristic (the curve);
- on ``leduc_poker`` (``recipes/league_leduc_poker_{roles,pfsp,selfplay}.yaml``) by **exact
  exploitability** (OpenSpiel's NashConv / 2) of the live binding, which the recipes'
  ``OpenSpielExploitability`` callback logs every 25 iterations and after the last (the curve and
  the final value); head to head as each main player's exact expected return against every other
  (both seats); and, for the three roles, the main exploiter's exact expected return against the
  main player at every epoch checkpoint beside the main player's exploitability there (the share
  of a best response's gain the exploiter finds). ``--br-frames`` above 0 adds the approximate
  measure as on connect four.

Seeds are trained and scored one after the other; after each seed the results written so far go
to ``benchmarks/results/league_robustness_<game>*.json`` (``results.write_result``; per method the
per-seed values, their mean and 95% t interval, :func:`lightmarl.experiments.statistics.seed_mean`).
A seed's scores are kept in ``<workdir>/scores/seed_<n>.json`` and reused when the same settings
come again, so runs split over several processes (``--seeds 0 1`` here, ``--seeds 2`` there, one
``--workdir``) are gathered by a last call with all the seeds::

    python benchmarks/league_robustness.py --game connect_four --seeds 0 1 2 --br-frames 300000 --workdir W
    python benchmarks/league_robustness.py --game leduc_poker --seeds 0 1 2 --frames 1000000 --workdir W

``--add-to`` keeps the other seeds of the result already written (same settings, read from its main and
roles files) and adds the seeds given: ``--seeds 1 2 --add-to`` after a run of seed 0 elsewhere; the
command written is the one that runs every seed. The files keep about ``ROLE_CURVE_POINTS`` points of
each logged curve (a run logs one per iteration).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from itertools import combinations, permutations
from pathlib import Path
from typing import Any

import yaml
from connect_four_league_compare import COLUMNS as MATCH_COLUMNS
from connect_four_league_compare import (
    EPOCH_CHECKPOINTS,
    MAIN_BINDING,
    METHOD_LABELS,
    METHODS,
    checkpoints_by_frames,
    curve_table,
    head_to_head,
    result_rows,
    run_fits,
    score_run,
)
from league_connect_four import load_policy
from poker_league import recorded_command
from results import machine, write_result

from lightmarl.errors import ConfigError
from lightmarl.experiments.runner import lightmarl_command, metric_rows
from lightmarl.experiments.spec import parse_override_args
from lightmarl.experiments.statistics import seed_mean

ROOT = Path(__file__).resolve().parents[1]
#: each game's recipe per method (under ``recipes/``).
RECIPES = {
    "connect_four": {
        "league": "league_connect_four_plain.yaml",
        "pfsp": "league_connect_four_plain_pfsp.yaml",
        "selfplay": "league_connect_four_plain_selfplay.yaml",
    },
    "leduc_poker": {
        "league": "league_leduc_poker_roles.yaml",
        "pfsp": "league_leduc_poker_pfsp.yaml",
        "selfplay": "league_leduc_poker_selfplay.yaml",
    },
}
GAMES = tuple(RECIPES)
#: the binding of the three-role recipes' main exploiter.
MAIN_EXPLOITER = "main_exploiter"
#: the three roles' league players (``<binding>_default_0``), the main player's first.
LEAGUE_PLAYERS = ("main_default_0", "main_exploiter_default_0", "league_exploiter_default_0")
MAIN_PLAYER = LEAGUE_PLAYERS[0]
#: the logged metrics of each league player kept as curves (``league/<player>/<name>``).
ROLE_METRICS = ("win_rate", "agent_steps", "resets", "historical_players")
#: what a run keeps of its league players (written to the roles file).
ROLE_KEYS = ("roles", "records_against_main")
#: points kept of each logged curve in the files (a run logs one per iteration)
ROLE_CURVE_POINTS = 50
#: the exploitability the Leduc recipes' callback logs for the main binding.
EXPLOITABILITY = f"league/{MAIN_BINDING}/exploitability"


def recipes_of(game: str) -> dict[str, Path]:
    return {m: ROOT / "recipes" / name for m, name in RECIPES[game].items()}


def callbacks_of(game: str, measure_every: int) -> list[str]:
    """The ``trainer.callbacks`` of every run: a checkpoint every epoch and, on Leduc, the live main binding's
    exact exploitability every ``measure_every`` iterations (the list replaces the recipe's)."""
    if game != "leduc_poker":
        return []
    measured = (
        "{class_path: lightmarl.training.exploitability.OpenSpielExploitability, "
        f"init_args: {{binding: {MAIN_BINDING}, every_n_iterations: {measure_every}, policy: live}}}}"
    )
    return [f"--trainer.callbacks=[{EPOCH_CHECKPOINTS[1:-1]}, {measured}]"]


def per_seed_cell(values: list[float]) -> str:
    return " / ".join(f"{v:.3f}" for v in values)


def interval_cell(values: list[float]) -> str | None:
    ci = seed_mean(values)["ci95"]
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else None


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


# --- approximate exploitability -------------------------------------------------------------------


def best_response(recipe: Path, run: str | Path, frames: int, episodes: int, seed: int) -> dict[str, Any]:
    """A fresh best response trained against the run's live main player (``lightmarl evaluate``); its report block.

    The report lands in ``<run>/best_response_<frames>/report.json`` and is read back when it holds the same
    measurement (frames, episodes, seed). Returns the block's value (mean return
    over the episodes and its 95% t interval), the score ``(return + 1) / 2`` with its interval, the
    training seconds and, in an OpenSpiel game, the exact return and the main player's exact
    exploitability.
    """
    out = Path(run) / f"best_response_{frames}"
    entry = f"[{{name: main, target: {MAIN_BINDING}, mixture: false, frames: {frames}, episodes: {episodes}, seed: {seed}}}]"
    command = [
        *lightmarl_command(), "evaluate", "--config", str(recipe),
        f"--ckpt_path={Path(run) / 'checkpoints' / 'last.ckpt'}",
        f"--out={out}", "--trainer.logger=false", "--trainer.enable_progress_bar=false",
        # The best response alone: the recipe's own scenarios are not played.
        "--evaluation.bindings=[]", "--evaluation.head_to_head=[]", "--evaluation.scenarios=[]",
        f"--evaluation.best_response={entry}",
    ]  # fmt: skip
    block = read_best_response(out, frames, episodes, seed)
    if block is None:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{shlex.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
        block = json.loads((out / "report.json").read_text())["best_response"]["main"]
    value = block["value"]
    (trained,) = block["runs"]
    return {
        "return": value["mean"],
        "return_ci95": [value["ci_low"], value["ci_high"]],
        "score": (value["mean"] + 1) / 2,
        "score_ci95": [(value["ci_low"] + 1) / 2, (value["ci_high"] + 1) / 2],
        "episodes": value["n"],
        "frames": trained["frames"],
        "train_s": trained["train_seconds"],
        "exact_return": block.get("exact_return"),
        "exploitability": block.get("exploitability"),
    }


def read_best_response(out: Path, frames: int, episodes: int, seed: int) -> dict[str, Any] | None:
    """The ``best_response.main`` block of ``<out>/report.json`` if it measured ``frames``, ``episodes`` and ``seed``."""
    path = out / "report.json"
    if not path.is_file():
        return None
    block = json.loads(path.read_text()).get("best_response", {}).get("main")
    if not block or block["frames"] != frames or block["value"]["n"] != episodes or block["runs"][0]["seed"] != seed:
        return None
    return block


def role_curves(run: str | Path) -> dict[str, dict[str, list[list[float]]]]:
    """Each league player's logged ``win_rate``, ``agent_steps``, ``resets``, ``historical_players`` and
    ``jobs/<branch>`` (the opponent branches it drew) as ``{player: {name: [[frames, value], ...]}}``, and the
    league's snapshot count under ``league``."""
    curves: dict[str, dict[str, list[list[float]]]] = {}
    for row in metric_rows(Path(run)):
        frames = row.get("counters/frames")
        if frames is None:
            continue
        for key, value in row.items():
            parts = key.split("/")
            if key == "league/historical_players":
                curves.setdefault("league", {}).setdefault("historical_players", []).append([frames, value])
            elif parts[0] == "league" and len(parts) >= 3 and (parts[2] in ROLE_METRICS or parts[2] == "jobs"):
                curves.setdefault(parts[1], {}).setdefault("/".join(parts[2:]), []).append([frames, value])
    return curves


def records_against_main(run: str | Path) -> dict[str, list[float]]:
    """From the run's last checkpoint: every player's decayed ``[wins, draws, losses, games]`` against the live
    main player (live players and snapshots, ``<player>_<agent step>``), the records its opponent choice reads
    (e.g. a ``MainExploiter``'s ``main_win_rate`` test, a ``MainPlayer``'s verification)."""
    import torch

    from lightmarl.training.league import CHECKPOINT_KEY

    checkpoint = torch.load(Path(run) / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    records = checkpoint[CHECKPOINT_KEY]["matchmaker"]["manager"]["payoff"]["records"]
    return {home: counts for home, away, *counts in records if away == MAIN_PLAYER}


# --- Leduc: exact measures ------------------------------------------------------------------------


def spiel_of(recipe: Path) -> Any:
    """The OpenSpiel game of an OpenSpiel recipe, as its exploitability callback measures it."""
    from lightmarl.evaluation.exploitability import openspiel_game

    kwargs = yaml.safe_load(recipe.read_text())["model"]["env"]["env_kwargs"]
    return openspiel_game(kwargs["game"], kwargs.get("parameters"), kwargs.get("tensor", "information_state"))


def table_of(spiel: Any, checkpoint: str | Path, binding: str = MAIN_BINDING) -> Any:
    """A checkpoint's binding as an OpenSpiel ``TabularPolicy``."""
    from lightmarl.evaluation.exploitability import tabular_policy

    policy = load_policy(checkpoint, binding)
    return tabular_policy(spiel, policy, policy.group.name)


def exploitability_curve(run: str | Path) -> list[list[float]]:
    """The logged exact exploitability of the main binding as ``[[frames, value], ...]``, each measurement once
    (told apart by the run second it was taken at: a run logged before measurements were one row each
    repeats the last one at every iteration in between)."""
    curve: list[list[float]] = []
    taken: set[float] = set()
    for row in metric_rows(Path(run)):
        value, frames, at = row.get(EXPLOITABILITY), row.get("counters/frames"), row.get(f"{EXPLOITABILITY}_at_s")
        if value is None or frames is None or at in taken or (curve and frames == curve[-1][0]):
            continue
        if at is not None:
            taken.add(at)
        curve.append([frames, value])
    if not curve:
        raise RuntimeError(f"{run}: no {EXPLOITABILITY} was logged")
    return curve


def exploiter_curve(spiel: Any, run: str | Path) -> list[list[float]]:
    """Per epoch checkpoint of a three-role run: ``[frames, main's exploitability, the main exploiter's
    exact expected return against main]`` (a best response would earn the exploitability)."""
    from lightmarl.evaluation.exploitability import expected_returns, measure

    rows = []
    for frames, path in checkpoints_by_frames(run):
        main = table_of(spiel, path)
        exploiter = table_of(spiel, path, MAIN_EXPLOITER)
        rows.append([frames, measure(spiel, main).exploitability, float(expected_returns(spiel, exploiter, [main])[0])])
    return rows


def exact_head_to_head(spiel: Any, runs: dict[str, str]) -> list[dict[str, Any]]:
    """Every pair of methods' main players: each one's exact expected return against the other (both seats)."""
    from lightmarl.evaluation.exploitability import expected_returns

    tables = {m: table_of(spiel, Path(run) / "checkpoints" / "last.ckpt") for m, run in runs.items()}
    out = []
    for first, second in combinations(runs, 2):
        value = float(expected_returns(spiel, tables[first], [tables[second]])[0])
        out.append({"player": first, "opponent": second, "expected_return": value})
        out.append({"player": second, "opponent": first, "expected_return": -value})  # zero-sum
    return out


# --- one seed -------------------------------------------------------------------------------------


def score_seed(game: str, seed: int, fits: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """Score every method's run of one seed (the runs' ``run_fits`` entries): ``{"runs": {method: ...}, "head_to_head": [...]}``."""
    recipes = recipes_of(game)
    runs: dict[str, dict[str, Any]] = {}
    for fit in fits:
        method = fit["method"]
        run = {k: v for k, v in fit.items() if k not in ("method", "seed", "run")}
        run["roles"] = role_curves(fit["run"])
        if settings["br_frames"]:
            run["best_response"] = {
                str(budget): best_response(
                    recipes[method], fit["run"], budget, settings["br_episodes"], settings["br_seed"]
                )
                for budget in settings["br_frames"]
            }
        runs[method] = run
    paths = {f["method"]: f["run"] for f in fits}
    if game == "connect_four":
        for fit in fits:
            scored = score_run(
                (fit["method"], seed, fit["run"], settings["games"], settings["curve_games"], 3, 2, 1, 20_000)
            )
            runs[fit["method"]].update({k: scored[k] for k in ("heuristic", "search", "curve")})
        matches = [
            {k: v for k, v in head_to_head((seed, a, paths[a], b, paths[b], settings["games"], 20_000)).items() if k != "seed"}
            for a, b in permutations(paths, 2)
        ]  # fmt: skip
        return {"runs": runs, "head_to_head": matches}
    spiel = spiel_of(recipes["league"])
    for fit in fits:
        curve = exploitability_curve(fit["run"])
        run = runs[fit["method"]]
        run.update({"exploitability_curve": curve, "final": curve[-1][1], "lowest": min(v for _, v in curve)})
        if fit["method"] == "league":
            run["exploiter_curve"] = exploiter_curve(spiel, fit["run"])
    return {"runs": runs, "head_to_head": exact_head_to_head(spiel, paths)}


def scored_seed(
    game: str, seed: int, fits: list[dict[str, Any]], settings: dict[str, Any], workdir: Path
) -> dict[str, Any]:
    """:func:`score_seed`, kept in ``<workdir>/scores/seed_<n>.json`` and read back while the settings are the same."""
    path = workdir / "scores" / f"seed_{seed}.json"
    if path.is_file():
        kept = json.loads(path.read_text())
        if kept["settings"] == settings:
            return kept["scores"]
    scores = score_seed(game, seed, fits, settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": settings, "scores": scores}, indent=1))
    return scores


def earlier_seeds(game: str, settings: dict[str, Any], directory: Path, skip: list[int]) -> dict[str, dict[str, Any]]:
    """``--add-to``: the seeds of the game's result in ``directory`` (its main file and its roles file)
    other than ``skip``, refused where they were measured with other settings."""
    path = directory / f"league_robustness_{game}.json"
    if not path.is_file():
        raise SystemExit(f"--add-to: no earlier result {path}")
    result = json.loads(path.read_text())
    theirs = {k: result["extra"].get(k) for k in settings}
    if theirs != settings:
        raise SystemExit(f"--add-to: {path} was measured with other settings:\n  {theirs}\nnot\n  {settings}")
    roles = json.loads((directory / f"league_robustness_{game}_roles.json").read_text())["per_seed"]
    kept = {}
    for seed, scores in result["per_seed"].items():
        if int(seed) in skip:
            continue
        kept[seed] = scores
        scores["runs"]["league"].update(roles[seed]["league"])
        for run in scores["runs"].values():
            if "exploitability_curve" in run:  # a result written while a measurement repeated at every iteration
                curve = run["exploitability_curve"]
                run["exploitability_curve"] = [p for i, p in enumerate(curve) if i == 0 or p[1] != curve[i - 1][1]]
    return kept


def reproducing_command(given: list[str], seeds: list[int]) -> str:
    """The command that measures the result from nothing: ``given`` with ``--seeds`` naming ``seeds`` and
    without ``--add-to``, ``--out-dir`` and ``--workdir`` (where it ran, not what it measured)."""
    words: list[str] = []
    skip = False
    for word in given:
        name = word.partition("=")[0]
        if name in ("--seeds", "--out-dir", "--workdir", "--add-to"):
            skip = name != "--add-to" and "=" not in word
            if name == "--seeds":
                words += ["--seeds", *map(str, seeds)]
            continue
        if skip and not word.startswith("-"):
            continue
        skip = False
        words.append(word)
    return recorded_command("benchmarks/league_robustness.py", words)


# --- tables ---------------------------------------------------------------------------------------


def common_methods(per_seed: dict[str, dict[str, Any]]) -> list[str]:
    return [m for m in METHODS if all(m in v["runs"] for v in per_seed.values())]


def run_columns(per_seed: dict[str, dict[str, Any]], method: str) -> list[Any]:
    """The cells every method row ends with: main player's agent steps, frames and training seconds (means)."""
    runs = [v["runs"][method] for v in per_seed.values()]
    return [
        mean([r["agent_steps"] or 0 for r in runs]),
        mean([r["frames"] for r in runs]),
        mean([r["train_s"] for r in runs]),
    ]


RUN_COLUMNS: list[Any] = [
    {"name": "main player's agent steps", "format": ",.0f"},
    {"name": "frames", "format": ",.0f"},
    {"name": "train s", "format": ".0f"},
]
#: the approximate-exploitability table: the best response's score against each method's main player.
BEST_RESPONSE_COLUMNS: list[Any] = [
    "main player (live `main`, sampling)",
    {"name": "best-response frames", "format": ",.0f"},
    "best response's score, per seed",
    {"name": "mean", "format": ".3f"},
    "95% t interval over seeds",
    {"name": "best-response s", "format": ".0f"},
    *RUN_COLUMNS,
]


def best_response_rows(per_seed: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """Per best-response budget (largest first) and method: the best response's score against the main player."""
    methods = common_methods(per_seed)
    budgets = set.intersection(*(set(v["runs"][m]["best_response"]) for v in per_seed.values() for m in methods))
    rows = []
    for budget, method in ((b, m) for b in sorted(budgets, key=int, reverse=True) for m in methods):
        blocks = [v["runs"][method]["best_response"][budget] for v in per_seed.values()]
        scores = [b["score"] for b in blocks]
        rows.append(
            [
                METHOD_LABELS[method],
                int(budget),
                per_seed_cell(scores),
                mean(scores),
                interval_cell(scores),
                mean([b["train_s"] for b in blocks]),
                *run_columns(per_seed, method),
            ]
        )
    return rows


EXPLOITABILITY_COLUMNS: list[Any] = [
    "main player (live `main`)",
    "exact exploitability at the end, per seed",
    {"name": "mean", "format": ".3f"},
    "95% t interval over seeds",
    "lowest logged, per seed",
    *RUN_COLUMNS,
]


def exploitability_rows(per_seed: dict[str, dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for method in common_methods(per_seed):
        runs = [v["runs"][method] for v in per_seed.values()]
        finals = [r["final"] for r in runs]
        rows.append(
            [
                METHOD_LABELS[method],
                per_seed_cell(finals),
                mean(finals),
                interval_cell(finals),
                per_seed_cell([r["lowest"] for r in runs]),
                *run_columns(per_seed, method),
            ]
        )
    return rows


def exploitability_curve_table(per_seed: dict[str, dict[str, Any]]) -> tuple[list[Any], list[list[Any]]]:
    """Per method the mean over seeds of the exact exploitability at each logged frame count (every seed's)."""
    methods = common_methods(per_seed)
    curves = {
        m: [dict((f, v) for f, v in s["runs"][m]["exploitability_curve"]) for s in per_seed.values()] for m in methods
    }
    frames = sorted(set.intersection(*(set(c) for m in methods for c in curves[m]))) if methods else []
    columns: list[Any] = ["method", *({"name": f"{f:,.0f}", "format": ".3f"} for f in frames)]
    return columns, [[METHOD_LABELS[m], *(mean([c[f] for c in curves[m]]) for f in frames)] for m in methods]


EXACT_MATCH_COLUMNS: list[Any] = [
    "main player",
    "opponent's main player",
    "exact expected return, per seed",
    {"name": "mean", "format": ".3f"},
    "95% t interval over seeds",
]


def exact_match_rows(per_seed: dict[str, dict[str, Any]]) -> list[list[Any]]:
    rows = []
    methods = common_methods(per_seed)
    for first, second in permutations(methods, 2):
        values = [
            m["expected_return"]
            for v in per_seed.values()
            for m in v["head_to_head"]
            if m["player"] == first and m["opponent"] == second
        ]
        rows.append(
            [METHOD_LABELS[first], METHOD_LABELS[second], per_seed_cell(values), mean(values), interval_cell(values)]
        )
    return rows


EXPLOITER_COLUMNS: list[Any] = [
    "frames",
    "main player's exact exploitability, per seed",
    "main exploiter's exact return against it, per seed",
    {"name": "share of a best response's gain (mean)", "format": ".2f"},
]


def exploiter_rows(per_seed: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """At each epoch checkpoint every seed has: main's exploitability, the exploiter's return against main, their ratio."""
    curves = [{row[0]: row[1:] for row in v["runs"]["league"]["exploiter_curve"]} for v in per_seed.values()]
    rows = []
    for frames in sorted(set.intersection(*(set(c) for c in curves))):
        at = [c[frames] for c in curves]
        rows.append(
            [
                frames,
                per_seed_cell([a[0] for a in at]),
                per_seed_cell([a[1] for a in at]),
                mean([a[1] / a[0] for a in at]),
            ]
        )
    return rows


MATCH_NOTES = (
    "Main players (greedy) against the scripted opponents and each other (sampling), per seed; the runs as in "
    "the robustness table."
)
HEURISTIC_CURVE_NOTES = (
    "Mean over seeds of each main player (greedy) against the heuristic at each epoch checkpoint (the columns: "
    "training frames)."
)
EXPLOITABILITY_CURVE_NOTES = (
    "Mean over seeds of each main player's exact exploitability (live binding) at the logged frames."
)
EXACT_MATCH_NOTES = "Each main player's exact expected return (chips, both seats) against another method's main player of the same seed."
EXPLOITER_NOTES = (
    "Three roles: at each epoch checkpoint the main exploiter's exact expected return against the main player beside "
    "what a best response earns (main's exploitability)."
)
BEST_RESPONSE_NOTES = (
    "Approximate exploitability: a trained best response's score (return + 1) / 2 against each main player."
)
ROLE_NOTES = (
    "Three-role runs at their last checkpoint: agent steps, snapshots and resets as logged; the opponent branches "
    "each player's jobs were drawn from (counts); its payoff record against the live main player (decayed "
    "counts of the last games between the two, read from the checkpoint) and the snapshot of it that beats the live "
    "main player most often."
)
ROLE_COLUMNS: list[Any] = [
    "league player (three roles)",
    "agent steps, per seed",
    "snapshots, per seed",
    "resets, per seed",
    "opponent branches drawn (jobs), per seed",
    "decayed record against the live main player at the end (wins / draws / losses), per seed",
    "its snapshot that beats the live main player most (win rate), per seed",
]


def thinned(series: list[list[float]], most: int = ROLE_CURVE_POINTS) -> list[list[float]]:
    """At most about ``most`` evenly spaced points of a logged ``[[frames, value], ...]`` series, its last one kept."""
    if len(series) <= most:
        return series
    kept = series[:: math.ceil(len(series) / most)]
    return kept if kept[-1] == series[-1] else [*kept, series[-1]]


def thinned_curves(curves: dict[str, list[list[float]]]) -> dict[str, list[list[float]]]:
    """:func:`thinned` of each ``{name: [[frames, value], ...]}`` curve."""
    return {name: thinned(series) for name, series in curves.items()}


def role_rows(per_seed: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """Per league player of the three-role runs: its training share, snapshots, resets, the opponent branches it
    drew and its record against the live main player, each at the end of every seed's run."""
    runs = [v["runs"]["league"] for v in per_seed.values()]

    def last(curves: dict[str, list[list[float]]], name: str) -> float:
        return curves[name][-1][1] if curves.get(name) else 0.0

    def record(counts: list[float] | None) -> str:
        return f"{counts[0]:.1f} / {counts[1]:.1f} / {counts[2]:.1f}" if counts else "—"

    def best_snapshot(records: dict[str, list[float]], player: str) -> str:
        rates = {
            h: (w + d / 2) / g for h, (w, d, _, g) in records.items() if h.startswith(f"{player}_") and g > 0
        }  # a snapshot's id is its player's and its agent step
        if not rates:
            return "—"
        home = max(rates, key=lambda h: rates[h])
        return f"{home} ({rates[home]:.2f})"

    rows = []
    for player in LEAGUE_PLAYERS:
        curves = [r["roles"].get(player, {}) for r in runs]
        branches = [
            ", ".join(f"{n.split('/', 1)[1]} {last(c, n):.0f}" for n in sorted(c) if n.startswith("jobs/"))
            for c in curves
        ]
        rows.append(
            [
                player,
                " / ".join(f"{last(c, 'agent_steps'):,.0f}" for c in curves),
                " / ".join(f"{last(c, 'historical_players'):.0f}" for c in curves),
                " / ".join(f"{last(c, 'resets'):.0f}" for c in curves),
                " / ".join(branches),
                " | ".join(record(r.get("records_against_main", {}).get(player)) for r in runs),
                " | ".join(best_snapshot(r.get("records_against_main", {}), player) for r in runs),
            ]
        )
    return rows


# --- the benchmark --------------------------------------------------------------------------------


def write_tables(
    game: str,
    per_seed: dict[str, dict[str, Any]],
    command: str,
    notes: str,
    where: dict[str, Any],
    extra: dict[str, Any],
    out_dir: Path,
) -> list[Path]:
    """Every table of the game from the seeds scored so far; the files written."""
    name = f"league_robustness_{game}"
    written = []

    def add(
        suffix: str, columns: list[Any], rows: list[list[Any]], note: str, raw: dict[str, Any] | None = None
    ) -> None:
        written.append(
            write_result(
                f"{name}{suffix}", command=command, per_seed=raw, columns=columns, rows=rows, notes=note,
                directory=out_dir, measured_on=where, extra=extra,
            )
        )  # fmt: skip

    # The roles' curves and records go to the roles file only.
    scored = {
        s: {
            **v,
            "runs": {
                m: {k: thinned_curves(x) if k == "logged" else x for k, x in r.items() if k not in ROLE_KEYS}
                for m, r in v["runs"].items()
            },
        }
        for s, v in per_seed.items()
    }

    def per_run(*keys: str) -> dict[str, Any]:
        return {s: {m: {k: r[k] for k in keys} for m, r in v["runs"].items()} for s, v in per_seed.items()}

    if game == "connect_four":
        add("", BEST_RESPONSE_COLUMNS, best_response_rows(per_seed), notes, scored)
        label = "alpha-beta depth 3, 2 random opening moves"
        matches = {
            s: {"runs": runs, "head_to_head": per_seed[s]["head_to_head"]}
            for s, runs in per_run("heuristic", "search").items()
        }
        add("_matches", MATCH_COLUMNS, result_rows(per_seed, label), MATCH_NOTES, matches)
        add("_curves", *curve_table(per_seed), HEURISTIC_CURVE_NOTES, per_run("curve"))
    else:
        add("", EXPLOITABILITY_COLUMNS, exploitability_rows(per_seed), notes, scored)
        add(
            "_curves",
            *exploitability_curve_table(per_seed),
            EXPLOITABILITY_CURVE_NOTES,
            per_run("exploitability_curve"),
        )
        matches = {s: {"head_to_head": v["head_to_head"]} for s, v in per_seed.items()}
        add("_matches", EXACT_MATCH_COLUMNS, exact_match_rows(per_seed), EXACT_MATCH_NOTES, matches)
        exploiter = {
            s: {"league": {"exploiter_curve": v["runs"]["league"]["exploiter_curve"]}} for s, v in per_seed.items()
        }
        add("_exploiter", EXPLOITER_COLUMNS, exploiter_rows(per_seed), EXPLOITER_NOTES, exploiter)
        if all("best_response" in r for v in per_seed.values() for r in v["runs"].values()):
            add(
                "_best_response",
                BEST_RESPONSE_COLUMNS,
                best_response_rows(per_seed),
                BEST_RESPONSE_NOTES,
                per_run("best_response"),
            )
    roles = {
        s: {
            "league": {
                "roles": {p: thinned_curves(c) for p, c in v["runs"]["league"]["roles"].items()},
                "records_against_main": v["runs"]["league"].get("records_against_main"),
            }
        }
        for s, v in per_seed.items()
    }
    add("_roles", ROLE_COLUMNS, role_rows(per_seed), ROLE_NOTES, roles)
    return written


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", required=True, choices=GAMES)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=None, help="training frames of every run (default: the recipes')")
    parser.add_argument(
        "--br-frames",
        type=int,
        nargs="+",
        default=None,
        help="best-response frames, one best response per budget (0: none; default 300,000 on connect four, 0 on Leduc)",
    )
    parser.add_argument(
        "--br-episodes", type=int, default=1000, help="episodes of each best response against the main player"
    )
    parser.add_argument("--br-seed", type=int, default=0, help="seed of every best response")
    parser.add_argument("--games", type=int, default=400, help="connect four: games per match, half in each seat")
    parser.add_argument(
        "--curve-games", type=int, default=100, help="connect four: games per epoch checkpoint vs the heuristic"
    )
    parser.add_argument("--measure-every", type=int, default=25, help="Leduc: iterations between exact measurements")
    parser.add_argument("--parallel", type=int, default=1, help="training runs at once (one core each)")
    parser.add_argument("--out-dir", default=None, help="where the JSON results go (default benchmarks/results)")
    parser.add_argument(
        "--workdir", default=None, help="where the runs and scores are kept (default: a temporary folder)"
    )
    parser.add_argument(
        "--add-to",
        action="store_true",
        help="keep the other seeds of the result already in --out-dir (same settings) and add these",
    )
    parser.add_argument("overrides", nargs="*", help="after --: extra `lightmarl fit` arguments for every run")
    args = parser.parse_args(argv)  # fmt: skip
    given = args.br_frames if args.br_frames is not None else [300_000 if args.game == "connect_four" else 0]
    br_frames = sorted({b for b in given if b}, reverse=True)
    if args.frames is not None and args.frames < 1:
        parser.error(f"--frames {args.frames}: expected a positive number of frames")
    if args.measure_every < 1:
        parser.error(f"--measure-every {args.measure_every}: expected an iteration count >= 1")
    if min(given) < 0 or args.br_episodes < 1:
        parser.error(f"--br-frames {min(given)} / --br-episodes {args.br_episodes}: need >= 0 / >= 1")
    for flag in ("games", "curve_games"):
        value = getattr(args, flag)
        if value < 0 or value % 2 or (flag == "games" and value == 0):
            parser.error(f"--{flag.replace('_', '-')} {value}: expected an even number of games (half in each seat)")
    try:
        parse_override_args(args.overrides, where="overrides after --")
    except ConfigError as error:
        parser.error(str(error))
    recipes = recipes_of(args.game)
    frames = args.frames or int(yaml.safe_load(recipes["league"].read_text())["model"]["max_frames"])
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix=f"league_robustness_{args.game}_"))
    out_dir = Path(args.out_dir or ROOT / "benchmarks" / "results")
    given = sys.argv[1:] if argv is None else list(argv)
    settings = {
        "frames": frames, "br_frames": br_frames, "br_episodes": args.br_episodes, "br_seed": args.br_seed,
        "games": args.games, "curve_games": args.curve_games, "overrides": list(args.overrides),
        "measure_every": args.measure_every,
    }  # fmt: skip
    where = machine()  # the load before the runs start, which is what they compete with
    started = time.time()
    per_seed = earlier_seeds(args.game, settings, out_dir, args.seeds) if args.add_to else {}
    for seed in args.seeds:
        fits = run_fits(
            list(METHODS), [seed], frames, workdir, [*callbacks_of(args.game, args.measure_every), *args.overrides],
            args.parallel,
            recipes=recipes, name=f"league_robustness_{args.game}", task=args.game,
        )  # fmt: skip
        per_seed[str(seed)] = scored_seed(args.game, seed, fits, settings, workdir)
        league = next(f["run"] for f in fits if f["method"] == "league")
        per_seed[str(seed)]["runs"]["league"]["records_against_main"] = records_against_main(league)
        per_seed = dict(sorted(per_seed.items(), key=lambda item: int(item[0])))
        command = reproducing_command(given, [int(s) for s in per_seed])
        extra = {
            **settings, "game": args.game, "seeds": [int(s) for s in per_seed],
            "recipes": {m: f"recipes/{RECIPES[args.game][m]}" for m in METHODS},
            "parallel": args.parallel, "elapsed_s": time.time() - started,
        }  # fmt: skip
        notes = (
            f"{frames:,} frames per run, seeds {' '.join(per_seed)}; each run's main player (binding `main`, live "
            "weights at its last checkpoint)."
            + (
                " Exact exploitability (OpenSpiel's NashConv / 2) of the live binding after the last iteration."
                if args.game == "leduc_poker"
                else ""
            )
            + (
                f" Best responses of {', '.join(f'{b:,}' for b in br_frames)} frames (the recipe's network and PPO), "
                f"{args.br_episodes} games each against the main player."
                if br_frames
                else ""
            )
        )
        for path in write_tables(args.game, per_seed, command, notes, where, extra, out_dir):
            print(f"wrote {path}", flush=True)
    return per_seed


if __name__ == "__main__":
    main()
