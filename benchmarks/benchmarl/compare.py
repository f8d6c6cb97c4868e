"""lightmarl and BenchMARL side by side: same task config, seed and frame budget, one machine.

For each task and seed this script runs BenchMARL 1.5.2's own command line (``python -m
benchmarl.run algorithm=mappo task=...``: its default MAPPO experiment, csv logger, no rendering,
an evaluation after every 6,000-frame collection batch) in a separate virtualenv, then
``lightmarl fit`` on a lightmarl recipe with the *same* task settings forced on the command line
(agent count, continuous actions, episode length, scenario kwargs; see :data:`TASKS`), one after
the other, never two trainings at once. It then writes ``results.md`` (a table per task), a
``<task>.png`` learning-curve plot per task (evaluation return against training seconds, both
frameworks) and ``results.json`` into ``--out``.

Units. Both frameworks report the same quantity, so nothing is rescaled:

* BenchMARL's ``eval/agents/reward/episode_reward_mean`` (``Logger.log_evaluation``) is, per
  evaluation episode, ``reward.sum(0).mean()`` over the ``(time, agents, 1)`` reward of its
  group: the undiscounted episode return of each agent, averaged over the group's agents, then
  averaged over the episodes (``--benchmarl-eval-episodes``, 128 by default instead of BenchMARL's
  10, with deterministic actions; episodes cut at the first done).
* lightmarl's ``eval/<binding>/episode_return`` (``lightmarl.evaluation.episodes``) is the mean
  over episodes of the mean over the binding's agents of each agent's undiscounted return
  (greedy actions, ``evaluation.validation.episodes`` episodes).

A per-agent reward that a scenario shares (VMAS balance) is therefore the team reward in both;
a summed team return would be ``n_agents`` times these numbers.

Wall time. "train s" is each framework's own timer of collection plus updates, summed up to the
evaluation: BenchMARL's ``timers/collection_time + timers/training_time``, lightmarl's
``time/collect_s + time/update_s``. Evaluation and start-up are left out on both sides
(BenchMARL evaluates ``--benchmarl-eval-episodes``, lightmarl its recipe's ``evaluation.validation.episodes``); the whole process's
wall time is reported next to it ("process s").

Usage, from the repository root with lightmarl's virtualenv (the ``vmas`` extra and
``matplotlib`` installed)::

    python benchmarks/benchmarl/compare.py --setup          # once: BenchMARL's virtualenv
    python benchmarks/benchmarl/compare.py --tasks vmas_navigation vmas_balance --seeds 0 1

``--recipe`` trains another lightmarl recipe on the task (its settings still forced as above);
repeated as ``--recipe LABEL=PATH``, each recipe is a row of its own (``lightmarl:LABEL``) in the
same table, e.g. a control and the variant that differs from it::

    python benchmarks/benchmarl/compare.py --tasks vmas_transport --seeds 0 1 --frames 240000 \
        --recipe no_teacher=recipes/vmas_transport.yaml --recipe kickstarted=recipes/vmas_transport_kickstart.yaml

``--setup`` creates ``benchmarks/benchmarl/venv`` (ignored by git) with exactly
:data:`BENCHMARL_REQUIREMENTS`; ``--benchmarl-python`` uses another interpreter that has them.
Finished runs are kept under ``--out`` and reused (``--rerun`` runs them again), so a table can
be completed one task at a time. ``--from-json NAME`` continues a committed table
(``benchmarks/results/NAME.json``) whose run folder is gone: its runs count as finished, so
``--seeds 2`` adds seed 2 to them, and the table written with ``--json`` names every seed in its
command; the committed command must have had the same settings and frames. A lightmarl run records a digest of
its recipe and the map's overrides, and a continued run whose digest differs is refused; ``--rerun-algorithms
A ...`` (with ``--frameworks lightmarl``, lightmarl's only) runs those algorithms' runs again. lightmarl's runs go through lightmarl's sweep runner
(:func:`fit_recipe`, :class:`lightmarl.experiments.runner.SweepRunner`): each has its run directory
``<out>/<cell>/<framework>/runs/<framework>/seed_<n>/`` with its ``sweep.log`` and state, one that was
interrupted resumes from its ``last.ckpt``, one whose recorded settings differ from the map's now is refused
by the runner, and a run asked again (``--rerun``, ``--rerun-algorithms``) is trained afresh in an emptied
directory; the means and intervals over seeds are
:func:`lightmarl.experiments.statistics.seed_mean` and ``seed_difference``.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lightmarl.experiments.runner import LOG_FILE, SweepRunner, metric_rows, run_directory
from lightmarl.experiments.spec import SweepSpec, parse_override_args, parse_sweep
from lightmarl.experiments.statistics import seed_difference, seed_mean

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_VENV = HERE / "venv"
DEFAULT_OUT = HERE / "runs"
#: the frameworks a comparison runs.
FRAMEWORKS = ("benchmarl", "lightmarl")
#: where ``--json`` writes and ``--from-json`` reads (results.py's folder).
RESULTS_DIR = ROOT / "benchmarks" / "results"
#: BenchMARL pins an older TorchRL than lightmarl; torch is pinned in the same pip command so
#: that pip takes the CPU wheel instead of resolving a multi-GB CUDA build.
BENCHMARL_REQUIREMENTS = (
    "torch==2.13.0",
    "benchmarl==1.5.2",
    "torchrl==0.11.1",
    "tensordict==0.11.0",
    "vmas==1.5.2",
    "pettingzoo[mpe]==1.25.0",
)
#: BenchMARL evaluates only at multiples of its collection batch (6,000 frames by default).
BENCHMARL_BATCH_FRAMES = 6000
#: Episodes per BenchMARL evaluation: lightmarl's navigation recipe's 128 rather than BenchMARL's 10,
#: so both sides' evaluation means are precise enough to compare (VMAS plays them in one batch).
BENCHMARL_EVAL_EPISODES = 128


@dataclass(frozen=True)
class Task:
    """One task as both frameworks are told to build it.

    Attributes:
        benchmarl_task: BenchMARL's task config name (``vmas/navigation``).
        recipe: the lightmarl recipe trained on it.
        settings: the task's settings, passed to BenchMARL as ``task.<key>=<value>`` and to
            lightmarl as its env's scenario / env kwargs (see :meth:`lightmarl_overrides`).
        max_steps_key: the name of the episode length among ``settings``.
    """

    benchmarl_task: str
    recipe: str
    settings: dict[str, Any]
    max_steps_key: str = "max_steps"
    lightmarl_env: str = "vmas"
    extra_lightmarl_args: tuple[str, ...] = field(default=())

    def benchmarl_overrides(self) -> list[str]:
        return [f"task.{key}={_hydra_value(value)}" for key, value in self.settings.items()]

    def lightmarl_overrides(self) -> list[str]:
        """Force the task settings on the recipe: whatever the recipe says, lightmarl plays BenchMARL's task.

        BenchMARL prefers continuous actions (``experiment.prefer_continuous_actions: true``)
        wherever a task has both, so lightmarl is given continuous actions too."""
        settings = dict(self.settings)
        episode = settings.pop(self.max_steps_key)
        if self.lightmarl_env == "vmas":
            return [
                f"--model.env.init_args.scenario={self.benchmarl_task.split('/')[1]}",
                f"--model.env.init_args.scenario_kwargs={json.dumps(settings)}",
                f"--model.env.init_args.max_steps={episode}",
                "--model.env.init_args.continuous_actions=true",
                *self.extra_lightmarl_args,
            ]
        kwargs = {**settings, self.max_steps_key: episode, "continuous_actions": True}
        return [f"--model.env.env_kwargs={json.dumps(kwargs)}", *self.extra_lightmarl_args]


def with_settings(task: Task, assignments: Sequence[str]) -> Task:
    """``task`` with ``KEY=VALUE`` assignments applied to its settings (values read as YAML).

    Only settings the task already has can change: BenchMARL's task configs refuse keys they
    do not declare, so a new key could not reach both frameworks."""
    import yaml

    settings = dict(task.settings)
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            raise ValueError(f"{assignment!r}: write KEY=VALUE")
        if key not in settings:
            raise ValueError(f"{key!r} is not one of the task's settings ({', '.join(settings)})")
        settings[key] = yaml.safe_load(value)
    return replace(task, settings=settings)


def settings_map() -> Any:
    """benchmarks/benchmarl/settings_map.py, BenchMARL's settings and their lightmarl keys."""
    sys.path.insert(0, str(HERE))
    import settings_map as module

    return module


def benchmarl_task_defaults(name: str) -> dict[str, Any]:
    """BenchMARL 1.5.2's ``conf/task/<name>.yaml`` settings, as the settings map holds them."""
    return dict(settings_map().BENCHMARL_DEFAULTS[f"task/{name}"])


def _hydra_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


#: BenchMARL 1.5.2's own task configs (``benchmarl/conf/task/...``), so that both frameworks get
#: them from here; the VMAS tasks of the settings map are its copy of them.
TASKS = {
    "vmas_balance": Task(
        benchmarl_task="vmas/balance",
        recipe="recipes/vmas_balance.yaml",
        settings=benchmarl_task_defaults("vmas/balance"),
    ),
    "vmas_navigation": Task(
        benchmarl_task="vmas/navigation",
        recipe="recipes/vmas_navigation.yaml",
        settings=benchmarl_task_defaults("vmas/navigation"),
    ),
    "vmas_sampling": Task(
        benchmarl_task="vmas/sampling",
        recipe="recipes/benchmarl/mappo.yaml",
        settings=benchmarl_task_defaults("vmas/sampling"),
    ),
    "vmas_transport": Task(
        benchmarl_task="vmas/transport",
        recipe="recipes/vmas_transport.yaml",
        settings={
            "max_steps": 100,
            "n_agents": 4,
            "n_packages": 1,
            "package_width": 0.15,
            "package_length": 0.15,
            "package_mass": 50,
        },
    ),
    "simple_spread": Task(
        benchmarl_task="pettingzoo/simple_spread",
        recipe="recipes/mappo_simple_spread_continuous.yaml",
        settings={"max_cycles": 100, "N": 3, "local_ratio": 0.5},
        max_steps_key="max_cycles",
        lightmarl_env="pettingzoo",
    ),
}


@dataclass
class Curve:
    """Evaluation points of one run: frames, training seconds, return (same length)."""

    frames: list[float]
    train_s: list[float]
    returns: list[float]
    process_s: float
    #: the update part of ``train_s`` (BenchMARL's ``timers/training_time``, lightmarl's ``time/update_s``).
    update_s: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "train_s": self.train_s,
            "returns": self.returns,
            "process_s": self.process_s,
            "update_s": self.update_s,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Curve:
        return cls(data["frames"], data["train_s"], data["returns"], data["process_s"], data.get("update_s", []))


# -- setup ----------------------------------------------------------------------------------------
def setup_venv(venv: Path) -> Path:
    """Create ``venv`` with BenchMARL's pinned requirements; its python."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", *BENCHMARL_REQUIREMENTS], check=True
    )
    check_benchmarl(python)
    return python


def check_benchmarl(python: Path) -> None:
    """Fail early, naming the fix, when ``python`` lacks the pinned BenchMARL stack."""
    if not python.exists():
        raise SystemExit(f"{python}: no such interpreter; run `{Path(__file__).name} --setup` first")
    probe = "import benchmarl, torchrl, vmas, pettingzoo.mpe; print(benchmarl.__version__, torchrl.__version__)"
    result = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{python} cannot import BenchMARL's stack: {result.stderr.strip().splitlines()[-1:]}")
    found = result.stdout.split()
    if found != ["1.5.2", "0.11.1"]:
        raise SystemExit(f"{python}: expected benchmarl 1.5.2 and torchrl 0.11.1, found {found}")


# -- running --------------------------------------------------------------------------------------
def single_thread_env() -> dict[str, str]:
    # Small MLPs step fastest on one thread; more threads spin-wait on a shared machine.
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_logged(command: Sequence[str], cwd: Path, log: Path) -> float:
    """Run ``command`` in ``cwd`` with output to ``log``; its wall seconds. Raises on failure."""
    cwd.mkdir(parents=True, exist_ok=True)
    print("+", shlex.join(command), flush=True)
    started = time.perf_counter()
    with open(log, "w") as out:
        result = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=single_thread_env())
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise SystemExit(f"{command[0]} failed (exit {result.returncode}); the end of {log}:\n" + "\n".join(tail))
    return seconds


def run_benchmarl(
    python: Path,
    task: Task,
    seed: int,
    frames: int,
    run_dir: Path,
    eval_episodes: int,
    algorithm: str = "mappo",
    settings: Sequence[str] = (),
) -> Curve:
    """BenchMARL's command line on ``task`` with ``algorithm`` and ``settings`` (``section.key=value``)."""
    # BenchMARL runs in run_dir and reads its save folder relative to that: give it an absolute one.
    run_dir = run_dir.resolve()
    command = [
        str(python),
        "-m",
        "benchmarl.run",
        f"algorithm={algorithm}",
        f"task={task.benchmarl_task}",
        f"seed={seed}",
        f"experiment.max_n_frames={frames}",
        "experiment.loggers=[csv]",
        "experiment.render=false",
        f"experiment.evaluation_interval={BENCHMARL_BATCH_FRAMES}",
        f"experiment.evaluation_episodes={eval_episodes}",
        f"experiment.save_folder={run_dir}",
        f"hydra.run.dir={run_dir / 'hydra'}",
        *task.benchmarl_overrides(),
        *settings,
    ]
    seconds = run_logged(command, run_dir, run_dir / "log.txt")
    return read_benchmarl_curve(run_dir, seconds)


def read_benchmarl_curve(run_dir: Path, process_s: float) -> Curve:
    """The evaluation curve in BenchMARL's csv scalars (``<name>.csv``: ``step,value`` rows, step = iteration)."""
    # A run started again (after an interrupted one) writes a second experiment folder beside the first; the
    # folders' names begin with a hash, so the one written last is the newest file, not the last name.
    found = sorted(run_dir.glob("*/*/scalars/eval_reward_episode_reward_mean.csv"), key=lambda f: f.stat().st_mtime)
    if not found:
        raise SystemExit(f"{run_dir}: no BenchMARL eval_reward_episode_reward_mean.csv")
    scalars = found[-1].parent

    def series(name: str) -> dict[int, float]:
        with open(scalars / f"{name}.csv") as f:
            return {int(float(row[0])): float(row[1]) for row in csv.reader(f) if row}

    evals = series("eval_reward_episode_reward_mean")
    frames = series("counters_total_frames")
    training = series("timers_training_time")
    spent = {k: v + training[k] for k, v in series("timers_collection_time").items()}
    cumulative, updating, total, total_update = {}, {}, 0.0, 0.0
    for step in sorted(spent):
        total += spent[step]
        total_update += training[step]
        cumulative[step], updating[step] = total, total_update
    steps = sorted(evals)
    return Curve(
        [frames[s] for s in steps],
        [cumulative[s] for s in steps],
        [evals[s] for s in steps],
        process_s,
        [updating[s] for s in steps],
    )


def run_lightmarl(
    task: Task,
    seed: int,
    frames: int,
    out_dir: Path,
    recipe: str | None,
    name: str = "lightmarl",
    *,
    fresh: bool = False,
) -> Curve:
    return fit_recipe(recipe or task.recipe, seed, frames, out_dir, task.lightmarl_overrides(), name, fresh=fresh)


# -- every algorithm, through the settings map ------------------------------------------------------
#: BenchMARL's algorithm names, each trained by lightmarl from recipes/benchmarl/<name>.yaml.
ALGORITHMS = ("mappo", "ippo", "maddpg", "iddpg", "masac", "isac", "qmix", "vdn", "iql")


def parse_benchmarl_settings(assignments: Sequence[str]) -> dict[str, Any]:
    """``section.key=value`` (BenchMARL's command-line form, values read as YAML) -> {``section.key``: value}."""
    import yaml

    changes: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or key.count(".") != 1:
            raise ValueError(
                f"{assignment!r}: write SECTION.KEY=VALUE, e.g. experiment.off_policy_n_optimizer_steps=100"
            )
        changes[key] = yaml.safe_load(value)
    return changes


@dataclass(frozen=True)
class AlgorithmRun:
    """One algorithm on one task as both frameworks run it: BenchMARL's arguments and lightmarl's.

    Attributes:
        algorithm: BenchMARL's algorithm name.
        recipe: lightmarl's recipe (``recipes/benchmarl/<algorithm>.yaml``).
        benchmarl_settings: BenchMARL command-line settings beyond the task and budget (the reductions).
        lightmarl_overrides: every lightmarl setting the map derives from BenchMARL's configuration.
        optimizer_steps: optimizer steps per collected batch (off-policy: ``off_policy_n_optimizer_steps``).
        batch_frames: frames per collected batch.
    """

    algorithm: str
    recipe: str
    benchmarl_settings: tuple[str, ...]
    lightmarl_overrides: tuple[str, ...]
    optimizer_steps: int
    batch_frames: int


def algorithm_run(
    task: Task, algorithm: str, frames: int, eval_episodes: int, changes: Sequence[str] = ()
) -> AlgorithmRun:
    """``algorithm`` on ``task`` with BenchMARL's configuration (its defaults, the task's settings, the frame
    budget, an evaluation after every batch, and ``changes``) and lightmarl's settings mapped from it."""
    module = settings_map()
    user = parse_benchmarl_settings(changes)
    off_policy = module.ALGORITHMS[algorithm][0] in module.OFF_POLICY
    prefix = "off_policy" if off_policy else "on_policy"
    batch = int(user.get(f"experiment.{prefix}_collected_frames_per_batch", BENCHMARL_BATCH_FRAMES))
    run = {
        "experiment.max_n_frames": frames,
        "experiment.evaluation_interval": batch,
        "experiment.evaluation_episodes": eval_episodes,
        "experiment.render": False,
        "experiment.loggers": ["csv"],
        **{f"task.{key}": value for key, value in task.settings.items()},
        **user,
    }
    config = module.benchmarl_config(algorithm, task.benchmarl_task, run)
    settings = module.lightmarl_settings(algorithm, config)
    overrides = [f"--model.env.init_args.scenario={task.benchmarl_task.split('/')[1]}"]
    overrides += module.cli_overrides(algorithm, settings)
    if off_policy:
        steps = int(config["experiment"]["off_policy_n_optimizer_steps"])
    else:
        # BenchMARL's iterations each take ceil(batch / minibatch size) minibatches, one optimizer step each.
        minibatch = int(config["experiment"]["on_policy_minibatch_size"])
        steps = int(config["experiment"]["on_policy_n_minibatch_iters"]) * -(-batch // minibatch)
    return AlgorithmRun(
        algorithm=algorithm,
        recipe=f"{module.RECIPES_DIR}/{algorithm}.yaml",
        benchmarl_settings=tuple(changes),
        lightmarl_overrides=tuple(overrides),
        optimizer_steps=steps,
        batch_frames=batch,
    )


def lightmarl_sweep(
    recipe: str,
    seeds: Sequence[int],
    frames: int,
    out_dir: Path,
    overrides: Sequence[str] = (),
    name: str = "lightmarl",
) -> SweepSpec:
    """The sweep of one lightmarl side of a comparison: ``recipe`` (relative to the repository) with the frame
    budget and ``overrides`` on every seed, no validation (the curve is the fit's periodic evaluation).

    Args:
        recipe: the recipe, relative to the repository root.
        seeds: the seeds.
        frames: ``model.max_frames`` of every run.
        out_dir: the sweep's folder; each run's directory is ``<out_dir>/runs/<name>/seed_<n>``.
        overrides: further ``--key=value`` arguments of ``lightmarl fit``.
        name: the config's name (letters, digits, ``.``, ``_``, ``-``).
    """
    raw = {
        "name": name,
        "out_dir": str(Path(out_dir).resolve()),
        "seeds": list(seeds),
        "validate": False,
        "overrides": {"model.max_frames": frames, **parse_override_args(overrides, where="lightmarl overrides")},
        "configs": [{"name": name, "recipe": str(ROOT / recipe)}],
    }
    return parse_sweep(raw, default_name=name, where="compare.py")


def fit_recipe(
    recipe: str,
    seed: int,
    frames: int,
    out_dir: Path,
    overrides: Sequence[str] = (),
    name: str = "lightmarl",
    *,
    fresh: bool = False,
) -> Curve:
    """``lightmarl fit`` on ``recipe`` (relative to the repository) with the seed, frame budget and
    ``overrides``, one run of :func:`lightmarl_sweep` through lightmarl's :class:`SweepRunner` (its own run
    directory and log; a finished run is read again, an interrupted one resumes from its ``last.ckpt``, one
    made with other settings is refused); its evaluation curve. ``fresh`` (a rerun) deletes the run's
    directory first."""
    spec = lightmarl_sweep(recipe, [seed], frames, out_dir, overrides, name)
    [run] = spec.runs()
    run_dir = run_directory(spec, run)
    if fresh:
        shutil.rmtree(run_dir, ignore_errors=True)
    state = SweepRunner(spec, workers=1).run_one(run)
    if state["status"] != "done":
        tail = (run_dir / LOG_FILE).read_text().splitlines()[-15:]
        raise SystemExit(
            f"{run.run_id} {state['status']}: {state['error']}; the end of {run_dir / LOG_FILE}:\n" + "\n".join(tail)
        )
    return read_lightmarl_curve(run_dir, state["wall_s"])


def run_lightmarl_cli(subcommand: str, recipe: str, run_dir: Path, arguments: Sequence[str]) -> float:
    """``lightmarl <subcommand> --config <recipe>`` writing into ``run_dir``; its wall seconds."""
    lightmarl = Path(sys.executable).with_name("lightmarl")
    command = [
        str(lightmarl),
        subcommand,
        "--config",
        str(ROOT / recipe),
        *arguments,
        f"--trainer.default_root_dir={run_dir}",
    ]
    return run_logged(command, run_dir, run_dir / "log.txt")


def run_random(task: Task, run_dir: Path) -> float:
    return random_return(task.recipe, run_dir, task.lightmarl_overrides())


def random_return(recipe: str, run_dir: Path, overrides: Sequence[str] = ()) -> float:
    """lightmarl's evaluation of uniformly random actions on ``recipe``'s binding ``main`` (the
    same seeded episodes as the recipe's other evaluations)."""
    run_lightmarl_cli("validate", recipe, run_dir, random_play_arguments(overrides))
    return read_lightmarl_curve(run_dir, 0.0, evaluation_only=True).returns[-1]


def random_play_arguments(overrides: Sequence[str]) -> list[str]:
    """``overrides`` with the recipe's policy replaced by uniformly random actions.

    The random policy comes last: the settings map's overrides name the recipe's own policy
    (``--model.policy_bindings=...``), and the last value of an option is the one that holds."""
    return [*overrides, "--model.policy_bindings=[{id: main, class_path: lightmarl.policies.UniformRandomPolicy}]"]


def read_lightmarl_curve(run_dir: Path, process_s: float, evaluation_only: bool = False) -> Curve:
    """The evaluation curve in lightmarl's CSV log (:func:`lightmarl.experiments.runner.metric_rows`): each
    ``eval/*/episode_return`` row at the frames and the collection + update seconds of the training rows before
    it (file order)."""
    rows = metric_rows(run_dir)  # every metrics.csv of the run, oldest first: a resumed run's too
    if not rows:
        raise SystemExit(f"{run_dir}: no csv/version_*/metrics.csv")
    curve = Curve([], [], [], process_s)
    frames, spent, updating = 0.0, 0.0, 0.0
    for row in rows:
        if "counters/frames" in row:
            frames = row["counters/frames"]
            spent += row["time/collect_s"] + row["time/update_s"]
            updating += row["time/update_s"]
        returns = [v for k, v in row.items() if k.startswith("eval/") and k.endswith("/episode_return")]
        if returns and (frames or evaluation_only):
            curve.frames.append(frames)
            curve.train_s.append(spent)
            curve.returns.append(sum(returns) / len(returns))
            curve.update_s.append(updating)
    if not curve.returns:
        raise SystemExit(f"{run_dir}: no eval/<binding>/episode_return rows")
    return curve


# -- summary --------------------------------------------------------------------------------------
def first_reaching(curve: Curve, target: float) -> tuple[float, float] | None:
    """(frames, train seconds) of the first evaluation at or above ``target``; None if never."""
    for frames, seconds, value in zip(curve.frames, curve.train_s, curve.returns):
        if value >= target:
            return frames, seconds
    return None


def value_at(curve: Curve, xs: list[float], x: float) -> float | None:
    """The latest evaluation at or before ``x`` (frames or seconds); None before the first one."""
    best = None
    for xi, value in zip(xs, curve.returns):
        if xi <= x + 1e-9:
            best = value
    return best


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def task_table(name: str, runs: dict[str, dict[int, Curve]]) -> list[str]:
    """Markdown rows: per seed, both frameworks' final return, lightmarl's time to BenchMARL's final
    return and lightmarl's return at BenchMARL's training seconds."""
    lines = [
        f"### {name}",
        "",
        "| seed | framework | eval return at 30k / final frames | final frames | train s | process s "
        "| reaches BenchMARL's final return at (frames, train s) | return at BenchMARL's final train s |",
        "| ---: | --- | --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for seed in sorted(runs.get("benchmarl", {})):
        reference = runs["benchmarl"][seed]
        target, budget = reference.returns[-1], reference.train_s[-1]
        for framework in framework_order(runs):
            curve = runs[framework].get(seed)
            if curve is None:
                continue
            reached = first_reaching(curve, target)
            lines.append(
                f"| {seed} | {framework} | {_fmt(value_at(curve, curve.frames, 30_000))} / "
                f"{_fmt(curve.returns[-1])} | {curve.frames[-1]:,.0f} | {curve.train_s[-1]:.0f} | "
                f"{curve.process_s:.0f} | "
                + ("never" if reached is None else f"{reached[0]:,.0f}, {reached[1]:.0f} s")
                + f" | {_fmt(value_at(curve, curve.train_s, budget))} |"
            )
    return lines


def seed_mean_tables(runs: dict[str, dict[int, Curve]]) -> list[str]:
    """:func:`seed_mean_table` of each lightmarl variant against BenchMARL."""
    lines: list[str] = []
    for variant in framework_order(runs):
        if variant != "benchmarl":
            pair = {"benchmarl": runs.get("benchmarl", {}), "lightmarl": runs[variant]}
            table = seed_mean_table(pair)
            if table and variant != "lightmarl":
                table = [f"**{variant}**", "", *table]
            lines += [*table, ""] if table else []
    return lines


def seed_mean_table(runs: dict[str, dict[int, Curve]]) -> list[str]:
    """Markdown lines comparing the frameworks over seeds rather than seed by seed.

    A seed number means nothing across two frameworks (each draws its own random streams from
    it), so the per-seed rows above pair runs arbitrarily. Here: each framework's final return,
    mean over its seeds with a Student-t 95% interval, the Welch interval of the difference, and,
    at each of BenchMARL's evaluations (its training seconds averaged over seeds), both frameworks'
    mean return then (lightmarl's latest evaluation at or before that time, on each seed).
    """
    reference, ours = runs.get("benchmarl", {}), runs.get("lightmarl", {})
    if len(reference) < 2 or len(ours) < 2:
        return []
    finals = {framework: [curve.returns[-1] for curve in runs[framework].values()] for framework in runs}
    lines = ["Over seeds (final return: mean [95% t interval] over the seeds):", ""]
    for framework in ("benchmarl", "lightmarl"):
        summary = seed_mean(finals[framework])
        low, high = summary["ci95"]
        lines.append(f"- {framework}: {summary['mean']:.3f} [{low:.3f}, {high:.3f}] over {summary['n']} seeds")
    gap = seed_difference(finals["lightmarl"], finals["benchmarl"])
    target = sum(finals["benchmarl"]) / len(finals["benchmarl"])
    budget = sum(curve.train_s[-1] for curve in reference.values()) / len(reference)
    reached = "never"
    for k in range(min(len(curve.returns) for curve in ours.values())):
        if sum(curve.returns[k] for curve in ours.values()) / len(ours) >= target:
            seconds = sum(curve.train_s[k] for curve in ours.values()) / len(ours)
            reached = f"at {seconds:.0f} train s, {seconds / budget:.2f} of BenchMARL's {budget:.0f} s"
            break
    lines += [
        f"- lightmarl − BenchMARL: {gap.difference:+.3f} [Welch 95%: {gap.ci_low:+.3f}, {gap.ci_high:+.3f}]",
        f"- lightmarl's mean over seeds first reaches BenchMARL's final mean ({target:.3f}): {reached}",
        "",
        "| BenchMARL evaluation | mean train s | BenchMARL mean return | lightmarl mean return at that train s |",
        "| ---: | ---: | ---: | ---: |",
    ]
    evaluations = min(len(curve.returns) for curve in reference.values())
    for k in range(evaluations):
        seconds = sum(curve.train_s[k] for curve in reference.values()) / len(reference)
        theirs = sum(curve.returns[k] for curve in reference.values()) / len(reference)
        at_time = [value_at(curve, curve.train_s, seconds) for curve in ours.values()]
        mine = None if None in at_time else sum(v for v in at_time if v is not None) / len(at_time)
        frames = sum(curve.frames[k] for curve in reference.values()) / len(reference)
        lines.append(f"| {frames:,.0f} frames | {seconds:.0f} | {theirs:.3f} | {_fmt(mine, 3)} |")
    return lines


def result_rows(runs: dict[str, dict[int, Curve]]) -> list[list[Any]]:
    """Per seed and framework: the final frames, the evaluation return at half of them and at the end,
    the mean of the last five evaluations, the best one, and the training seconds."""
    rows: list[list[Any]] = []
    seeds = sorted({seed for curves in runs.values() for seed in curves})
    for seed in seeds:
        for framework in framework_order(runs):
            curve = runs[framework].get(seed)
            if curve is None:
                continue
            last = curve.returns[-5:]
            rows.append(
                [
                    seed,
                    framework,
                    curve.frames[-1],
                    value_at(curve, curve.frames, curve.frames[-1] / 2),
                    curve.returns[-1],
                    sum(last) / len(last),
                    max(curve.returns),
                    curve.train_s[-1],
                ]
            )
    return rows


def write_json(
    name: str,
    task: str,
    results: dict[str, Any],
    argv: Sequence[str],
    directory: Path | None = None,
    spec: Task | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """``task``'s runs in ``results`` as ``benchmarks/results/<name>.json`` (the docs' table), every
    run's evaluation curve kept under ``per_seed``; ``spec`` is the task as run (default ``TASKS[task]``)."""
    spec = spec or TASKS[task]
    sys.path.insert(0, str(HERE.parent))  # benchmarks/, where results.py lives
    from results import write_result

    runs: dict[str, dict[int, Curve]] = {}
    per_seed: dict[str, Any] = {}
    for key, data in results.items():
        if key.count("/") == 2 and key.startswith(f"{task}/"):
            _, framework, seed = key.split("/")
            runs.setdefault(framework, {})[int(seed)] = Curve.from_json(data)
            per_seed[f"{seed} / {framework}"] = data
    if not runs:
        raise SystemExit(f"--json: no runs of task {task!r} in the results")
    random = results.get(f"{task}/random", {}).get("return")
    if random is not None:
        per_seed["random"] = {"return": random}
    seeds = ", ".join(f"{framework} {len(curves)}" for framework, curves in sorted(runs.items()))
    command = command_of(argv)
    return write_result(
        name,
        command=command,
        per_seed=per_seed,
        columns=[
            "seed",
            "framework",
            {"name": "frames", "format": ",.0f"},
            {"name": "eval return at half the frames", "format": ".3f"},
            {"name": "final eval return", "format": ".3f"},
            {"name": "mean of the last 5 evaluations", "format": ".3f"},
            {"name": "best evaluation", "format": ".3f"},
            {"name": "train s", "format": ",.0f"},
        ],
        rows=result_rows(runs),
        notes=(
            f"{spec.benchmarl_task} ({', '.join(f'{k} {v}' for k, v in spec.settings.items())}); "
            "greedy evaluation return, mean per agent"
            + ("" if random is None else f"; uniformly random actions: {random:.4f}")
            + f"; seeds: {seeds}."
        ),
        directory=directory,
        extra=extra,
    )


def algorithm_rows(results: dict[str, Any], task: str) -> list[list[Any]]:
    """Per algorithm of ``task`` in ``results`` and framework: seeds, frames, final return (mean and 95% t
    interval over seeds), random play's return, frames per training second, optimizer steps per update
    second, and the training seconds at which the framework's seed mean first reaches BenchMARL's final mean
    (as a fraction of BenchMARL's training seconds)."""
    rows: list[list[Any]] = []
    for cell in cell_names(results):
        name, _, algorithm = cell.partition(":")
        if name != task or not algorithm:
            continue
        runs: dict[str, list[dict[str, Any]]] = {}
        for key, data in results.items():
            if key.count("/") == 2 and key.split("/")[0] == cell:
                runs.setdefault(key.split("/")[1], []).append(data)
        reference = runs.get("benchmarl", [])
        target = sum(d["returns"][-1] for d in reference) / len(reference) if reference else None
        budget = sum(d["train_s"][-1] for d in reference) / len(reference) if reference else None
        for framework in framework_order(runs):
            data = runs[framework]
            finals = [d["returns"][-1] for d in data]
            summary = seed_mean(finals)
            low, high = summary["ci95"] or (None, None)
            frames = sum(d["frames"][-1] for d in data) / len(data)
            train_s = sum(d["train_s"][-1] for d in data) / len(data)
            update_s = [d["update_s"][-1] for d in data if d.get("update_s")]
            steps = data[0].get("optimizer_steps", 0) * frames / data[0].get("batch_frames", BENCHMARL_BATCH_FRAMES)
            reached = None
            if target is not None and budget and framework != "benchmarl":
                for k in range(min(len(d["returns"]) for d in data)):
                    if sum(d["returns"][k] for d in data) / len(data) >= target:
                        reached = sum(d["train_s"][k] for d in data) / len(data) / budget
                        break
            rows.append(
                [
                    algorithm,
                    framework,
                    len(data),
                    frames,
                    summary["mean"],
                    low,
                    high,
                    results.get(f"{cell}/random", {}).get("return"),
                    frames / train_s if train_s else None,
                    steps / (sum(update_s) / len(update_s)) if update_s and steps else None,
                    train_s,
                    reached,
                ]
            )
    return rows


def write_algorithms_json(
    name: str,
    task: str,
    results: dict[str, Any],
    argv: Sequence[str],
    directory: Path | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Every algorithm cell of ``task`` in ``results`` as ``benchmarks/results/<name>.json`` (the docs' table
    of the task), every run's curve kept under ``per_seed``."""
    sys.path.insert(0, str(HERE.parent))  # benchmarks/, where results.py lives
    from results import write_result

    rows = algorithm_rows(results, task)
    if not rows:
        raise SystemExit(f"--json: no algorithm runs of task {task!r} in the results")
    per_seed = {key: data for key, data in results.items() if key.split("/")[0].startswith(f"{task}:")}
    command = command_of(argv)
    spec = TASKS[task]
    return write_result(
        name,
        command=command,
        per_seed=per_seed,
        columns=[
            "algorithm",
            "framework",
            "seeds",
            {"name": "frames", "format": ",.0f"},
            {"name": "final eval return (mean)", "format": ".3f"},
            {"name": "95% low", "format": ".3f"},
            {"name": "95% high", "format": ".3f"},
            {"name": "random actions", "format": ".3f"},
            {"name": "frames / train s", "format": ",.0f"},
            {"name": "optimizer steps / update s", "format": ",.0f"},
            {"name": "train s", "format": ",.0f"},
            {"name": "reaches BenchMARL's final mean at (x its train s)", "format": ".2f"},
        ],
        rows=rows,
        notes=(
            f"{spec.benchmarl_task} ({', '.join(f'{k} {v}' for k, v in spec.settings.items())}); greedy evaluation "
            "return, mean per agent; both frameworks with BenchMARL 1.5.2's settings mapped by "
            "benchmarks/benchmarl/settings_map.py and the changes in the command; '—' in the last column: never "
            "(BenchMARL's own row: not applicable)."
        ),
        directory=directory,
        extra=extra,
    )


def plot_task(name: str, runs: dict[str, dict[int, Curve]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    palette = iter(["tab:blue", "tab:green", "tab:purple", "tab:red", "tab:brown"])
    colors = {
        framework: "tab:orange" if framework == "benchmarl" else next(palette) for framework in framework_order(runs)
    }
    for framework, curves in runs.items():
        for i, (seed, curve) in enumerate(sorted(curves.items())):
            ax.plot(
                curve.train_s,
                curve.returns,
                marker="o",
                markersize=3,
                color=colors[framework],
                alpha=0.5 + 0.5 / (i + 1),
                label=f"{framework} seed {seed}",
            )
    ax.set_xlabel("training seconds (collection + updates)")
    ax.set_ylabel("eval return (mean per agent)")
    ax.set_title(name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def framework_order(runs: dict[str, Any]) -> list[str]:
    """BenchMARL first, then lightmarl and its labelled recipes (``lightmarl:<label>``) by name."""
    return sorted(runs, key=lambda framework: (framework != "benchmarl", framework))


def lightmarl_variants(recipes: Sequence[str]) -> dict[str, str | None]:
    """``--recipe`` values -> {framework key: recipe (``None``: the task's own)}.

    No value: the task's recipe, as ``lightmarl``. One unlabelled path: that recipe, as
    ``lightmarl``. ``LABEL=PATH`` values (any number): each recipe as ``lightmarl:LABEL``, so one
    table holds several lightmarl recipes next to BenchMARL (a control and a variant, say)."""
    if not recipes:
        return {"lightmarl": None}
    if len(recipes) == 1 and "=" not in recipes[0]:
        return {"lightmarl": recipes[0]}
    variants: dict[str, str | None] = {}
    for entry in recipes:
        label, sep, path = entry.partition("=")
        if not sep or not label.isidentifier() or not path:
            raise ValueError(f"{entry!r}: with several recipes, write LABEL=PATH (LABEL a name: letters, digits, _)")
        if f"lightmarl:{label}" in variants:
            raise ValueError(f"label {label!r} is given twice")
        variants[f"lightmarl:{label}"] = path
    return variants


def load_average() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The command line of :func:`main` (also read back from a committed result's ``command``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setup", action="store_true", help=f"create {DEFAULT_VENV} with BenchMARL and exit")
    parser.add_argument("--benchmarl-python", type=Path, default=DEFAULT_VENV / "bin" / "python")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--frames", type=int, default=60_000, help="frame budget of every run (env steps)")
    parser.add_argument(
        "--lightmarl-frames",
        type=int,
        help="lightmarl's frame budget (default: --frames); larger budgets compare at equal wall time",
    )
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    parser.add_argument(
        "--benchmarl-eval-episodes",
        type=int,
        default=BENCHMARL_EVAL_EPISODES,
        help="episodes of each BenchMARL evaluation (its default is 10, too few to compare policies: "
        "the initial distances alone move a 10-episode mean by about 0.1 on navigation)",
    )
    parser.add_argument(
        "--recipe",
        action="append",
        default=[],
        metavar="[LABEL=]PATH",
        help="a lightmarl recipe to use instead of the task's (one task only); repeat with LABEL=PATH to run "
        "several, each a row of its own (lightmarl:LABEL)",
    )
    parser.add_argument(
        "--task-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one of the task's settings in both frameworks (a YAML value; repeatable; one task only), "
        "e.g. package_mass=5",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rerun", action="store_true", help="run again runs that already have results")
    parser.add_argument(
        "--rerun-algorithms",
        nargs="+",
        default=[],
        choices=ALGORITHMS,
        metavar="ALGORITHM",
        help="run these algorithms' runs again (of --frameworks) where they have results, in --out or the "
        "--from-json result: runs trained with settings the map or the recipe no longer give",
    )
    parser.add_argument(
        "--rerun-random",
        action="store_true",
        help="measure random play again where it already has a result (the trainings are reused)",
    )
    parser.add_argument(
        "--json",
        metavar="NAME",
        help="also write benchmarks/results/NAME.json, the docs' table of the (one) task's runs",
    )
    parser.add_argument(
        "--algorithms",
        nargs="+",
        choices=ALGORITHMS,
        help="BenchMARL algorithms to compare with BenchMARL's own settings in both frameworks "
        "(recipes/benchmarl/<name>.yaml, settings mapped by settings_map.py); without it, MAPPO with each task's "
        "lightmarl recipe",
    )
    parser.add_argument(
        "--benchmarl-setting",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="with --algorithms: change one of BenchMARL's settings in both frameworks (repeatable), e.g. "
        "experiment.off_policy_n_optimizer_steps=100",
    )
    parser.add_argument(
        "--from-json",
        metavar="NAME",
        help="continue benchmarks/results/NAME.json (written by --json): its runs count as finished, so "
        "--seeds adds seeds to them; its command must have had this one's settings and frames",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.setup:
        print("BenchMARL ready:", setup_venv(DEFAULT_VENV))
        return
    if args.frames < BENCHMARL_BATCH_FRAMES or args.frames % BENCHMARL_BATCH_FRAMES:
        parser.error(f"--frames: BenchMARL collects {BENCHMARL_BATCH_FRAMES} frames per batch; give a multiple of it")
    if args.recipe and len(args.tasks) != 1:
        parser.error("--recipe: name exactly one task with --tasks")
    if args.recipe and args.algorithms:
        parser.error("--recipe: the --algorithms runs train recipes/benchmarl/<algorithm>.yaml")
    if args.benchmarl_setting and not args.algorithms:
        parser.error("--benchmarl-setting: only with --algorithms")
    try:
        variants = lightmarl_variants(args.recipe)
    except ValueError as error:
        parser.error(f"--recipe: {error}")
    if args.json and len(args.tasks) != 1:
        parser.error("--json: name exactly one task with --tasks")
    tasks = dict(TASKS)  # the tasks as this run plays them
    if args.task_setting:
        if len(args.tasks) != 1:
            parser.error("--task-setting: name exactly one task with --tasks")
        try:
            tasks[args.tasks[0]] = with_settings(TASKS[args.tasks[0]], args.task_setting)
        except ValueError as error:
            parser.error(f"--task-setting: {error}")
    # Every cell's settings are derived (and any unmatched BenchMARL value refused) before anything runs.
    plans: dict[str, AlgorithmRun] = {}
    for name in args.tasks:
        for algorithm in args.algorithms or ():
            lightmarl_frames = args.lightmarl_frames or args.frames
            if lightmarl_frames != args.frames:
                parser.error("--lightmarl-frames: the --algorithms runs use BenchMARL's budget on both sides")
            try:
                plans[cell_name(name, algorithm)] = algorithm_run(
                    tasks[name], algorithm, args.frames, args.benchmarl_eval_episodes, args.benchmarl_setting
                )
            except ValueError as error:
                parser.error(f"--algorithms {algorithm} on {name}: {error}")
    if "benchmarl" in args.frameworks:
        check_benchmarl(args.benchmarl_python)
    # Both frameworks run inside their run folders: every folder they are given must be absolute.
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}
    continued: dict[str, Any] | None = None
    if args.from_json:
        if len(args.tasks) != 1:
            parser.error("--from-json: name exactly one task with --tasks")
        try:
            continued = read_result(args.from_json)
            check_same_settings(parser, args, continued["command"])
            committed = committed_runs(continued, args.tasks[0])
            committed = {k: v for k, v in committed.items() if not rerun_key(k, args)}
            check_same_updates(committed, plans)
            results = merge_runs(results, committed)
        except ValueError as error:
            parser.error(f"--from-json {args.from_json}: {error}")

    cells = [(name, cell_name(name, a), a) for name in args.tasks for a in (args.algorithms or [None])]
    for name, cell, algorithm in cells:
        task = tasks[name]
        plan = plans.get(cell)
        for seed in args.seeds:
            runs = [(f, None) for f in args.frameworks if f == "benchmarl"]
            if plan is not None:
                runs += [("lightmarl", plan.recipe)] if "lightmarl" in args.frameworks else []
            else:
                runs += [(f, recipe) for f, recipe in variants.items() if "lightmarl" in args.frameworks]
            for framework, recipe in runs:
                key = f"{cell}/{framework}/{seed}"
                # A run asked again replaces its result and its run directory; one never finished resumes.
                rerun = key in results and (args.rerun or algorithm in args.rerun_algorithms)
                if key in results and not rerun:
                    continue
                label = framework.replace(":", "-")
                run_dir = args.out / cell.replace(":", "-") / f"{label}_seed{seed}"
                # lightmarl's runs: a sweep per cell and framework, <cell>/<framework>/runs/<framework>/seed_<n>.
                sweep_dir = args.out / cell.replace(":", "-") / label
                if framework == "benchmarl":
                    curve = run_benchmarl(
                        args.benchmarl_python,
                        task,
                        seed,
                        args.frames,
                        run_dir,
                        args.benchmarl_eval_episodes,
                        algorithm=algorithm or "mappo",
                        settings=plan.benchmarl_settings if plan else (),
                    )
                elif plan is not None:
                    curve = fit_recipe(plan.recipe, seed, args.frames, sweep_dir, plan.lightmarl_overrides, fresh=rerun)
                else:
                    frames = args.lightmarl_frames or args.frames
                    curve = run_lightmarl(task, seed, frames, sweep_dir, recipe, label, fresh=rerun)
                extra = {"optimizer_steps": plan.optimizer_steps, "batch_frames": plan.batch_frames} if plan else {}
                if plan and framework == "lightmarl":
                    extra["lightmarl_settings"] = lightmarl_settings(plan)
                results[key] = {
                    **curve.to_json(),
                    **extra,
                    "load": load_average(),
                    "date": time.strftime("%Y-%m-%d %H:%M"),
                }
                results_path.write_text(json.dumps(results, indent=1))
                print(
                    f"{key}: return {curve.returns[-1]:.3f} at {curve.frames[-1]:,.0f} frames, "
                    f"{curve.train_s[-1]:.0f} train s, {curve.process_s:.0f} process s, load {load_average()}"
                )
        key = f"{cell}/random"
        if key not in results or args.rerun or args.rerun_random:
            if plan is not None:
                value = random_return(
                    plan.recipe, args.out / cell.replace(":", "-") / "random", plan.lightmarl_overrides
                )
            else:
                value = run_random(task, args.out / name / "random")
            results[key] = {"return": value}
            results_path.write_text(json.dumps(results, indent=1))

    lines = [f"Machine: {platform.machine()}, {os.cpu_count()} CPUs; load at the end {load_average()}.", ""]
    for cell in cell_names(results):
        runs: dict[str, dict[int, Curve]] = {}
        random_value = results.get(f"{cell}/random", {}).get("return")
        for key, data in results.items():
            if key.count("/") != 2:
                continue
            cell_of, framework, seed = key.split("/")
            if cell_of == cell:
                runs.setdefault(framework, {})[int(seed)] = Curve.from_json(data)
        if not runs:
            continue
        lines += [*task_table(cell, runs), "", f"Uniformly random actions: {_fmt(random_value)}.", ""]
        lines += seed_mean_tables(runs)
        lines += [f"![{cell}]({cell.replace(':', '-')}.png)", ""]
        plot_task(cell, runs, args.out / f"{cell.replace(':', '-')}.png")
    (args.out / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))
    if args.json:
        argv = list(argv if argv is not None else sys.argv[1:])
        # The table holds every run of the folder (and of a continued result), whichever this call ran: the
        # command that reproduces it names all their seeds and none of this call's rerun options.
        keys = run_keys(results, args.tasks[0])
        held = [f for f in FRAMEWORKS if any(key.split("/")[1] == f for key in keys)]
        reproducing = reproducing_argv(argv, sorted({int(key.split("/")[2]) for key in keys}), held)
        extra: dict[str, Any] | None = None
        if continued is not None or command_of(reproducing) != command_of(argv):
            extra = {"command_run": command_of(argv)}
        if continued is not None:
            extra = {**(extra or {}), "continued": {k: continued.get(k) for k in CONTINUED_FIELDS}}
        argv = reproducing
        if args.algorithms:
            path = write_algorithms_json(args.json, args.tasks[0], results, argv, RESULTS_DIR, extra)
        else:
            path = write_json(args.json, args.tasks[0], results, argv, RESULTS_DIR, tasks[args.tasks[0]], extra)
        print("wrote", path)


# -- continuing a committed result ----------------------------------------------------------------
#: what a continued result records of the one it continues (under ``extra.continued``).
CONTINUED_FIELDS = ("command", "commit", "date", "machine")
#: the options that decide what a run measures: a continued result's runs must have had the same.
SAME_SETTINGS = (
    "frames",
    "lightmarl_frames",
    "benchmarl_eval_episodes",
    "recipe",
    "task_setting",
    "benchmarl_setting",
    "tasks",
)


def command_of(argv: Sequence[str]) -> str:
    """``python benchmarks/benchmarl/compare.py`` and ``argv``, an ``--out`` outside the repository written as
    ``benchmarks/benchmarl/runs/<folder name>`` (a result names no folder of the machine it ran on)."""
    sys.path.insert(0, str(HERE.parent))  # benchmarks/, where results.py lives
    from results import repository_path

    words = list(argv)
    for i, word in enumerate(words):
        name, has_value, value = word.partition("=")
        if name == "--out" and (has_value or i + 1 < len(words)):
            where = repository_path(value if has_value else words[i + 1], "benchmarks/benchmarl/runs")
            words[i : i + (1 if has_value else 2)] = ["--out", where]
            break
    return shlex.join(["python", "benchmarks/benchmarl/compare.py", *words])


def read_result(name: str, directory: Path | None = None) -> dict[str, Any]:
    """``benchmarks/results/<name>.json`` (or ``directory/<name>.json``), refused unless this script wrote it."""
    path = (directory or RESULTS_DIR) / f"{name}.json"
    if not path.exists():
        raise ValueError(f"no {path}")
    result = json.loads(path.read_text())
    words = shlex.split(result.get("command", ""))
    if words[:2] != ["python", "benchmarks/benchmarl/compare.py"]:
        raise ValueError(f"{path.name} was not written by compare.py (its command: {result.get('command')!r})")
    return result


def check_same_settings(parser: argparse.ArgumentParser, args: argparse.Namespace, command: str) -> None:
    """Raise ``ValueError`` naming the option when ``command`` (a committed result's) measured other settings."""
    before = parser.parse_args(shlex.split(command)[2:])
    for option in SAME_SETTINGS:
        if getattr(before, option) != getattr(args, option):
            flag = "--" + option.replace("_", "-")
            raise ValueError(f"its runs had {flag} {getattr(before, option)}, this run {getattr(args, option)}")
    # The written command names this run's algorithms: they must include every one the result holds.
    missing = set(before.algorithms or ()) - set(args.algorithms or ())
    if missing or bool(before.algorithms) != bool(args.algorithms):
        raise ValueError(f"its runs had --algorithms {before.algorithms}, this run {args.algorithms}")


def lightmarl_settings(plan: AlgorithmRun) -> str:
    """A digest of what a lightmarl run of ``plan`` trains with: its recipe file and the map's overrides."""
    text = (ROOT / plan.recipe).read_text() + "\n".join(plan.lightmarl_overrides)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rerun_key(key: str, args: argparse.Namespace) -> bool:
    """Whether the run ``<cell>/<framework>/<seed>`` is one ``--rerun-algorithms`` runs again."""
    parts = key.split("/")
    return len(parts) == 3 and parts[1] in args.frameworks and parts[0].partition(":")[2] in args.rerun_algorithms


def check_same_updates(runs: dict[str, Any], plans: dict[str, AlgorithmRun]) -> None:
    """Raise ``ValueError`` when a lightmarl run of a planned cell took other optimizer steps or batches than the
    cell's plan gives now (the settings map changed since it ran), or trained with another recipe or
    other mapped settings than the plan's (where it recorded them)."""
    for key, data in runs.items():
        plan = plans.get(key.split("/")[0])
        if plan is not None and data.get("lightmarl_settings", lightmarl_settings(plan)) != lightmarl_settings(plan):
            algorithm = key.split("/")[0].partition(":")[2]
            raise ValueError(
                f"{key} trained with another recipe or other mapped settings than {plan.recipe} and the map give "
                f"now: run it again (--rerun-algorithms {algorithm})"
            )
        if plan is None or "optimizer_steps" not in data:
            continue
        if key.split("/")[1] == "benchmarl":
            # BenchMARL's run is its command line, which check_same_settings holds equal; its count is the map's
            # reading of BenchMARL's configuration (how many minibatches an on-policy iteration takes), not a
            # setting the run took from the map: count it as the map counts now.
            data["optimizer_steps"], data["batch_frames"] = plan.optimizer_steps, plan.batch_frames
            continue
        recorded, planned = (data["optimizer_steps"], data["batch_frames"]), (plan.optimizer_steps, plan.batch_frames)
        if recorded != planned:
            raise ValueError(
                f"{key} ran {recorded[0]} optimizer steps per {recorded[1]}-frame batch, the map now gives "
                f"{planned[0]} per {planned[1]}: run the cell again (--rerun) rather than continue it"
            )


def committed_runs(result: dict[str, Any], task: str) -> dict[str, Any]:
    """A committed result's runs of ``task`` keyed as ``results.json`` keys them (``<cell>/<framework>/<seed>``,
    ``<cell>/random``): an algorithm table's ``per_seed`` keys already are; a MAPPO table's are
    ``<seed> / <framework>`` and ``random``."""
    runs: dict[str, Any] = {}
    for key, data in result["per_seed"].items():
        seed, sep, framework = key.partition(" / ")
        if sep:
            runs[f"{task}/{framework}/{int(seed)}"] = data
        elif key == "random":
            runs[f"{task}/random"] = data
        elif key.split("/")[0].partition(":")[0] == task:
            runs[key] = data
        else:
            raise ValueError(f"per_seed entry {key!r} is not a run of task {task!r}")
    return runs


def merge_runs(results: dict[str, Any], committed: dict[str, Any]) -> dict[str, Any]:
    """``results`` (the run folder's) with ``committed``'s runs added; a run both hold must be the same run."""
    merged = dict(results)
    for key, data in committed.items():
        if key in merged and merged[key] != data:
            raise ValueError(f"{key} is in the run folder's results.json as another run; remove one of the two")
        merged[key] = data
    return merged


def run_keys(results: dict[str, Any], task: str) -> list[str]:
    """The ``<cell>/<framework>/<seed>`` keys of ``task``'s runs."""
    return [key for key in results if key.count("/") == 2 and key.split("/")[0].partition(":")[0] == task]


#: options of a call that say which runs it ran again or which frameworks it ran now, not what was measured:
#: the command that reproduces a whole continued result runs every run of both frameworks.
CALL_ONLY_OPTIONS = ("--seeds", "--from-json", "--frameworks", "--rerun", "--rerun-algorithms", "--rerun-random")


def reproducing_argv(argv: Sequence[str], seeds: Sequence[int], frameworks: Sequence[str] = FRAMEWORKS) -> list[str]:
    """``argv`` without the :data:`CALL_ONLY_OPTIONS`, with ``--seeds`` naming ``seeds`` and ``--frameworks``
    the ``frameworks`` the result holds runs of (none when it holds both): the command that runs the whole
    continued result from nothing (finished runs in ``--out`` are reused either way)."""
    options: list[list[str]] = []  # each option with the values after it
    for word in argv:
        if word.startswith("--") or not options:
            options.append([word])
        else:
            options[-1].append(word)
    out: list[str] = []
    for option, *values in options:
        name = option.partition("=")[0]
        if name == "--seeds" and "--seeds" not in out:
            out += ["--seeds", *map(str, seeds)]
        elif name not in CALL_ONLY_OPTIONS:
            out += [option, *values]
    out = out if "--seeds" in out else [*out, "--seeds", *map(str, seeds)]
    return out if set(frameworks) == set(FRAMEWORKS) else [*out, "--frameworks", *frameworks]


def cell_name(task: str, algorithm: str | None) -> str:
    """A comparison's key in ``results.json``: the task (MAPPO with the task's recipe) or ``task:algorithm``."""
    return task if algorithm is None else f"{task}:{algorithm}"


def cell_names(results: dict[str, Any]) -> list[str]:
    """The cells in ``results``, by task in :data:`TASKS` order, then algorithm in :data:`ALGORITHMS` order."""
    found = {key.split("/")[0] for key in results}

    def order(cell: str) -> tuple[int, int]:
        task, _, algorithm = cell.partition(":")
        return (
            list(TASKS).index(task) if task in TASKS else len(TASKS),
            ALGORITHMS.index(algorithm) + 1 if algorithm else 0,
        )

    return sorted(found, key=order)


if __name__ == "__main__":
    main()
