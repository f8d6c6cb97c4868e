"""League vs naive self-play vs OpenSpiel's PyTorch NFSP on a poker game (or Liar's Dice), at equal wall time.

For each seed, three methods train for the same wall-clock budget, each in its own process with
one thread, and their exact exploitability (OpenSpiel's ``exploitability``) is recorded over time:

- ``league``: ``lightmarl fit --config recipes/league_<game>.yaml`` (a ``MetaStrategyPlayer``: PPO
  against its snapshots, the mixture of the snapshots measured);
- ``selfplay``: ``recipes/league_<game>_selfplay.yaml``, the twin that differs only in the league
  section (naive self-play, the live binding measured);
- ``mmd`` (on request, ``--methods``): ``recipes/league_<game>_mmd.yaml``, the league with PPO's
  magnetic-mirror-descent term (``algorithm.init_args.magnet``);
- ``nfsp``: ``open_spiel.python.pytorch.nfsp`` with the settings of OpenSpiel's
  ``open_spiel/python/examples/nfsp_leduc_pytorch.py`` (the Kuhn example uses the same ones; its
  average policy measured every ``--nfsp-eval-every`` episodes, measurement time not charged to its
  budget). Needs ``dm-tree`` (``pip install 'lightmarl[openspiel]'``).

The two lightmarl methods run as one sweep (:class:`lightmarl.experiments.runner.SweepRunner`): each
run an ordinary ``lightmarl fit`` in its own run directory ``<workdir>/runs/<method>/seed_<n>/`` with
its log ``sweep.log`` and state ``sweep_run.json``; a finished run is not run again when the same
``--workdir`` is given again, an interrupted one resumes from its ``last.ckpt``. They stop at
``trainer.max_time`` or at the recipe's ``max_frames``, whichever comes first (their measurements
every ``every_n_iterations`` iterations are part of their time). Each run's result is its last
measurement; a league run's live binding (``league/main/live_exploitability``) is recorded beside its
shown mixture. Writes ``--out`` through ``results.write_result`` (the file's stem is the result's
name): per seed and method the final exploitability, the best one logged, the curve
``[[seconds, exploitability], ...]`` and the frames (episodes for NFSP); as the table, per method the
mean over seeds with a 95% t interval (:func:`lightmarl.experiments.statistics.seed_mean`); the
settings under ``extra``. Prints the table.

    python benchmarks/poker_league.py --game kuhn_poker --seeds 0 1 2 --wall-s 300 --parallel 3 \
        --out benchmarks/results/poker_league_kuhn_poker.json

``--game`` is any OpenSpiel game with the two recipes ``recipes/league_<game>.yaml`` and
``recipes/league_<game>_selfplay.yaml``: ``kuhn_poker``, ``leduc_poker``, ``liars_dice`` and ``goofspiel``
(imperfect-information, four cards). NFSP plays the game the league recipe names, a simultaneous-move
one in its turn-based conversion, as exploitability measures it. Its average network is measured with
``lightmarl.evaluation.exploitability.measure`` (OpenSpiel's value, the network asked once per
information state, one at a time: on Liar's Dice still NFSP's slow part); a ``--nfsp-eval-every``
above the episodes NFSP reaches measures it once, at the end.

``--add-to`` runs again only the ``--methods`` named (e.g. ``--methods nfsp``) for the ``--seeds`` named and
puts their runs into the result already at ``--out``, keeping its other runs; it refuses a result measured
with another game, wall time, NFSP measurement interval or overrides. The result keeps the command that
reproduces all of it, and lists each call that replaced runs under ``extra.added`` and in its notes.

``--parallel`` runs that many processes at once: on a machine with fewer free cores the methods
slow each other down, so give each run a core of its own (``nproc``, ``uptime``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from results import machine, repository_path, write_result

from lightmarl.errors import ConfigError
from lightmarl.experiments.runner import LOG_FILE, SweepRunner, metric_rows, run_directory
from lightmarl.experiments.spec import RunSpec, SweepSpec, parse_override_args, parse_sweep
from lightmarl.experiments.statistics import seed_mean

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("league", "selfplay", "mmd", "nfsp")
#: the methods run when ``--methods`` is not given.
DEFAULT_METHODS = ("league", "selfplay", "nfsp")
#: each lightmarl method's recipe: ``recipes/league_<game><suffix>.yaml``.
RECIPE_SUFFIX = {"league": "", "selfplay": "_selfplay", "mmd": "_mmd"}
#: how the table names each method.
METHOD_LABELS = {
    "league": "league (`MetaStrategyPlayer`, the recipe's meta-solver)",
    "selfplay": "naive self-play (`SelfPlayPlayer`, `pfsp_prob: 0`)",
    "mmd": "league with magnetic mirror descent (PPO `magnet`)",
    "nfsp": "OpenSpiel NFSP (PyTorch)",
}
COLUMNS: list[Any] = [
    "method",
    "at the end, per seed",
    {"name": "mean", "format": ".3f"},
    "95% t interval",
    "best logged, per seed",
    "work per run (mean)",
]
#: the column added when a run recorded its live binding beside its shown mixture.
LIVE_COLUMN = "live binding at the end, per seed"


def columns_of(per_seed: dict[str, dict[str, dict[str, Any]]]) -> list[Any]:
    """The table's columns: `COLUMNS`, and `LIVE_COLUMN` when some run recorded its live binding."""
    live = any("live_final" in run for runs in per_seed.values() for run in runs.values())
    return [*COLUMNS, LIVE_COLUMN] if live else list(COLUMNS)


#: OpenSpiel's nfsp_leduc_pytorch.py flags (nfsp_kuhn_pytorch.py has the same learning settings).
NFSP_SETTINGS: dict[str, Any] = {
    "hidden_layers_sizes": [128],
    "replay_buffer_capacity": int(2e5),
    "reservoir_buffer_capacity": int(2e6),
    "min_buffer_size_to_learn": 1000,
    "anticipatory_param": 0.1,
    "batch_size": 128,
    "learn_every": 64,
    "rl_learning_rate": 0.01,
    "sl_learning_rate": 0.01,
    "optimizer_str": "sgd",
    "loss_str": "mse",
    "update_target_network_every": 19200,
    "discount_factor": 1.0,
    "epsilon_decay_duration": int(20e6),
    "epsilon_start": 0.06,
    "epsilon_end": 0.001,
}


def recipe_of(game: str, method: str) -> Path:
    return ROOT / "recipes" / f"league_{game}{RECIPE_SUFFIX[method]}.yaml"


def spiel_game_of(game: str) -> Any:
    """The OpenSpiel game ``recipes/league_<game>.yaml`` plays (its ``env_kwargs``) as exploitability measures
    it (`lightmarl.evaluation.exploitability.OpenSpielGame`): ``.measured`` is a simultaneous-move game
    (Goofspiel) in its turn-based conversion, which NFSP plays turn by turn."""
    import yaml

    from lightmarl.evaluation.exploitability import openspiel_game

    kwargs = yaml.safe_load(recipe_of(game, "league").read_text())["model"]["env"]["env_kwargs"]
    return openspiel_game(kwargs["game"], kwargs.get("parameters"))


def hms(seconds: float) -> str:
    s = math.ceil(seconds)
    return f"00:{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def recorded_command(script: str, given: list[str]) -> str:
    """The command that reproduces a result: ``python <script>`` and its arguments, less ``--workdir`` (a
    folder of the machine it ran on, not part of what it measured), with an ``--out`` outside the
    repository written as the result's place in it, ``benchmarks/results/<file name>``."""
    words: list[str] = []
    given = list(given)
    while given:
        word = given.pop(0)
        name, has_value, value = word.partition("=")
        if name in ("--workdir", "--out"):
            value = value if has_value else (given.pop(0) if given else "")
            if name == "--out":
                words += ["--out", repository_path(value, "benchmarks/results")]
            continue
        words.append(word)
    return shlex.join(["python", script, *words])


def lightmarl_sweep(
    game: str, methods: list[str], seeds: list[int], wall_s: float, workdir: str | Path, extra: list[str]
) -> SweepSpec:
    """The sweep of the lightmarl methods: each method's recipe for ``wall_s`` seconds, every seed.

    Args:
        game: the OpenSpiel game of ``recipes/league_<game>*.yaml``.
        methods: ``league`` and/or ``selfplay``.
        seeds: the seeds of every method.
        wall_s: ``trainer.max_time`` of every run.
        workdir: the sweep's ``out_dir``.
        extra: further ``--key=value`` arguments of every ``lightmarl fit``.
    """
    overrides = {
        "trainer.max_time": hms(wall_s),
        "trainer.enable_model_summary": False,
        **parse_override_args(extra, where="overrides after --"),
    }
    raw = {
        "name": f"poker_league_{game}",
        "out_dir": str(workdir),
        "seeds": seeds,
        "validate": False,
        "overrides": overrides,
        "configs": [{"name": m, "recipe": str(recipe_of(game, m)), "task": game} for m in methods],
    }
    return parse_sweep(raw, default_name=raw["name"], where="poker_league")


def lightmarl_result(spec: SweepSpec, run: RunSpec, state: dict[str, Any]) -> dict[str, Any]:
    """A finished run of the sweep as a result: its exploitability curve, frames and wall seconds.

    Raises:
        RuntimeError: naming the run, with its error line and log, when it did not finish.
    """
    run_dir = run_directory(spec, run)
    if state.get("status") != "done":
        raise RuntimeError(f"{run.run_id} {state.get('status')}: {state.get('error')} (log: {run_dir / LOG_FILE})")
    curve, live_curve, frames = [], [], 0.0
    for row in metric_rows(run_dir):
        value, at = row.get("league/main/exploitability"), row.get("league/main/exploitability_at_s")
        if value is not None and at is not None and (not curve or at != curve[-1][0]):
            curve.append([at, value])  # runs logged before measurements were one row each repeat one in later rows
            live = row.get("league/main/live_exploitability")
            if live is not None:
                live_curve.append([at, live, row.get("counters/frames", frames)])
        frames = max(frames, row.get("counters/frames", 0.0))
    if not curve:
        raise RuntimeError(f"{run.run_id}: no exploitability was logged in {run_dir}")
    method = run.config
    result = {
        "method": method, "seed": run.seed, "curve": curve, "final": curve[-1][1], "frames": frames,
        "process_s": state["wall_s"],
    }  # fmt: skip
    if live_curve:
        # [seconds, live exploitability, frames]: the binding that acts, beside the mixture it adds to.
        result["live_curve"] = live_curve
        result["live_final"] = live_curve[-1][1]
    return result


def run_nfsp(game: str, seed: int, wall_s: float, eval_every: int) -> dict[str, Any]:
    """OpenSpiel's PyTorch NFSP for ``wall_s`` seconds of training; its average policy's exploitability curve."""
    import numpy as np
    import torch
    from open_spiel.python import policy as spiel_policy
    from open_spiel.python import rl_environment
    from open_spiel.python.pytorch import nfsp

    from lightmarl.evaluation.exploitability import measure

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    spiel = spiel_game_of(game)
    env = rl_environment.Environment(spiel.measured)
    env.seed(seed)
    size = env.observation_spec()["info_state"][0]
    actions = env.action_spec()["num_actions"]
    settings = dict(NFSP_SETTINGS)
    hidden = settings.pop("hidden_layers_sizes")
    # NFSP seeds torch's and NumPy's global generators itself (its `seed`, 42 unless given): without this
    # run's seed every run would start from the same networks and, where the game has no chance, play the
    # same episodes.
    agents = [nfsp.NFSP(p, size, actions, hidden, seed=1000 * seed + 10 * p, **settings) for p in range(2)]

    class AveragePolicy(spiel_policy.Policy):  # as in OpenSpiel's example
        def __init__(self) -> None:
            super().__init__(env.game, [0, 1])
            self._obs: dict[str, Any] = {"info_state": [None, None], "legal_actions": [None, None]}

        def action_probabilities(self, state, player_id=None):
            player = state.current_player()
            legal = state.legal_actions(player)
            self._obs["current_player"] = player
            self._obs["info_state"][player] = state.information_state_tensor(player)
            self._obs["legal_actions"][player] = legal
            step = rl_environment.TimeStep(observations=self._obs, rewards=None, discounts=None, step_type=None)
            with agents[player].temp_mode_as(nfsp.MODE.AVERAGE_POLICY):
                probs = agents[player].step(step, is_evaluation=True).probs
            return {a: probs[a] for a in legal}

    average = AveragePolicy()
    curve: list[list[float]] = []
    trained = 0.0
    episodes = 0
    while trained < wall_s:
        started = time.perf_counter()
        for _ in range(eval_every):
            step = env.reset()
            while not step.last():
                player = step.observations["current_player"]
                step = env.step([agents[player].step(step).action])
            for agent in agents:
                agent.step(step)
            episodes += 1
            if trained + time.perf_counter() - started >= wall_s:
                break
        trained += time.perf_counter() - started
        # OpenSpiel's `exploitability.exploitability` (the same value, up to the float32 rounding of its sums),
        # asking the network once per information state rather than at every history.
        curve.append([trained, measure(spiel, average).exploitability])
    return {"method": "nfsp", "seed": seed, "curve": curve, "final": curve[-1][1], "episodes": episodes}


def summarize(values: list[float]) -> dict[str, Any]:
    """Mean and 95% t interval over seeds (:func:`lightmarl.experiments.statistics.seed_mean`)."""
    return seed_mean(values)


def run_all(
    game: str, methods: list[str], seeds: list[int], wall_s: float, workdir: str | Path, extra: list[str],
    parallel: int, eval_every: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every method on every seed, at most ``parallel`` runs at once: the lightmarl methods through one
    :class:`SweepRunner`, OpenSpiel's NFSP in processes of its own; the results seed by seed, method by method."""
    lightmarl_methods = [m for m in methods if m != "nfsp"]
    runner: SweepRunner | None = None
    runs: dict[tuple[str, int], RunSpec] = {}
    if lightmarl_methods:  # `--methods nfsp` alone runs no sweep
        spec = lightmarl_sweep(game, lightmarl_methods, seeds, wall_s, workdir, extra)
        runner = SweepRunner(
            spec, workers=parallel, on_event=lambda run_id, event: print(f"{run_id}: {event}", flush=True)
        )
        runs = {(run.config, run.seed): run for run in spec.runs()}

    def lightmarl(run: RunSpec) -> dict[str, Any]:
        assert runner is not None
        return lightmarl_result(spec, run, runner.run_one(run))

    # One thread per run at once: each waits on its sweep run's subprocess or its NFSP process.
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as threads, ProcessPoolExecutor(max(1, parallel)) as nfsp:
        futures = [
            threads.submit(lambda s=seed: nfsp.submit(run_nfsp, game, s, wall_s, eval_every).result())
            if method == "nfsp"
            else threads.submit(lightmarl, runs[method, seed])
            for seed in seeds
            for method in methods
        ]
        try:
            return [future.result() for future in futures]
        except BaseException:
            if runner is not None:
                runner.stop()  # the sweep's runs in progress write a checkpoint and stop; none is started
            raise


def per_seed_of(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{seed: {method: {"final", "best", "curve", "frames" or "episodes", ...}}}`` from the runs."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        numbers = {k: v for k, v in run.items() if k not in ("method", "seed")}
        numbers["best"] = min(value for _, value in run["curve"])
        out.setdefault(str(run["seed"]), {})[run["method"]] = numbers
    return out


def result_rows(per_seed: dict[str, dict[str, dict[str, Any]]]) -> list[list[Any]]:
    """The table of a result's ``per_seed``: per method, the final exploitability of every seed, their
    mean with a 95% t interval (:func:`summarize`), the best value each seed logged and the frames
    (NFSP: episodes) a run reached on average."""
    seeds = list(per_seed)
    methods = [m for m in METHODS if any(m in per_seed[s] for s in seeds)]
    live = len(columns_of(per_seed)) > len(COLUMNS)
    rows = []
    for method in methods:
        runs = [per_seed[s][method] for s in seeds if method in per_seed[s]]
        summary = summarize([r["final"] for r in runs])
        ci = summary["ci95"]
        unit = "episodes" if method == "nfsp" else "frames"
        work = sum(r.get(unit, 0.0) for r in runs) / len(runs)
        lives = [r.get("live_final") for r in runs]
        row = [
            METHOD_LABELS[method],
            " / ".join(f"{r['final']:.3f}" for r in runs),
            summary["mean"],
            f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else None,
            " / ".join(f"{r['best']:.3f}" for r in runs),
            f"{work:,.0f} {unit}",
        ]
        if live:
            row.append(" / ".join(f"{v:.3f}" for v in lives) if all(v is not None for v in lives) else None)
        rows.append(row)
    return rows


#: the settings a result's runs share; ``--add-to`` refuses a result measured with others.
SHARED_SETTINGS = ("game", "wall_s", "nfsp_eval_every", "overrides")


def earlier_result(out: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The result at ``out`` that ``--add-to`` adds runs to; ``ValueError`` when there is none or it was measured
    with other :data:`SHARED_SETTINGS` than ``settings``."""
    if not out.exists():
        raise ValueError(f"no result at {out} to add runs to")
    earlier = json.loads(out.read_text())
    other = [key for key in SHARED_SETTINGS if earlier.get("extra", {}).get(key) != settings[key]]
    if other:
        recorded = {key: earlier.get("extra", {}).get(key) for key in other}
        raise ValueError(f"{out.name} was measured with other settings ({recorded}): run every method again")
    return earlier


def added_runs(earlier: dict[str, Any], per_seed: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """``earlier``'s ``per_seed`` with the runs of ``per_seed`` in place of its runs of the same seed and method."""
    merged = {seed: dict(runs) for seed, runs in earlier["per_seed"].items()}
    for seed, runs in per_seed.items():
        merged.setdefault(seed, {}).update(runs)
    # Seeds in order, methods in METHODS order, as a call that ran them all writes them.
    return {seed: {m: merged[seed][m] for m in METHODS if m in merged[seed]} for seed in sorted(merged, key=int)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--game",
        default="kuhn_poker",
        help="kuhn_poker, leduc_poker, liars_dice or goofspiel (recipes/league_<game>*.yaml)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--wall-s", type=float, default=300.0, help="training wall time of every run, seconds")
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=METHODS)
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (one core each)")
    parser.add_argument("--nfsp-eval-every", type=int, default=10000, help="NFSP episodes between measurements")
    parser.add_argument(
        "--out",
        default=None,
        help="JSON result; its stem is the result's name (default benchmarks/results/poker_league_<game>.json)",
    )
    parser.add_argument("--workdir", default=None, help="where the lightmarl runs write (default: a temporary folder)")
    parser.add_argument(
        "--add-to",
        action="store_true",
        help="put the runs of --methods and --seeds into the result at --out in place of its runs of the same "
        "method and seed, keeping the others (its settings must be these)",
    )
    parser.add_argument(
        "overrides", nargs="*", help="after --: extra `lightmarl fit` arguments for both lightmarl methods"
    )
    args = parser.parse_args(argv)
    command = recorded_command("benchmarks/poker_league.py", sys.argv[1:] if argv is None else argv)
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"poker_league_{args.game}.json")
    if out.suffix != ".json" or not all(c.isalnum() or c in "_-" for c in out.stem):
        parser.error(f"--out {args.out}: give a .json path whose name is letters, digits, '_' or '-'")
    for method in args.methods:
        if method != "nfsp" and not recipe_of(args.game, method).exists():
            parser.error(f"--game {args.game}: no recipe {recipe_of(args.game, method)}")
    try:
        parse_override_args(args.overrides, where="overrides after --")
    except ConfigError as error:
        parser.error(str(error))
    settings = {"game": args.game, "wall_s": args.wall_s, "nfsp_eval_every": args.nfsp_eval_every}
    settings["overrides"] = args.overrides
    earlier = None
    if args.add_to:
        try:
            earlier = earlier_result(out, settings)
        except ValueError as error:
            parser.error(f"--add-to: {error}")
    workdir = args.workdir or tempfile.mkdtemp(prefix="poker_league_")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    where = machine()  # the load before the runs start, which is what they compete with
    load = os.getloadavg()[0]
    started = time.time()
    runs = run_all(
        args.game, args.methods, args.seeds, args.wall_s, workdir, list(args.overrides), args.parallel,
        args.nfsp_eval_every,
    )  # fmt: skip
    per_seed = per_seed_of(runs)
    extra: dict[str, Any] = {
        **settings,
        "seeds": args.seeds,
        "parallel": args.parallel,
        "elapsed_s": time.time() - started,
        "nfsp_settings": NFSP_SETTINGS,
    }
    notes = (
        f"{args.game}, {args.wall_s:g} s of training per run, {args.parallel} runs at once; exploitability "
        "of each run's last measurement (the best one logged beside it)."
    )
    if earlier is not None:
        per_seed = added_runs(earlier, per_seed)
        call = {
            "command": command,
            "methods": args.methods,
            "seeds": args.seeds,
            "parallel": args.parallel,
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "load": round(load, 2),
        }
        extra = {**earlier["extra"], "added": [*earlier["extra"].get("added", []), call]}
        command = earlier["command"]
        notes = earlier.get("notes", notes)
        if "added" not in earlier["extra"]:
            notes += " Runs measured again later, in place of the first ones:"
        notes += f" {', '.join(args.methods)} (seeds {' '.join(map(str, args.seeds))}) on {call['date']}, `{call['command']}`."
    methods = [m for m in METHODS if any(m in runs for runs in per_seed.values())]
    extra["summary"] = {m: summarize([runs[m]["final"] for runs in per_seed.values() if m in runs]) for m in methods}
    rows = result_rows(per_seed)
    path = write_result(
        out.stem,
        command=command,
        per_seed=per_seed,
        columns=columns_of(per_seed),
        rows=rows,
        notes=notes,
        directory=out.parent,
        measured_on=where,
        extra=extra,
    )
    print(f"{args.game}, {args.wall_s:.0f} s per run, seeds {args.seeds}, load {load:.1f} at start")
    columns = columns_of(per_seed)
    print("| " + " | ".join(c if isinstance(c, str) else c["name"] for c in columns) + " |")
    print("| " + " | ".join("---" for _ in columns) + " |")
    for row in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v or "—") for v in row) + " |")
    print(f"wrote {path}")
    return json.loads(path.read_text())


if __name__ == "__main__":
    main()
