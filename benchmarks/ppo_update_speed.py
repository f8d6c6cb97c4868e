"""Seconds of one PPO update of the quickstart recipe on a fixed rollout, without collection.

Builds ``recipes/quickstart.yaml``'s learner (MAPPO, a 64x64 ``MLPActorCritic`` with a centralized
critic, 4 epochs x 2 minibatches of 400 env steps) on mpe2 ``simple_spread`` (3 agents, 32 env
copies), collects one 25-step rollout with seed 0 and times ``MARLTrainer.update`` on it: row
selection, GAE, 8 gradient steps. Each timed update starts from the same weights and a fresh
optimizer, so every repetition does the same work. One torch thread.

To compare two versions of ``src/`` on a shared machine, alternate them, e.g. with ``PYTHONPATH``
pointing at each checkout in turn, and compare medians::

    python benchmarks/ppo_update_speed.py --repeat 20
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="timed updates (median reported)")
    parser.add_argument("--json", metavar="NAME", help="write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)

    from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
    from lightmarl.data.collector import RolloutCollector
    from lightmarl.envs import PettingZooEnvConfig
    from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
    from lightmarl.population import BindingTable, PolicyBinding

    config = PettingZooEnvConfig(
        env_fn="mpe2.simple_spread_v3.parallel_env",
        env_kwargs={"N": 3, "max_cycles": 25, "continuous_actions": False},
        num_envs=32,
    )
    spec = config.spec()
    table = BindingTable([PolicyBinding("main", class_path="lightmarl.policies.MLPActorCritic")], spec)
    policy = MLPActorCritic(spec.groups["agent"], hidden_sizes=[64, 64], critic="centralized")
    algorithm = PPO(lr=0.003, epochs=4, minibatch_size=400, gamma=0.99, lmbda=0.95, entropy_coeff=0.01)
    experience = RolloutCollector(config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 25).collect()
    start = copy.deepcopy(policy.state_dict())

    def one_update() -> float:
        policy.load_state_dict(start)
        torch.manual_seed(0)
        trainer = IndependentMARLTrainer(table, {"main": policy}, {"main": algorithm})
        optimizers = trainer.make_optimizers()
        began = time.perf_counter()
        trainer.update(experience, optimizers, PlainStepper())
        return time.perf_counter() - began

    for _ in range(3):
        one_update()  # warm-up
    seconds = [one_update() for _ in range(args.repeat)]
    median = statistics.median(seconds)
    print(f"PPO update (quickstart, 800 env steps, 8 gradient steps): median {median * 1e3:.1f} ms over {len(seconds)}")
    if args.json:
        sys.path.insert(0, str(HERE))
        from results import write_result

        path = write_result(
            args.json,
            command="python benchmarks/ppo_update_speed.py " + " ".join(argv or sys.argv[1:]),
            per_seed={"0": {"update_s": seconds}},
            columns=["update", {"name": "ms (median)", "format": ",.1f"}],
            rows=[["quickstart PPO update (800 env steps, 8 gradient steps)", median * 1e3]],
            notes="recipes/quickstart.yaml's learner on one fixed rollout; one torch thread.",
        )
        print("wrote", path)
    print(json.dumps({"median_update_s": median}))


if __name__ == "__main__":
    main()
