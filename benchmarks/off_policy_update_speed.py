"""Optimizer steps per second of lightmarl's off-policy update alone, with BenchMARL's settings.

Builds the learner of ``recipes/benchmarl/<algorithm>.yaml``'s settings (BenchMARL 1.5.2's defaults,
mapped by ``benchmarks/benchmarl/settings_map.py``: 256-wide Tanh MLPs, batches of 128 env steps)
on VMAS, collects one 6,000-frame batch (10 env copies x 600 steps) into the replay buffer, and times
``--steps`` sampled optimizer steps (replay sample, loss, backward, clip, Adam, target update), the
part of a BenchMARL-sized run where the off-policy families spend their time. One torch thread.

``--profile`` prints the functions that take the time (cProfile, cumulative). ``--json NAME`` writes
``benchmarks/results/NAME.json``. To compare two versions of ``src/`` fairly on a shared machine, run
each alternately a few times (``--repeat``), e.g. with ``PYTHONPATH`` pointing at each checkout::

    python benchmarks/off_policy_update_speed.py --algorithms masac maddpg qmix iql --steps 300 --repeat 3
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent


def build(algorithm: str, task: str, batch_frames: int, num_envs: int) -> tuple[Any, Any, Any]:
    """``(unit trainer, its optimizer, one collected batch)`` for ``algorithm`` on VMAS ``task``."""
    import importlib

    sys.path.insert(0, str(HERE / "benchmarl"))
    import settings_map

    from lightmarl.algorithms import IndependentMARLTrainer
    from lightmarl.data.collector import RolloutCollector
    from lightmarl.envs.vmas import VmasEnvConfig
    from lightmarl.policies import MultiAgentPolicy
    from lightmarl.population import BindingTable, PolicyBinding

    settings = settings_map.lightmarl_settings(algorithm, settings_map.benchmarl_config(algorithm, task))
    env = {k[4:]: v for k, v in settings.items() if k.startswith("env.") and "." not in k[4:]}
    scenario_kwargs = {k.rsplit(".", 1)[1]: v for k, v in settings.items() if k.startswith("env.scenario_kwargs.")}
    config = VmasEnvConfig(
        scenario=task.split("/")[1],
        scenario_kwargs=scenario_kwargs,
        num_envs=num_envs,
        max_steps=env["max_steps"],
        continuous_actions=env["continuous_actions"],
    )
    spec = config.spec()
    group = next(iter(spec.groups.values()))
    family = settings_map.ALGORITHMS[algorithm][0]
    algorithm_path, policy_path = settings_map.FAMILY_CLASSES[family]

    def load(path: str) -> Any:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    kwargs = {k[len(settings_map.POLICY) :]: v for k, v in settings.items() if k.startswith(settings_map.POLICY)}
    policy = load(policy_path)(group, **kwargs)
    init_args = {k[len(settings_map.A) :]: v for k, v in settings.items() if k.startswith(settings_map.A)}
    table = BindingTable([PolicyBinding("main", class_path=policy_path)], spec, ["main"] * len(spec.possible_agents))
    trainer = IndependentMARLTrainer(table, {"main": policy}, {"main": load(algorithm_path)(**init_args)})
    unit = trainer.unit_trainers["main"]
    collector = RolloutCollector(
        config.make_vector(0), MultiAgentPolicy({"main": policy}, table), batch_frames // num_envs
    )
    return unit, unit.make_optimizer(), collector.collect()


def time_steps(unit: Any, optimizer: Any, steps: int) -> float:
    """Seconds of ``steps`` optimizer steps of ``unit``'s update (the buffer already filled)."""
    from lightmarl.algorithms import PlainStepper

    unit.config.updates_per_iteration = steps
    started = time.perf_counter()
    unit._train(optimizer, PlainStepper())
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=["masac", "maddpg", "qmix", "iql"])
    parser.add_argument("--task", default="vmas/balance")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=1, help="timed repetitions per algorithm (median reported)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", metavar="NAME")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    measured: dict[str, list[float]] = {}
    for algorithm in args.algorithms:
        unit, optimizer, batch = build(algorithm, args.task, 6000, 10)
        from lightmarl.algorithms import PlainStepper

        unit.config.updates_per_iteration = 1
        unit.update(batch, optimizer, PlainStepper())  # fills the buffer (and takes one step)
        time_steps(unit, optimizer, 20)  # warm-up
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            time_steps(unit, optimizer, args.steps)
            profiler.disable()
            print(f"== {algorithm}")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        measured[algorithm] = [args.steps / time_steps(unit, optimizer, args.steps) for _ in range(args.repeat)]
        print(f"{algorithm}: {statistics.median(measured[algorithm]):.1f} optimizer steps/s {measured[algorithm]}")
    if args.json:
        sys.path.insert(0, str(HERE))
        from results import write_result

        path = write_result(
            args.json,
            command="python benchmarks/off_policy_update_speed.py " + " ".join(argv or sys.argv[1:]),
            per_seed={a: {"steps_per_s": v} for a, v in measured.items()},
            columns=["algorithm", {"name": "optimizer steps / s (median)", "format": ",.1f"}],
            rows=[[a, statistics.median(v)] for a, v in measured.items()],
            notes=f"{args.task}, BenchMARL 1.5.2's settings (batch 128 env steps, 256x256 Tanh MLPs), one torch thread.",
        )
        print("wrote", path)
    print(json.dumps({a: statistics.median(v) for a, v in measured.items()}))


if __name__ == "__main__":
    main()
