"""Collection speed of ``recipes/multiwalker.yaml`` against the raw sisl ``multiwalker_v9`` env.

Two paths, on the recipe's env settings and number of env copies, taking turns (one
``collect()`` each, as in ``collector_speed.py``, so that load from other processes on a shared
machine hits both alike):

* ``raw``: the PettingZoo parallel envs stepped by a minimal Python loop with uniform random
  actions in the Box, reset when ``env.agents`` is empty: the ceiling for in-process collection;
* ``lightmarl``: :class:`~lightmarl.data.collector.RolloutCollector` over the recipe's env
  (its observation and reward normalisation included) with the recipe's policy.

Training speed (collection plus PPO update) is the fit's own ``time/fps`` in its metrics.csv.
Run from the repository root with the project's virtualenv::

    python benchmarks/multiwalker_speed.py --seconds 10 --repeats 3
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from collector_speed import Runner, interleaved_rates, load_average, raw_runner

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import MultiAgentPolicy, PolicyRegistry
from lightmarl.population import BindingTable, PolicyBinding

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "multiwalker.yaml"


def build(spec: dict[str, Any]) -> Any:
    """An object from a recipe's ``{class_path, init_args}``."""
    module, _, name = spec["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**spec.get("init_args", {}))


def recipe_parts(recipe: Path) -> tuple[PettingZooEnvConfig, dict[str, Any], int]:
    model = yaml.safe_load(recipe.read_text())["model"]
    env = model["env"]
    config = PettingZooEnvConfig(
        env_fn=env["env_fn"],
        env_kwargs=env.get("env_kwargs", {}),
        num_envs=env.get("num_envs", 16),
        transforms=[build(t) for t in env.get("transforms", [])],
    )
    return config, model["policy_bindings"][0], int(model["rollout_steps"])


def collector_runner(config: PettingZooEnvConfig, binding: dict[str, Any], seed: int, steps: int) -> Runner:
    vec = config.make_vector(seed)
    table = BindingTable(
        [PolicyBinding(id=binding["id"], class_path=binding["class_path"], policy_kwargs=binding["policy_kwargs"])],
        vec.spec,
    )
    registry = PolicyRegistry()
    policies = {b: registry.get(table.binding(b), vec.spec.groups[table.group_of_binding[b]]) for b in table.active_ids}
    collector = RolloutCollector(vec, MultiAgentPolicy(policies, table), rollout_steps=steps)

    def run() -> int:
        collector.collect()
        return steps * config.num_envs

    return Runner("lightmarl collector (recipe env, transforms and policy)", run, collector.close)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", type=Path, default=RECIPE)
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds each path runs per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--write-result",
        action="store_true",
        help="also write benchmarks/results/multiwalker_speed.json (the docs' table)",
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    config, binding, steps = recipe_parts(args.recipe)
    before = load_average()
    runners = [
        raw_runner(
            config.num_envs, args.seed, steps, replace(config, transforms=[]), "raw PettingZoo loop (random actions)"
        ),
        collector_runner(config, binding, args.seed, steps),
    ]
    try:
        for runner in runners:
            runner.run()  # warm-up
        runs = [interleaved_rates(runners, args.seconds) for _ in range(args.repeats)]
    finally:
        for runner in runners:
            runner.close()
    print(
        f"{args.recipe.name}: {config.num_envs} env copies, {steps} steps per collect(), {args.repeats} interleaved "
        f"runs x {args.seconds:g} s per path, 1 torch thread, {os.cpu_count()} CPUs; load average before {before}, "
        f"after {load_average()}\n"
    )
    print("| path | env steps/s (best run) | ratio to raw (median of same-run ratios) |")
    print("| --- | ---: | ---: |")
    rows = []
    for i, runner in enumerate(runners):
        rates = [run[i] for run in runs]
        ratio = float(np.median([run[i] / run[0] for run in runs]))
        rows.append([runner.name, f"{max(rates):,.0f}", f"{ratio:.2f}"])
        print(f"| {runner.name} | {max(rates):,.0f} | {ratio:.2f} |")
    if args.write_result:
        from results import write_result  # benchmarks/results.py, beside this script

        argv = " ".join(a for a in sys.argv[1:] if a != "--write-result")
        path = write_result(
            "multiwalker_speed",
            command=f"python benchmarks/multiwalker_speed.py {argv}".strip(),
            per_seed={f"run {k}": dict(zip([r.name for r in runners], run)) for k, run in enumerate(runs)},
            columns=["path", "env steps/s (best run)", "ratio to raw (median of same-run ratios)"],
            rows=rows,
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
