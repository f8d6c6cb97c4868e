"""Collection speed on mpe2 ``simple_spread_v3`` (N=3, 25-step episodes), one process.

Compares, on the same envs, seeds and number of env copies:

* ``raw``: the PettingZoo parallel envs stepped by a minimal Python loop (uniform random
  actions, reset when ``env.agents`` is empty) -- the ceiling for in-process collection;
* ``lightmarl``: :class:`~lightmarl.data.collector.RolloutCollector` over
  ``PettingZooEnvConfig.make_vector`` with an ``MLPActorCritic`` policy (one binding);
* ``lightmarl, 2 bindings``: the same with agents mapped ``["a", "b", "a"]``, ``b`` a
  ``UniformRandomPolicy`` (the multi-binding gather/scatter path);
* ``torchrl``: TorchRL's ``PettingZooWrapper`` in a ``SerialEnv``, ``rollout()`` with random actions.

The paths take turns, one ``collect()`` / ``rollout()`` each, until each has run
``--seconds``; this is repeated ``--repeats`` times. The best repeat is reported, and the
ratio to raw is the median of same-repeat ratios, so that load from other processes on a
shared machine does not decide the ratios. Run from the
repository root with the project's virtualenv::

    python benchmarks/collector_speed.py --num-envs 1 16 32 --seconds 5

The result is a Markdown table on stdout (see ``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torchrl.envs import SerialEnv
from torchrl.envs.libs.pettingzoo import PettingZooWrapper

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs.pettingzoo import PettingZooEnvConfig
from lightmarl.policies import MultiAgentPolicy, PolicyRegistry
from lightmarl.population import BindingTable, PolicyBinding

ENV_CONFIG = PettingZooEnvConfig(env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 3, "max_cycles": 25})
ROLLOUT_STEPS = 25  # env steps per env copy in one unit of work (one collect() / rollout())
HIDDEN_SIZES = (64, 64)


@dataclass
class Runner:
    """One way of collecting: ``run()`` does one unit of work and returns the env steps it took."""

    name: str
    run: Callable[[], int]
    close: Callable[[], None]


def raw_runner(num_envs: int, seed: int) -> Runner:
    envs = [ENV_CONFIG.make_one() for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    num_actions = int(envs[0].action_space(envs[0].possible_agents[0]).n)
    rng = np.random.default_rng(seed)

    def run() -> int:
        for _ in range(ROLLOUT_STEPS):
            for env in envs:
                if not env.agents:
                    env.reset()
                agents = env.agents
                env.step(dict(zip(agents, rng.integers(num_actions, size=len(agents)).tolist())))
        return ROLLOUT_STEPS * num_envs

    def close() -> None:
        for env in envs:
            env.close()

    return Runner("raw PettingZoo loop", run, close)


def collector_runner(num_envs: int, seed: int, two_bindings: bool) -> Runner:
    vec = ENV_CONFIG.make_vector(seed, num_envs=num_envs)
    mlp = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": HIDDEN_SIZES}}
    if two_bindings:
        bindings = [
            PolicyBinding(id="a", **mlp),
            PolicyBinding(id="b", class_path="lightmarl.policies.UniformRandomPolicy", policy_kwargs={"seed": seed}),
        ]
        table = BindingTable(bindings, vec.spec, agent_binding_map=["a", "b", "a"])
        name = "lightmarl collector, 2 bindings"
    else:
        table = BindingTable([PolicyBinding(id="main", **mlp)], vec.spec)
        name = "lightmarl collector"
    registry = PolicyRegistry()
    policies = {b: registry.get(table.binding(b), vec.spec.groups[table.group_of_binding[b]]) for b in table.active_ids}
    collector = RolloutCollector(vec, MultiAgentPolicy(policies, table), rollout_steps=ROLLOUT_STEPS)

    def run() -> int:
        collector.collect()
        return ROLLOUT_STEPS * num_envs

    return Runner(name, run, collector.close)


def torchrl_runner(num_envs: int, seed: int) -> Runner:
    def make() -> PettingZooWrapper:
        return PettingZooWrapper(ENV_CONFIG.make_one(), return_state=False, use_mask=False, categorical_actions=True)

    env = SerialEnv(num_envs, make)
    env.set_seed(seed)

    def run() -> int:
        # Episodes last exactly ROLLOUT_STEPS, so each rollout is one reset + one episode per copy.
        env.rollout(ROLLOUT_STEPS, break_when_any_done=False)
        return ROLLOUT_STEPS * num_envs

    def close() -> None:
        threads = torch.get_num_threads()
        env.close()  # BatchedEnvBase.close() adds num_workers torch threads, even for a SerialEnv
        torch.set_num_threads(threads)

    return Runner("TorchRL PettingZooWrapper + SerialEnv", run, close)


def interleaved_rates(runners: list[Runner], seconds: float) -> list[float]:
    """Env-steps/s of each runner, timing one unit of work of each in turn until each has run ``seconds``.

    Round-robin at the granularity of one ``collect()`` / ``rollout()`` spreads load from
    other processes evenly over the runners, so their ratios stay meaningful.
    """
    steps = [0] * len(runners)
    elapsed = [0.0] * len(runners)
    while min(elapsed) < seconds:
        for i, runner in enumerate(runners):
            if elapsed[i] < seconds:
                start = time.perf_counter()
                steps[i] += runner.run()
                elapsed[i] += time.perf_counter() - start
    return [s / t for s, t in zip(steps, elapsed)]


def benchmark(num_envs: int, seed: int, seconds: float, repeats: int) -> dict[str, list[float]]:
    """Env-steps/s of every runner (raw first), one entry per repeat."""
    runners = [
        raw_runner(num_envs, seed),
        collector_runner(num_envs, seed, two_bindings=False),
        collector_runner(num_envs, seed, two_bindings=True),
        torchrl_runner(num_envs, seed),
    ]
    try:
        for runner in runners:
            runner.run()  # warm-up: first reset, lazy imports, allocator
        runs = [interleaved_rates(runners, seconds) for _ in range(repeats)]
        return {runner.name: [run[i] for run in runs] for i, runner in enumerate(runners)}
    finally:
        for runner in runners:
            runner.close()


def markdown_table(results: dict[int, dict[str, list[float]]], num_agents: int) -> str:
    """Best run per runner; the ratio to raw is the median over repeats of same-repeat ratios."""
    lines = [
        "| envs | path | env-steps/s | agent-steps/s | × raw | runs (env-steps/s, min–max) |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for num_envs, rates in results.items():
        raw = next(iter(rates.values()))
        for name, runs in rates.items():
            best = max(runs)
            ratio = statistics.median(r / base for r, base in zip(runs, raw))
            lines.append(
                f"| {num_envs} | {name} | {best:,.0f} | {best * num_agents:,.0f} | {ratio:.2f} "
                f"| {min(runs):,.0f}–{best:,.0f} |"
            )
    return "\n".join(lines)


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 16, 32], help="env copies per measurement")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds each path runs per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per path; the best is reported")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    torch.set_num_threads(args.threads)
    num_agents = len(ENV_CONFIG.spec().possible_agents)
    load_before = load_average()
    results = {e: benchmark(e, args.seed, args.seconds, args.repeats) for e in args.num_envs}
    print(
        f"mpe2 simple_spread_v3 (N=3, max_cycles=25), {ROLLOUT_STEPS} steps per collect()/rollout(), "
        f"{args.repeats} interleaved runs × {args.seconds:g} s per path, torch threads {args.threads}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"
    )
    print(f"load average (1/5/15 min): before {load_before}, after {load_average()}")
    print(f"agent-steps/s = env-steps/s × {num_agents} (every agent acts at every step of simple_spread)\n")
    print(markdown_table(results, num_agents))


if __name__ == "__main__":
    main()
