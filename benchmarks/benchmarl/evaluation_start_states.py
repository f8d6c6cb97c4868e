"""Are lightmarl's evaluation episodes on VMAS balance harder than other sets of 128?

lightmarl evaluates every run on the same 128 seeded start states (``evaluation.validation.seed``,
10,000 by default), whatever the run's seed; BenchMARL's test env is seeded with the run's seed, so
each of its runs evaluates on its own states. A set that is harder than most would put every
lightmarl evaluation of an untrained or barely trained policy below BenchMARL's by a constant. This
plays fixed policies (uniformly random actions, and untrained networks of the BenchMARL recipes:
IQL's Q-network, MAPPO's tanh-normal actor with deterministic actions) on lightmarl's set and on the
sets of other batch seeds, each copy's first episode, and prints each policy's mean per set and
where lightmarl's set ranks among them.

    python benchmarks/benchmarl/evaluation_start_states.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from lightning.pytorch import seed_everything

from lightmarl.envs import VmasEnvConfig
from lightmarl.evaluation.episodes import evaluate_episodes
from lightmarl.evaluation.scenarios import ValidationConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, QNetworkPolicy, UniformRandomPolicy
from lightmarl.policies.base import Policy
from lightmarl.population import BindingTable, PolicyBinding

COPIES = 128
#: the batch seed of lightmarl's evaluation episodes (``evaluation.validation.seed``'s default).
LIGHTMARL_SEED = ValidationConfig().seed


def balance(continuous: bool) -> VmasEnvConfig:
    """BenchMARL 1.5.2's vmas/balance task (conf/task/vmas/balance.yaml)."""
    return VmasEnvConfig(
        scenario="balance",
        scenario_kwargs={"n_agents": 4, "random_package_pos_on_line": True, "package_mass": 5},
        num_envs=10,
        max_steps=100,
        continuous_actions=continuous,
    )


def policies() -> dict[str, tuple[bool, Callable[..., Policy]]]:
    """name -> (continuous actions, a builder from the group); networks as the BenchMARL recipes build them."""
    return {
        "random, discrete": (False, lambda group: UniformRandomPolicy(group, seed=0)),
        "random, continuous": (True, lambda group: UniformRandomPolicy(group, seed=0)),
        "untrained IQL Q-network": (False, lambda group: QNetworkPolicy(group, (256, 256), "tanh")),
        "untrained MAPPO actor": (
            True,
            lambda group: MLPActorCritic(group, hidden_sizes=(256, 256), activation="tanh", critic="none"),
        ),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Copy i of a set is reset with seed + i: sets 1,000 apart share no copy.
    parser.add_argument("--seeds", nargs="+", type=int, default=[1000 * k for k in range(10)], help="other sets' seeds")
    parser.add_argument("--network-seed", type=int, default=0, help="torch seed of the untrained networks")
    parser.add_argument("--json", metavar="NAME", help="also write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sets = [LIGHTMARL_SEED, *[s for s in args.seeds if s != LIGHTMARL_SEED]]
    per_seed: dict[str, dict[str, float]] = {}
    rows = []
    for name, (continuous, build) in policies().items():
        config = balance(continuous)
        (group,) = config.spec().groups.values()
        table = BindingTable([PolicyBinding("b", class_path="x.y")], config.spec(), ["b"] * group.num_agents)
        seed_everything(args.network_seed, verbose=False)
        policy = MultiAgentPolicy({"b": build(group)}, table)  # one network, played on every set
        means = {}
        for seed in sets:
            result = evaluate_episodes(policy, config, COPIES, seed=seed, num_envs=COPIES)
            means[seed] = result["b"]["episode_return"]
        others = [means[s] for s in sets[1:]]
        rank = 1 + sum(value < means[LIGHTMARL_SEED] for value in others)
        z = (means[LIGHTMARL_SEED] - statistics.mean(others)) / statistics.stdev(others)
        per_seed[name] = {str(seed): value for seed, value in means.items()}
        rows.append([name, means[LIGHTMARL_SEED], statistics.mean(others), statistics.stdev(others), rank, z])
        print(
            f"{name}: lightmarl's set {means[LIGHTMARL_SEED]:.3f}; other sets mean {statistics.mean(others):.3f} "
            f"(sd {statistics.stdev(others):.3f}, {min(others):.3f} to {max(others):.3f}); rank {rank} of {len(sets)} "
            f"from the lowest, z {z:+.2f}",
            flush=True,
        )
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, where results.py lives
        from results import command_line, write_result

        print(
            "wrote",
            write_result(
                args.json,
                command=command_line(),
                per_seed=per_seed,
                columns=[
                    "policy",
                    {"name": f"lightmarl's set (seed {LIGHTMARL_SEED})", "format": ".3f"},
                    {"name": f"{len(sets) - 1} other sets: mean", "format": ".3f"},
                    {"name": "sd", "format": ".3f"},
                    {"name": f"rank of lightmarl's set (1 = lowest of {len(sets)})", "format": "d"},
                    {"name": "z", "format": "+.2f"},
                ],
                rows=rows,
                notes=(
                    f"vmas/balance (4 agents, package_mass 5, max_steps 100); mean per agent of each copy's first "
                    f"episode over {COPIES} copies; batch seeds {LIGHTMARL_SEED} and {', '.join(map(str, sets[1:]))}; "
                    f"untrained networks from torch seed {args.network_seed}, deterministic actions."
                ),
            ),
        )


if __name__ == "__main__":
    main()
