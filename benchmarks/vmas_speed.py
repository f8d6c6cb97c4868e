"""Collection speed on a VMAS scenario (default: navigation, 3 agents, 100-step episodes), in one process.

Compares, on the same scenario, seed and number of env copies:

* ``raw``: the VMAS ``Environment`` stepped by a minimal loop with uniform random discrete
  actions, finished copies reset one by one with ``reset_at`` (as VMAS asks) -- the ceiling;
* ``adapter``: lightmarl's :class:`~lightmarl.envs.vmas.VmasVecEnv` stepped with random actions
  (group tensors on the CPU, auto-reset, the vector's own random state);
* ``lightmarl``: :class:`~lightmarl.data.collector.RolloutCollector` over the same vector with an
  ``MLPActorCritic`` policy (hidden sizes 64, 64), experience TensorDicts included.

Interleaved as in ``collector_speed.py`` (one unit of ``--steps`` env steps per path in turn,
``--repeats`` rounds; best round reported, ratios the median of same-round ratios). Run from the
repository root with the project's virtualenv and the ``vmas`` extra::

    python benchmarks/vmas_speed.py --num-envs 64 512 4096 --seconds 8
"""

from __future__ import annotations

import argparse
import os
import platform

import torch
from collector_speed import Runner, interleaved_rates, load_average, markdown_table

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs.vmas import VmasEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding


def raw_runner(config: VmasEnvConfig, num_envs: int, seed: int, steps: int) -> Runner:
    import vmas

    env = vmas.make_env(
        config.scenario,
        num_envs=num_envs,
        device=config.device,
        continuous_actions=False,
        max_steps=config.max_steps,
        seed=seed,
        terminated_truncated=True,
        **config.scenario_kwargs,
    )
    env.reset()
    num_actions = int(env.action_space[0].n)

    def run() -> int:
        for _ in range(steps):
            actions = [torch.randint(num_actions, (num_envs, 1)) for _ in env.agents]
            _, _, terminated, truncated, _ = env.step(actions)
            for index in (terminated | truncated).nonzero().flatten().tolist():
                env.reset_at(index, return_observations=False)
        return steps * num_envs

    return Runner("raw VMAS loop", run, lambda: None)


def adapter_runner(config: VmasEnvConfig, num_envs: int, seed: int, steps: int) -> Runner:
    vector = config.make_vector(seed, num_envs=num_envs)
    vector.reset()
    group = vector.spec.groups["agent"]

    def run() -> int:
        for _ in range(steps):
            vector.step({"agent": torch.randint(group.num_actions, (num_envs, group.num_agents))})
        return steps * num_envs

    return Runner("lightmarl VmasVecEnv", run, vector.close)


def collector_runner(config: VmasEnvConfig, num_envs: int, seed: int, steps: int) -> Runner:
    vector = config.make_vector(seed, num_envs=num_envs)
    table = BindingTable([PolicyBinding("main", class_path="lightmarl.policies.MLPActorCritic")], vector.spec)
    policy = MLPActorCritic(vector.spec.groups["agent"], hidden_sizes=(64, 64))
    collector = RolloutCollector(vector, MultiAgentPolicy({"main": policy}, table), rollout_steps=steps)

    def run() -> int:
        collector.collect()
        return steps * num_envs

    return Runner("lightmarl collector", run, collector.close)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenario", default="navigation")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 512, 4096])
    parser.add_argument("--steps", type=int, default=100, help="env steps per unit of work (100: one episode)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = VmasEnvConfig(scenario=args.scenario, scenario_kwargs={"n_agents": 3}, max_steps=100)
    num_agents = len(config.spec().possible_agents)
    before = load_average()
    results = {}
    for num_envs in args.num_envs:
        runners = [
            make(config, num_envs, args.seed, args.steps) for make in (raw_runner, adapter_runner, collector_runner)
        ]
        try:
            for runner in runners:
                runner.run()  # warm-up
            runs = [interleaved_rates(runners, args.seconds) for _ in range(args.repeats)]
            results[num_envs] = {r.name: [run[i] for run in runs] for i, r in enumerate(runners)}
        finally:
            for runner in runners:
                runner.close()
    print(
        f"VMAS {args.scenario} (n_agents=3, max_steps=100, discrete actions, CPU), {args.steps} steps per unit, "
        f"{args.repeats} interleaved runs × {args.seconds:g} s per path, torch threads {args.threads}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"
    )
    print(f"load average (1/5/15 min): before {before}, after {load_average()}")
    print(f"agent-steps/s = env-steps/s × {num_agents}\n")
    print(markdown_table(results, num_agents))


if __name__ == "__main__":
    main()
