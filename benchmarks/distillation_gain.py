"""Does the teacher pay? A distillation recipe's student against the same student without a teacher.

For each recipe (``recipes/kickstarter.yaml``, ``recipes/scripted_teacher.yaml``) and each seed,
two ``lightmarl fit`` runs at the recipe's frame budget:

- **with teacher**: the recipe as written;
- **without teacher**: ``--model.algorithm.init_args.distillation=null``, and the distillation
  losses (``distill``, ``clone``) taken out of the recipe's loss profiles (a profile naming a loss
  that no trainer has is a setup error). Everything else is the same: the same bindings play the
  same agents (the scripted teacher still plays its agents), the same seeds.

The figure of a run is its last evaluation: ``eval/<student>/episode_return`` in the run's
``csv/version_*/metrics.csv``, the mean per-agent return of the student's agents over the recipe's
seeded evaluation episodes (``evaluation.validation.episodes``, ``evaluation.validation.seed``: the same start states in every run),
played greedily, logged after the last training iteration. The table gives per arm the mean over
seeds with a 95% Student t-interval of the per-seed figures, and the gain (with minus without)
with Welch's 95% t-interval; per-seed figures follow it.

Reference rows, on the same evaluation episodes (``lightmarl validate`` with the population
replaced): the scripted teacher playing every agent, and uniformly random actions.

Runs go to ``runs/distillation_gain/<recipe>/<arm>/seed<k>/``; a run that finished is read, not
rerun (``--rerun`` to redo). One run at a time, one thread each (``OMP_NUM_THREADS=1``).
``--extra`` adds overrides to every run of both arms (a variant of the student, say) and
``--tag`` keeps such runs in a folder of their own, ``runs/distillation_gain/<tag>/...``::

    python benchmarks/distillation_gain.py --seeds 0 1 2 3 4
    python benchmarks/distillation_gain.py --recipes kickstarter --seeds 0 1 --frames 20000  # a quick look

(``docs/distillation.md`` runs the scripted_teacher student with ``agent_id_input`` this way.)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from lightmarl.evaluation.statistics import difference_interval, t_interval

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "runs" / "distillation_gain"
RECIPES = {"kickstarter": "recipes/kickstarter.yaml", "scripted_teacher": "recipes/scripted_teacher.yaml"}
ARMS = ("teacher", "no_teacher")
DISTILLATION_LOSSES = {"distill", "clone"}


@dataclass
class RunResult:
    """The last evaluation of one run."""

    eval_return: float
    frames: int
    wall_s: float
    load_after: str


@dataclass
class Recipe:
    """What the benchmark needs to know about a distillation recipe."""

    path: str
    student: str
    teacher: str
    teacher_class_path: str
    loss_profiles: dict[str, list[str]]
    max_frames: int

    @classmethod
    def read(cls, path: str) -> Recipe:
        model = yaml.safe_load((ROOT / path).read_text())["model"]
        distillation = model["algorithm"]["init_args"].get("distillation")
        if not distillation:
            raise SystemExit(f"{path}: model.algorithm.init_args.distillation is not set: nothing to compare")
        teacher = distillation["init_args"]["teacher"]
        bindings = {b["id"]: b for b in model["policy_bindings"]}
        students = [b for b, spec in bindings.items() if spec.get("trainable", True)]
        if len(students) != 1:
            raise SystemExit(f"{path}: expected one trainable binding (the student), found {students}")
        return cls(
            path=path,
            student=students[0],
            teacher=teacher,
            teacher_class_path=bindings[teacher]["class_path"],
            loss_profiles=model.get("loss_profiles") or {},
            max_frames=int(model["max_frames"]),
        )

    def no_teacher_overrides(self) -> list[str]:
        """The same recipe with distillation off and its losses out of every profile."""
        profiles = {
            name: [loss for loss in losses if loss not in DISTILLATION_LOSSES]
            for name, losses in self.loss_profiles.items()
        }
        overrides = ["--model.algorithm.init_args.distillation=null"]
        if profiles:
            overrides.append(f"--model.loss_profiles={json.dumps(profiles)}")
        return overrides


# -- running --------------------------------------------------------------------------------------
def single_thread_env() -> dict[str, str]:
    # Small MLPs step fastest on one thread; more threads spin-wait on a shared machine.
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def lightmarl(*args: str, run_dir: Path) -> float:
    """Run ``lightmarl <args>`` from the repository root, output to ``run_dir/log.txt``; wall seconds."""
    command = [str(Path(sys.executable).with_name("lightmarl")), *args, f"--trainer.default_root_dir={run_dir}"]
    run_dir.mkdir(parents=True, exist_ok=True)
    print("+", shlex.join(command), flush=True)
    started = time.perf_counter()
    with open(run_dir / "log.txt", "w") as out:
        code = subprocess.run(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=single_thread_env()
        ).returncode
    if code != 0:
        tail = (run_dir / "log.txt").read_text().splitlines()[-10:]
        raise SystemExit(
            f"lightmarl {args[0]} failed (exit {code}); the end of {run_dir / 'log.txt'}:\n" + "\n".join(tail)
        )
    return time.perf_counter() - started


def last_evaluation(run_dir: Path, binding: str) -> tuple[float, int]:
    """``(eval/<binding>/episode_return, frames trained before it)`` of the last evaluation row."""
    found = sorted(run_dir.glob("csv/version_*/metrics.csv"))
    if not found:
        raise SystemExit(f"{run_dir}: no csv/version_*/metrics.csv")
    key = f"eval/{binding}/episode_return"
    frames, last = 0, None
    with open(found[-1]) as f:
        for row in csv.DictReader(f):
            if row.get("counters/frames"):
                frames = int(float(row["counters/frames"]))
            if row.get(key):
                last = (float(row[key]), frames)
    if last is None:
        raise SystemExit(f"{found[-1]}: no {key} rows")
    return last


def train(
    recipe: Recipe, arm: str, seed: int, frames: int, out: Path, rerun: bool, extra: Sequence[str] = ()
) -> RunResult:
    run_dir = out / Path(recipe.path).stem / arm / f"seed{seed}"
    result_file = run_dir / "result.json"
    if result_file.exists() and not rerun:
        result = RunResult(**json.loads(result_file.read_text()))
        if result.frames == frames:
            return result
    arm_overrides = recipe.no_teacher_overrides() if arm == "no_teacher" else []
    wall = lightmarl(
        "fit",
        "--config",
        recipe.path,
        f"--seed_everything={seed}",
        f"--model.max_frames={frames}",
        "--trainer.enable_checkpointing=false",
        *extra,
        *arm_overrides,
        run_dir=run_dir,
    )
    value, trained = last_evaluation(run_dir, recipe.student)
    if trained != frames:
        raise SystemExit(f"{run_dir}: the last evaluation came after {trained} frames, not the budget {frames}")
    result = RunResult(value, trained, round(wall, 1), load_average())
    result_file.write_text(json.dumps(asdict(result)))
    return result


def reference(recipe: Recipe, name: str, class_path: str, out: Path, rerun: bool) -> float:
    """Per-agent return of one scripted binding playing every agent, on the recipe's evaluation episodes."""
    run_dir = out / Path(recipe.path).stem / "reference" / name
    result_file = run_dir / "result.json"
    if result_file.exists() and not rerun:
        return float(json.loads(result_file.read_text())["eval_return"])
    binding = {"id": name, "class_path": class_path, "trainable": False}
    lightmarl(
        "validate",
        "--config",
        recipe.path,
        f"--model.policy_bindings=[{json.dumps(binding)}]",
        "--model.agent_binding_map=null",
        "--model.loss_profiles=null",
        "--model.algorithm.init_args.distillation=null",
        run_dir=run_dir,
    )
    value, _ = last_evaluation(run_dir, name)
    result_file.write_text(json.dumps({"eval_return": value}))
    return value


# -- table ----------------------------------------------------------------------------------------
def interval(values: Sequence[float]) -> str:
    low, high = t_interval(values)
    mean = statistics.fmean(values)
    if math.isnan(low):
        return f"{mean:.2f}"
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def table(name: str, recipe: Recipe, results: dict[str, list[RunResult]], references: dict[str, float]) -> list[str]:
    teacher = [r.eval_return for r in results["teacher"]]
    plain = [r.eval_return for r in results["no_teacher"]]
    gain = difference_interval(teacher, plain)
    lines = [
        f"### {name} ({recipe.path}, {recipe.max_frames:,} frames per run unless --frames)",
        "",
        "| run | seeds | mean eval return [95% t-interval] | per seed | wall s (mean) |",
        "| --- | ---: | --- | --- | ---: |",
    ]
    for arm, label in (("teacher", "student with teacher (the recipe)"), ("no_teacher", "same student, no teacher")):
        runs = results[arm]
        per_seed = ", ".join(f"{r.eval_return:.2f}" for r in runs)
        wall = statistics.fmean(r.wall_s for r in runs)
        lines.append(f"| {label} | {len(runs)} | {interval([r.eval_return for r in runs])} | {per_seed} | {wall:.0f} |")
    for ref, value in references.items():
        lines.append(f"| {ref} (reference, every agent) | – | {value:.2f} | – | – |")
    ci = "" if math.isnan(gain.ci_low) else f" [{gain.ci_low:.2f}, {gain.ci_high:.2f}]"
    lines += ["", f"Gain (with − without teacher): {gain.difference:+.2f}{ci} (Welch 95% t-interval)", ""]
    return lines


def write_table(
    name: str, lines: list[str], results: dict[str, list[RunResult]], argv: Sequence[str], directory: Path | None = None
) -> Path:
    """One recipe's table (:func:`table`) and every run's figures as ``benchmarks/results/<name>.json``."""
    from results import write_result  # benchmarks/results.py, beside this script

    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.startswith("|")]
    gain = next((line for line in lines if line.startswith("Gain")), None)
    command = " ".join(
        ["OMP_NUM_THREADS=1 python benchmarks/distillation_gain.py", *(a for a in argv if a != "--write-result")]
    )
    return write_result(
        name,
        command=command,
        per_seed={arm: {str(k): asdict(r) for k, r in enumerate(runs)} for arm, runs in results.items()},
        columns=rows[0],
        rows=rows[2:],
        notes=gain,
        directory=directory,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--frames", type=int, help="frame budget of every run (default: the recipe's max_frames)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rerun", action="store_true", help="run again runs that already have results")
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="OVERRIDE",
        help="a lightmarl override for every run of both arms, written --extra=--model.x=y (repeatable)",
    )
    parser.add_argument("--tag", help="keep the runs under OUT/TAG (a variant's runs apart from the recipe's)")
    parser.add_argument(
        "--write-result",
        action="store_true",
        help="also write benchmarks/results/distillation_gain_<recipe>[_<tag>].json (the docs' tables)",
    )
    args = parser.parse_args(argv)
    if args.extra and not args.tag:
        parser.error("--extra changes the runs: name them with --tag so they do not mix with the recipe's")
    out = args.out / args.tag if args.tag else args.out
    if len(args.seeds) != len(set(args.seeds)):
        parser.error(f"--seeds: each seed once, got {args.seeds}")
    if args.frames is not None and args.frames <= 0:
        parser.error(f"--frames: a positive number of frames, got {args.frames}")

    print(f"load average before: {load_average()}", flush=True)
    report: list[str] = []
    for name in args.recipes:
        recipe = Recipe.read(RECIPES[name])
        frames = args.frames or recipe.max_frames
        results: dict[str, list[RunResult]] = {arm: [] for arm in ARMS}
        for seed in args.seeds:  # arms interleaved, so drifting load hits both alike
            for arm in ARMS:
                results[arm].append(train(recipe, arm, seed, frames, out, args.rerun, args.extra))
        references = {
            recipe.teacher_class_path.rsplit(".", 1)[-1]: reference(
                recipe, "teacher", recipe.teacher_class_path, args.out, args.rerun
            ),
            "UniformRandomPolicy": reference(
                recipe, "random", "lightmarl.policies.UniformRandomPolicy", args.out, args.rerun
            ),
        }
        lines = table(name, recipe, results, references)
        report += lines
        if args.write_result:
            result_name = f"distillation_gain_{name}" + (f"_{args.tag}" if args.tag else "")
            argv_used = sys.argv[1:] if argv is None else list(argv)
            write_table(result_name, lines, results, argv_used)
    print(f"load average after: {load_average()}\n")
    print("\n".join(report))


if __name__ == "__main__":
    main()
