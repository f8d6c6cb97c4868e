"""The scripted simple_spread policies against uniform random actions, every agent played by one policy.

Mean per-agent episode return ± the episode standard deviation over the same seeded episodes
(``evaluate_episodes``, seed 10 000, as a recipe's evaluation), greedy (the mode of the
script's distribution) and sampled::

    python benchmarks/spread_scripted_policies.py --agents 3 4 --episodes 64
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation import evaluate_episodes
from lightmarl.policies import MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl_examples.simple_spread import SpreadByAssignmentPolicy, SpreadToLandmarkPolicy

POLICIES = (SpreadByAssignmentPolicy, SpreadToLandmarkPolicy, UniformRandomPolicy)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", nargs="+", type=int, default=[3, 4], help="simple_spread's N")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=10_000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| policy | play | " + " | ".join(f"N={n}" for n in args.agents) + " |")
    print("| --- | --- |" + " ---: |" * len(args.agents))
    for policy_class in POLICIES:
        # Uniform random actions have no mode: one row.
        for deterministic in (True,) if policy_class is UniformRandomPolicy else (True, False):
            cells = []
            for n in args.agents:
                config = PettingZooEnvConfig(
                    env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": n, "max_cycles": 25}, num_envs=16
                )
                spec = config.spec()
                table = BindingTable([PolicyBinding("p", class_path="scripted", trainable=False)], spec)
                policy = MultiAgentPolicy({"p": policy_class(spec.groups["agent"])}, table)
                torch.manual_seed(args.seed)
                stats = evaluate_episodes(
                    policy, config, num_episodes=args.episodes, seed=args.seed, deterministic=deterministic
                )["p"]
                cells.append(f"{stats['episode_return']:.2f} ± {stats['episode_return_std']:.2f}")
            play = "uniform" if policy_class is UniformRandomPolicy else "greedy" if deterministic else "sampled"
            print(f"| `{policy_class.__name__}` | {play} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
