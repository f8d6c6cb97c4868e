"""How much counting the first evaluation episodes to finish moves a greedy return on VMAS balance.

An evaluation of ``E`` episodes on ``E`` env copies can count each copy's first episode (BenchMARL's
protocol, and lightmarl's since its evaluator spreads the episodes over the copies) or the first
``E`` episodes to finish, whatever copy played them. On balance a fall ends the episode, so the
second rule counts some copies' second fall before other copies' first full-length episode. For
untrained Q-networks of IQL's recipe (``recipes/benchmarl/iql.yaml``: 256x256 tanh, discrete
actions, 4 agents), one per seed, this prints both means over the same 128 seeded copies.

    python benchmarks/benchmarl/evaluation_count_bias.py --seeds 0 1 2 3
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from lightning.pytorch import seed_everything

from lightmarl.envs import VmasEnvConfig
from lightmarl.evaluation.episodes import play_episodes
from lightmarl.policies import MultiAgentPolicy, QNetworkPolicy
from lightmarl.population import BindingTable, PolicyBinding

COPIES = 128
# Enough episodes per copy that no copy reaches its quota before COPIES episodes have finished in all.
PER_COPY = 8


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = VmasEnvConfig(
        scenario="balance",
        scenario_kwargs={"n_agents": 4, "random_package_pos_on_line": True, "package_mass": 5},
        num_envs=10,
        max_steps=100,
        continuous_actions=False,
    )
    spec = config.spec()
    (group,) = spec.groups.values()
    table = BindingTable([PolicyBinding("b", class_path="x.y")], spec, ["b"] * group.num_agents)
    print("seed | first episode of each copy (mean, length) | first to finish (mean, length, copies counted)")
    for seed in args.seeds:
        seed_everything(seed, verbose=False)
        policy = QNetworkPolicy(group, hidden_sizes=(256, 256), activation="tanh")
        records = play_episodes(
            MultiAgentPolicy({"b": policy}, table), config, COPIES * PER_COPY, seed=1000, num_envs=COPIES
        )
        finished_first = records[:COPIES]  # records come in the order the episodes finished
        per_copy: dict[int, int] = {}
        for record in finished_first:
            per_copy[record.env_index] = per_copy.get(record.env_index, 0) + 1
        assert max(per_copy.values()) < PER_COPY, "a copy reached its quota: raise PER_COPY"
        each_first = list({r.env_index: r for r in reversed(records)}.values())  # each copy's first episode

        def mean(chosen: list, what: str) -> float:
            return sum(getattr(r, what)["b"] for r in chosen) / len(chosen)

        print(
            f"{seed} | {mean(each_first, 'returns'):.2f}, {mean(each_first, 'lengths'):.0f} | "
            f"{mean(finished_first, 'returns'):.2f}, {mean(finished_first, 'lengths'):.0f}, {len(per_copy)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
