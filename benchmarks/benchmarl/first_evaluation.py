"""The first evaluation on VMAS balance, before and after the first batch, in both frameworks.

In the 30,000-frame comparison (docs/results/benchmarl_algorithms.md) each framework's first
evaluation comes after one collected batch and its update. This measures, per seed, the greedy
return of the untrained networks and the return after that first batch, on each side:

* BenchMARL: its command line for one batch (``experiment.max_n_frames=6000``), once with
  ``experiment.lr=0`` and one optimizer step per batch (Adam then changes no weight: the evaluation
  is the untrained networks') and once with the mapped settings;
* lightmarl: ``lightmarl validate`` of the recipe at the seed (untrained) and ``lightmarl fit`` for
  6,000 frames with the mapped settings.

Both with ``--benchmarl-setting`` as given (default: the comparison's 100 optimizer steps). The
return after the first batch is the first evaluation of a comparison's runs: ``--trained-from NAME``
reads it from ``benchmarks/results/NAME.json`` (written by ``compare.py --algorithms ... --json``)
where that holds the algorithm and seed, instead of training again.

    python benchmarks/benchmarl/first_evaluation.py --algorithms iql vdn qmix mappo --seeds 0 1 2 \
        --trained-from benchmarl_algorithms_vmas_balance --json benchmarl_first_evaluation
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compare import (
    ALGORITHMS,
    BENCHMARL_BATCH_FRAMES,
    BENCHMARL_EVAL_EPISODES,
    DEFAULT_OUT,
    DEFAULT_VENV,
    RESULTS_DIR,
    TASKS,
    AlgorithmRun,
    Task,
    algorithm_run,
    check_benchmarl,
    fit_recipe,
    load_average,
    read_lightmarl_curve,
    run_benchmarl,
    run_lightmarl_cli,
    settings_map,
)

from lightmarl.experiments.statistics import seed_mean

STAGES = ("untrained", "after the first batch")


def untrained_lightmarl(recipe: str, seed: int, run_dir: Path, overrides: Sequence[str]) -> float:
    """The greedy return of ``recipe``'s networks as built at ``seed``, on the recipe's evaluation episodes."""
    run_lightmarl_cli("validate", recipe, run_dir, [*overrides, f"--seed_everything={seed}"])
    return read_lightmarl_curve(run_dir, 0.0, evaluation_only=True).returns[-1]


def measure(run: str, plan: AlgorithmRun, task: Task, seed: int, where: Path, benchmarl_python: Path) -> float:
    """The greedy return of ``run`` (``<framework>/<stage>``) of ``plan`` at ``seed``, run in ``where``."""
    frames, episodes = BENCHMARL_BATCH_FRAMES, BENCHMARL_EVAL_EPISODES
    if run == "benchmarl/untrained":
        module = settings_map()
        off_policy = module.ALGORITHMS[plan.algorithm][0] in module.OFF_POLICY
        steps = "experiment.off_policy_n_optimizer_steps" if off_policy else "experiment.on_policy_n_minibatch_iters"
        kept = [s for s in plan.benchmarl_settings if s.partition("=")[0] != steps]  # Hydra refuses a key twice
        settings = (*kept, f"{steps}=1", "experiment.lr=0")
        return run_benchmarl(benchmarl_python, task, seed, frames, where, episodes, plan.algorithm, settings).returns[0]
    if run == "benchmarl/after the first batch":
        settings = plan.benchmarl_settings
        return run_benchmarl(benchmarl_python, task, seed, frames, where, episodes, plan.algorithm, settings).returns[0]
    if run == "lightmarl/untrained":
        return untrained_lightmarl(plan.recipe, seed, where, plan.lightmarl_overrides)
    return fit_recipe(plan.recipe, seed, frames, where, plan.lightmarl_overrides).returns[0]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=["iql"])
    parser.add_argument("--task", choices=[t for t in TASKS if t.startswith("vmas_")], default="vmas_balance")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    parser.add_argument(
        "--benchmarl-setting",
        action="append",
        default=None,
        metavar="SECTION.KEY=VALUE",
        help="BenchMARL settings changed in both frameworks (default: experiment.off_policy_n_optimizer_steps=100)",
    )
    parser.add_argument("--benchmarl-python", type=Path, default=DEFAULT_VENV / "bin" / "python")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "first_evaluation")
    parser.add_argument(
        "--trained-from",
        metavar="NAME",
        help="the return after the first batch from benchmarks/results/NAME.json's runs where it has them",
    )
    parser.add_argument("--json", metavar="NAME", help="also write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    settings = args.benchmarl_setting or ["experiment.off_policy_n_optimizer_steps=100"]
    check_benchmarl(args.benchmarl_python)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}
    task = TASKS[args.task]
    trained = (
        json.loads((RESULTS_DIR / f"{args.trained_from}.json").read_text())["per_seed"] if args.trained_from else {}
    )
    for algorithm in args.algorithms:
        plan = algorithm_run(task, algorithm, BENCHMARL_BATCH_FRAMES, BENCHMARL_EVAL_EPISODES, settings)
        for seed in args.seeds:
            for run in (f"{framework}/{stage}" for framework in ("benchmarl", "lightmarl") for stage in STAGES):
                key = f"{algorithm}/{run}/{seed}"
                framework, _, stage = run.partition("/")
                comparison = trained.get(f"{args.task}:{algorithm}/{framework}/{seed}")
                if key not in results and comparison is not None and stage == STAGES[1]:
                    results[key] = {"return": comparison["returns"][0], "load": comparison["load"]}
                    results[key]["from"] = f"benchmarks/results/{args.trained_from}.json"
                if key not in results:
                    where = out / algorithm / f"seed{seed}" / run.replace(" ", "_").replace("/", "_")
                    results[key] = {"return": measure(run, plan, task, seed, where, args.benchmarl_python)}
                    results[key]["load"] = load_average()
                results_path.write_text(json.dumps(results, indent=1))
                print(f"{key}: {results[key]['return']:.3f} (load {results[key]['load']})", flush=True)

    rows = []
    for algorithm in args.algorithms:
        for framework in ("benchmarl", "lightmarl"):
            values = {
                stage: [results[f"{algorithm}/{framework}/{stage}/{s}"]["return"] for s in args.seeds]
                for stage in STAGES
            }
            change = [after - before for before, after in zip(*values.values())]
            row: list[Any] = [algorithm, framework, len(args.seeds)]
            for series in (*values.values(), change):
                summary = seed_mean(series)
                row += [summary["mean"], *(summary["ci95"] or (None, None))]
            rows.append(row)
    for row in rows:
        print(" | ".join(f"{x:.3f}" if isinstance(x, float) else str(x) for x in row))
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, where results.py lives
        from results import command_line, write_result

        columns: list[Any] = ["algorithm", "framework", "seeds"]
        for stage in (*STAGES, "change"):
            columns += [{"name": f"{stage}: mean", "format": ".3f"}]
            columns += [{"name": f"{stage}: 95% low", "format": ".3f"}, {"name": "high", "format": ".3f"}]
        print(
            "wrote",
            write_result(
                args.json,
                command=command_line(),
                per_seed=results,
                columns=columns,
                rows=rows,
                notes=(
                    f"{task.benchmarl_task}; greedy return, mean per agent, {BENCHMARL_EVAL_EPISODES} episodes; "
                    f"seeds {', '.join(map(str, args.seeds))}; mean and Student-t 95% interval over the seeds; "
                    f"settings: BenchMARL 1.5.2's with {', '.join(settings)} in both frameworks."
                ),
                directory=RESULTS_DIR,
            ),
        )


if __name__ == "__main__":
    main()
