"""Connect four on the plain board: AlphaStar's three roles vs PFSP-only vs naive self-play, at equal frames.

For each seed, three recipes train to the same number of frames (``--frames``, default the
recipes' ``max_frames``; ``trainer.max_time`` is lifted so that no run stops early), as one sweep
(:class:`lightmarl.experiments.runner.SweepRunner`): each run its own ``lightmarl fit`` process with
one thread, in its run directory ``<workdir>/runs/<method>/seed_<n>/`` with its log and state (the
same ``--workdir`` again skips the finished runs and resumes an interrupted one from its ``last.ckpt``):

- ``league``: ``recipes/league_connect_four_plain.yaml`` (a ``MainPlayer``, a ``MainExploiter`` and
  a ``LeagueExploiter``);
- ``pfsp``: ``recipes/league_connect_four_plain_pfsp.yaml`` (one ``SelfPlayPlayer`` with
  ``pfsp_prob: 1``: PFSP over its own snapshots, no exploiters);
- ``selfplay``: ``recipes/league_connect_four_plain_selfplay.yaml`` (one ``SelfPlayPlayer`` with
  ``pfsp_prob: 0``: naive self-play).

Each run keeps a checkpoint every epoch. Then each run's main player (binding ``main``, greedy)
plays ``--games`` games (half moving first) against

- the scripted heuristic (:class:`~lightmarl_examples.connect_four.ConnectFourHeuristicPolicy`: win,
  else block, else random);
- a depth-limited alpha-beta search (:class:`~lightmarl_examples.connect_four.ConnectFourSearchPolicy`,
  ``--search-depth`` plies, its first ``--search-openings`` moves uniformly random);
- head to head, within each seed: every method's main player (greedy) against every other's
  (sampling its moves, as ``benchmarks/league_connect_four.py`` plays the first snapshot: two greedy
  players would play one game over and over).

and every epoch checkpoint plays ``--curve-games`` games against the heuristic (the curve). The
games are played by ``benchmarks/league_connect_four.py``'s ``play_match`` (a draw scores ½, 95%
bootstrap interval per run); the table shows, per match, each seed's score and the mean over
seeds with a 95% t interval (:func:`lightmarl.experiments.statistics.seed_mean`). Writes ``--out`` (default
``benchmarks/results/connect_four_league_compare.json``) and beside it ``<name>_curves.json`` (the
mean score against the heuristic at each checkpoint) through ``results.write_result``; per run the
JSON also holds the logged curves (the main player's ``win_rate``, ``elo`` and ``agent_steps``
over frames) and the frames and agent steps reached.

    python benchmarks/connect_four_league_compare.py --seeds 0 1 2 --parallel 3

At the recipes' 614,400 frames that is 9 training runs (each about 4.5 minutes alone on a free
core at the 2,300 frames/s docs/league.md measured for the plain board) and about 23,000 scored
games (per run 400 against each scripted opponent and 100 per checkpoint; 400 per head-to-head
pairing).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from itertools import permutations
from pathlib import Path
from typing import Any

import yaml
from league_connect_four import SCORES, MatchResult, Sampled, load_policy, play_match
from poker_league import recorded_command
from results import machine, write_result

from lightmarl.errors import ConfigError
from lightmarl.experiments.runner import LOG_FILE, SweepRunner, metric_rows, run_directory
from lightmarl.experiments.spec import SweepSpec, parse_override_args, parse_sweep
from lightmarl.experiments.statistics import seed_mean

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("league", "pfsp", "selfplay")
RECIPES = {
    "league": "league_connect_four_plain.yaml",
    "pfsp": "league_connect_four_plain_pfsp.yaml",
    "selfplay": "league_connect_four_plain_selfplay.yaml",
}
#: how the table names each method.
METHOD_LABELS = {
    "league": "three roles (`MainPlayer` + exploiters)",
    "pfsp": "PFSP only (`SelfPlayPlayer`, `pfsp_prob: 1`)",
    "selfplay": "naive self-play (`SelfPlayPlayer`, `pfsp_prob: 0`)",
}
#: the binding of each method's main player and its league player id.
MAIN_BINDING, MAIN_PLAYER = "main", "main_default_0"
COLUMNS: list[Any] = [
    "main player (greedy)",
    "opponent",
    "score per seed",
    {"name": "mean", "format": ".3f"},
    "95% t interval over seeds",
    "games per seed",
]
#: the logged metrics of the main player kept as curves (``league/<player>/<name>``).
LOGGED = ("win_rate", "elo", "agent_steps")
#: Lightning's per-epoch checkpoints keep every one of them and ``last.ckpt``.
EPOCH_CHECKPOINTS = (
    "[{class_path: lightning.pytorch.callbacks.ModelCheckpoint, init_args: "
    "{save_top_k: -1, save_last: true, every_n_epochs: 1, save_on_train_epoch_end: true}}]"
)


def recipe_of(method: str) -> Path:
    return ROOT / "recipes" / RECIPES[method]


def fit_sweep(
    methods: list[str],
    seeds: list[int],
    frames: int | None,
    workdir: str | Path,
    extra: list[str],
    recipes: Mapping[str, Path] | None = None,
    name: str = "connect_four_league_compare",
    task: str = "connect_four_plain",
) -> SweepSpec:
    """The sweep of the training runs: every method's recipe on every seed, to ``frames`` frames, no time limit.

    Args:
        methods: names in :data:`METHODS`.
        seeds: the seeds of every method.
        frames: ``model.max_frames`` of every run (``None``: the recipes').
        workdir: the sweep's ``out_dir``.
        extra: further ``--key=value`` arguments of every ``lightmarl fit``.
        recipes: each method's recipe (default: the plain-board connect-four recipes, :func:`recipe_of`).
        name: the sweep's name.
        task: each run's task label.
    """
    overrides: dict[str, Any] = {
        "trainer.max_time": None,  # equal frames: no run may stop on the clock
        "trainer.callbacks": EPOCH_CHECKPOINTS,
        "trainer.enable_model_summary": False,
        **({"model.max_frames": frames} if frames is not None else {}),
        **parse_override_args(extra, where="overrides after --"),
    }
    recipe = recipes or {m: recipe_of(m) for m in methods}
    raw = {
        "name": name,
        "out_dir": str(workdir),
        "seeds": seeds,
        "validate": False,
        "overrides": overrides,
        "configs": [{"name": m, "recipe": str(recipe[m]), "task": task} for m in methods],
    }
    return parse_sweep(raw, default_name=raw["name"], where=name)


def run_fits(
    methods: list[str],
    seeds: list[int],
    frames: int | None,
    workdir: str | Path,
    extra: list[str],
    parallel: int,
    recipes: Mapping[str, Path] | None = None,
    name: str = "connect_four_league_compare",
    task: str = "connect_four_plain",
) -> list[dict[str, Any]]:
    """Train every method on every seed (:func:`fit_sweep`, ``recipes``, ``name`` and ``task`` as there), ``parallel`` runs
    at once; per run its folder, its wall seconds, the frames it reached and its logged curves (:func:`logged_curves`).

    Raises:
        RuntimeError: naming a run that did not finish, with its error line and log.
    """
    spec = fit_sweep(methods, seeds, frames, workdir, extra, recipes, name, task)
    runner = SweepRunner(spec, workers=parallel, on_event=lambda run_id, event: print(f"{run_id}: {event}", flush=True))
    fits = []
    for run, state in zip(spec.runs(), runner.run()):
        root = run_directory(spec, run)
        if state.get("status") != "done":
            raise RuntimeError(f"{run.run_id} {state.get('status')}: {state.get('error')} (log: {root / LOG_FILE})")
        fits.append(
            {
                "method": run.config,
                "seed": run.seed,
                "run": str(root),
                "train_s": state["wall_s"],
                **logged_curves(root),
            }
        )
    return fits


def logged_curves(root: Path) -> dict[str, Any]:
    """The main player's logged ``win_rate`` / ``elo`` / ``agent_steps`` as ``[[frames, value], ...]``, and the frames reached."""
    rows = metric_rows(Path(root))
    if not rows:
        raise RuntimeError(f"no metrics.csv under {root}")
    curves: dict[str, list[list[float]]] = {name: [] for name in LOGGED}
    frames = 0.0
    for row in rows:
        if "counters/frames" not in row:
            continue
        frames = max(frames, row["counters/frames"])
        for name in LOGGED:
            value = row.get(f"league/{MAIN_PLAYER}/{name}")
            if value is not None:
                curves[name].append([row["counters/frames"], value])
    steps = curves["agent_steps"]
    return {"frames": frames, "agent_steps": steps[-1][1] if steps else None, "logged": curves}


def checkpoints_by_frames(run: str | Path) -> list[tuple[int, Path]]:
    """The run's epoch checkpoints (not ``last.ckpt``) as ``(frames, path)``, earliest first."""
    from lightmarl.inference import read_artifact

    found = []
    for path in Path(run, "checkpoints").glob("*.ckpt"):
        if path.name.startswith("last"):
            continue
        found.append((int(read_artifact(path, field="checkpoint").counters["frames"]), path))
    return sorted(found)


def score_of(result: MatchResult) -> dict[str, Any]:
    """A match as JSON: score with its 95% bootstrap interval, and win / draw / loss counts."""
    score = result.score
    return {
        "score": score.mean,
        "ci95": [score.ci_low, score.ci_high],
        "games": len(result.outcomes),
        "wdl": [result.outcomes.count(o) for o in SCORES],
    }


def score_run(job: tuple[str, int, str, int, int, int, int, int, int]) -> dict[str, Any]:
    """A run's main player against the heuristic and the search opponent, and its curve against the heuristic."""
    import torch

    from lightmarl_examples.connect_four import ConnectFourHeuristicPolicy, ConnectFourSearchPolicy

    method, seed, run, games, curve_games, depth, openings, opponent_seed, env_seed = job
    torch.set_num_threads(1)
    last = Path(run) / "checkpoints" / "last.ckpt"
    player = load_policy(last, MAIN_BINDING)
    group = player.group
    heuristic = ConnectFourHeuristicPolicy(group, seed=opponent_seed)
    search = ConnectFourSearchPolicy(group, depth=depth, opening_moves=openings, seed=opponent_seed)
    out: dict[str, Any] = {
        "method": method,
        "seed": seed,
        "heuristic": score_of(play_match(player, heuristic, games, env_seed)),
        "search": score_of(play_match(player, search, games, env_seed)),
        "curve": [],
    }
    if curve_games:
        for frames, path in checkpoints_by_frames(run):
            heuristic = ConnectFourHeuristicPolicy(group, seed=opponent_seed)
            match = play_match(load_policy(path, MAIN_BINDING), heuristic, curve_games, env_seed)
            out["curve"].append([frames, match.score.mean])
    return out


def head_to_head(job: tuple[int, str, str, str, str, int, int]) -> dict[str, Any]:
    """``first``'s main player (greedy) against ``second``'s (sampling), both from the same seed."""
    import torch

    seed, first, first_run, second, second_run, games, env_seed = job
    torch.set_num_threads(1)
    torch.manual_seed(env_seed)  # the sampled opponent draws from torch's global stream
    player = load_policy(Path(first_run) / "checkpoints" / "last.ckpt", MAIN_BINDING)
    opponent = Sampled(load_policy(Path(second_run) / "checkpoints" / "last.ckpt", MAIN_BINDING))
    return {
        "seed": seed,
        "player": first,
        "opponent": second,
        **score_of(play_match(player, opponent, games, env_seed)),
    }


def summarize(values: list[float]) -> tuple[float, list[float] | None]:
    """Mean over seeds and its 95% t interval (none for one seed): :func:`lightmarl.experiments.statistics.seed_mean`."""
    summary = seed_mean(values)
    return summary["mean"], summary["ci95"]


def result_rows(per_seed: dict[str, dict[str, Any]], search_label: str) -> list[list[Any]]:
    """The table: per method its score against the heuristic and the search opponent, then every
    head-to-head pairing; each with the per-seed scores, their mean and 95% t interval over seeds."""
    seeds = list(per_seed)
    methods = [m for m in METHODS if all(m in per_seed[s]["runs"] for s in seeds)]
    rows = []

    def row(label: str, opponent: str, matches: list[dict[str, Any]]) -> list[Any]:
        mean, ci = summarize([m["score"] for m in matches])
        return [
            label,
            opponent,
            " / ".join(f"{m['score']:.3f}" for m in matches),
            mean,
            f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else None,
            matches[0]["games"],
        ]

    for key, opponent in (("heuristic", "heuristic (win, block, else random)"), ("search", search_label)):
        for method in methods:
            rows.append(row(METHOD_LABELS[method], opponent, [per_seed[s]["runs"][method][key] for s in seeds]))
    for first, second in permutations(methods, 2):
        matches = [
            m for s in seeds for m in per_seed[s]["head_to_head"] if m["player"] == first and m["opponent"] == second
        ]
        rows.append(row(METHOD_LABELS[first], f"{METHOD_LABELS[second]}, sampling", matches))
    return rows


def curve_table(per_seed: dict[str, dict[str, Any]]) -> tuple[list[Any], list[list[Any]]]:
    """Columns and rows of the curves: per method the mean score against the heuristic over seeds at each checkpoint."""
    seeds = list(per_seed)
    methods = [m for m in METHODS if all(m in per_seed[s]["runs"] for s in seeds)]
    frames = sorted({f for s in seeds for m in methods for f, _ in per_seed[s]["runs"][m]["curve"]})
    columns: list[Any] = ["method", *({"name": f"{f:,}", "format": ".3f"} for f in frames)]
    rows = []
    for method in methods:
        cells: list[Any] = [METHOD_LABELS[method]]
        for f in frames:
            values = [v for s in seeds for g, v in per_seed[s]["runs"][method]["curve"] if g == f]
            cells.append(sum(values) / len(values) if len(values) == len(seeds) else None)
        rows.append(cells)
    return columns, rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=None, help="training frames of every run (default: the recipes')")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--parallel", type=int, default=1, help="processes at once (one core each)")
    parser.add_argument("--games", type=int, default=400, help="games per match, half in each seat")
    parser.add_argument(
        "--curve-games", type=int, default=100, help="games per epoch checkpoint vs the heuristic (0: none)"
    )
    parser.add_argument("--search-depth", type=int, default=3, help="plies the search opponent looks ahead")
    parser.add_argument("--search-openings", type=int, default=2, help="the search opponent's random first moves")
    parser.add_argument("--opponent-seed", type=int, default=1, help="seed of the scripted opponents")
    parser.add_argument("--seed", type=int, default=20_000, help="env copies are reset with seed + i")
    parser.add_argument(
        "--out", default=None, help="JSON result (default benchmarks/results/connect_four_league_compare.json)"
    )
    parser.add_argument("--workdir", default=None, help="where the runs write (default: a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="after --: extra `lightmarl fit` arguments for every run")
    args = parser.parse_args(argv)
    command = recorded_command("benchmarks/connect_four_league_compare.py", sys.argv[1:] if argv is None else argv)
    out = Path(args.out or ROOT / "benchmarks" / "results" / "connect_four_league_compare.json")
    if out.suffix != ".json" or not all(c.isalnum() or c in "_-" for c in out.stem):
        parser.error(f"--out {args.out}: give a .json path whose name is letters, digits, '_' or '-'")
    for name in ("games", "curve_games"):
        value = getattr(args, name)
        if value < 0 or value % 2 or (name == "games" and value == 0):
            parser.error(f"--{name.replace('_', '-')} {value}: expected an even number of games (half in each seat)")
    if args.frames is not None and args.frames < 1:
        parser.error(f"--frames {args.frames}: expected a positive number of frames")
    if args.search_depth < 1 or args.search_openings < 0:
        parser.error(f"--search-depth {args.search_depth} / --search-openings {args.search_openings}: need >= 1 / >= 0")
    if args.seed < 0 or args.opponent_seed < 0:
        parser.error("--seed / --opponent-seed: expected non-negative seeds")
    try:
        parse_override_args(args.overrides, where="overrides after --")
    except ConfigError as error:
        parser.error(str(error))
    frames = args.frames or int(yaml.safe_load(recipe_of("league").read_text())["model"]["max_frames"])
    workdir = args.workdir or tempfile.mkdtemp(prefix="connect_four_league_compare_")
    where = machine()  # the load before the runs start, which is what they compete with
    started = time.time()
    fits = run_fits(args.methods, args.seeds, frames, workdir, list(args.overrides), args.parallel)
    trained_s = time.time() - started
    with ProcessPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        runs = {(f["seed"], f["method"]): f for f in fits}
        scoring = [
            (
                m,
                s,
                f["run"],
                args.games,
                args.curve_games,
                args.search_depth,
                args.search_openings,
                args.opponent_seed,
                args.seed,
            )
            for (s, m), f in runs.items()
        ]
        pairs = [
            (s, a, runs[s, a]["run"], b, runs[s, b]["run"], args.games, args.seed)
            for s in args.seeds
            for a, b in permutations(args.methods, 2)
        ]
        scored = list(pool.map(score_run, scoring))
        matches = list(pool.map(head_to_head, pairs))
    per_seed: dict[str, dict[str, Any]] = {str(s): {"runs": {}, "head_to_head": []} for s in args.seeds}
    for score in scored:
        fit = runs[score["seed"], score["method"]]
        per_seed[str(score["seed"])]["runs"][score["method"]] = {
            **{k: v for k, v in fit.items() if k not in ("method", "seed", "run")},
            **{k: v for k, v in score.items() if k not in ("method", "seed")},
        }
    for match in matches:
        per_seed[str(match["seed"])]["head_to_head"].append({k: v for k, v in match.items() if k != "seed"})
    short = [f"{m} seed {s}: {f['frames']:.0f}" for (s, m), f in runs.items() if f["frames"] < frames]
    search_label = f"alpha-beta depth {args.search_depth}, {args.search_openings} random opening moves"
    rows = result_rows(per_seed, search_label)
    extra = {
        "frames": frames,
        "seeds": args.seeds,
        "methods": args.methods,
        "recipes": {m: f"recipes/{RECIPES[m]}" for m in args.methods},
        "parallel": args.parallel,
        "games": args.games,
        "curve_games": args.curve_games,
        "search": {"depth": args.search_depth, "opening_moves": args.search_openings},
        "opponent_seed": args.opponent_seed,
        "env_seed": args.seed,
        "overrides": args.overrides,
        "train_s": trained_s,
        "elapsed_s": time.time() - started,
    }
    notes = (
        f"Plain board, {frames:,} frames per run, seeds {' '.join(map(str, args.seeds))}, {args.parallel} processes at "
        f"once; each run's main player (binding `main`, greedy) at its last checkpoint. Main player's agent steps per "
        "run (mean): "
        + ", ".join(
            f"{m} {sum(per_seed[str(s)]['runs'][m]['agent_steps'] or 0 for s in args.seeds) / len(args.seeds):,.0f}"
            for m in args.methods
        )
        + "."
        + (f" Runs that stopped short of the frames: {'; '.join(short)}." if short else "")
    )
    path = write_result(
        out.stem, command=command, per_seed=per_seed, columns=COLUMNS, rows=rows, notes=notes,
        directory=out.parent, measured_on=where, extra=extra,
    )  # fmt: skip
    columns, curve_rows = curve_table(per_seed)
    curves_path = None
    if len(columns) > 1:
        curves_path = write_result(
            f"{out.stem}_curves", command=command, per_seed={s: {m: r["curve"] for m, r in v["runs"].items()} for s, v in per_seed.items()},
            columns=columns, rows=curve_rows, directory=out.parent, measured_on=where, extra=extra,
            notes=f"Mean over seeds of each method's main player (greedy) against the heuristic, {args.curve_games} games "
            "per checkpoint (a checkpoint every epoch); the columns are the checkpoints' training frames.",
        )  # fmt: skip
    print(f"| {' | '.join(c if isinstance(c, str) else c['name'] for c in COLUMNS)} |")
    print("| " + " | ".join("---" for _ in COLUMNS) + " |")
    for row in rows:
        print(
            "| "
            + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v if v is not None else "—") for v in row)
            + " |"
        )
    print(notes)
    print(f"wrote {path}" + (f" and {curves_path}" if curves_path else ""))
    return json.loads(path.read_text())


if __name__ == "__main__":
    main()
