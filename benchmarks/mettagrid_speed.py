"""Collection speed on the MettaGrid mines task of ``recipes/mettagrid_mines.yaml``, against the raw env.

Compares, on the same env settings, seeds and number of env copies (16, as in the recipe):

* ``raw``: ``lightmarl.envs.mettagrid.mines_env`` copies stepped by a minimal Python loop
  (uniform random actions, reset when ``env.agents`` is empty): the ceiling for collection;
* ``lightmarl collector, TokenEncoder``: :class:`~lightmarl.data.collector.RolloutCollector`
  with the recipe's policy (``MLPActorCritic`` on a ``TokenEncoder``);
* ``lightmarl collector, flatten MLP``: the same with the default flattening encoder
  (``hidden_sizes: [64, 64]``).

Paths take turns, one unit of 25 steps per env copy each, for ``--seconds`` per repeat (as
``collector_speed.py`` does, so load from other processes hits them alike); the best repeat is
reported with the median of same-repeat ratios to raw. Run from the repository root::

    python benchmarks/mettagrid_speed.py --seconds 5 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Any

import torch
import yaml
from collector_speed import ROLLOUT_STEPS, Runner, interleaved_rates, raw_runner

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import MultiAgentPolicy, PolicyRegistry
from lightmarl.population import BindingTable, PolicyBinding

RECIPE = yaml.safe_load(open(os.path.join(os.path.dirname(__file__), "..", "recipes", "mettagrid_mines.yaml")))
ENV = RECIPE["model"]["env"]
TOKEN_POLICY = RECIPE["model"]["policy_bindings"][0]
FLATTEN_POLICY = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [64, 64]}}


def config(num_envs: int) -> PettingZooEnvConfig:
    return PettingZooEnvConfig(ENV["env_fn"], dict(ENV["env_kwargs"]), num_envs=num_envs)


def collector_runner(num_envs: int, seed: int, name: str, policy: dict[str, Any]) -> Runner:
    vec = config(num_envs).make_vector(seed)
    table = BindingTable(
        [PolicyBinding(id="main", class_path=policy["class_path"], policy_kwargs=policy["policy_kwargs"])], vec.spec
    )
    (group,) = vec.spec.groups.values()
    policies = {"main": PolicyRegistry().get(table.binding("main"), group)}
    collector = RolloutCollector(vec, MultiAgentPolicy(policies, table), rollout_steps=ROLLOUT_STEPS)

    def run() -> int:
        collector.collect()
        return ROLLOUT_STEPS * num_envs

    return Runner(name, run, collector.close)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--num-envs", type=int, default=ENV["num_envs"])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--write-result",
        action="store_true",
        help="also write benchmarks/results/mettagrid_speed.json (the docs' table)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runners = [
        raw_runner(args.num_envs, 0, config=config(args.num_envs), name="raw mines_env loop"),
        collector_runner(args.num_envs, 0, "lightmarl collector, TokenEncoder", TOKEN_POLICY),
        collector_runner(args.num_envs, 0, "lightmarl collector, flatten MLP", FLATTEN_POLICY),
    ]
    repeats = [interleaved_rates(runners, args.seconds) for _ in range(args.repeats)]
    agents = ENV["env_kwargs"]["num_agents"]
    print(f"load average after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| path | env steps/s (best) | agent steps/s | × raw (median) |")
    print("| --- | ---: | ---: | ---: |")
    rows = []
    for i, runner in enumerate(runners):
        best = max(r[i] for r in repeats)
        ratio = statistics.median(r[i] / r[0] for r in repeats)
        rows.append([runner.name, f"{best:,.0f}", f"{best * agents:,.0f}", f"{ratio:.2f}"])
        print(f"| {runner.name} | {best:,.0f} | {best * agents:,.0f} | {ratio:.2f} |")
    if args.write_result:
        from results import write_result  # benchmarks/results.py, beside this script

        argv = " ".join(a for a in sys.argv[1:] if a != "--write-result")
        path = write_result(
            "mettagrid_speed",
            command=f"python benchmarks/mettagrid_speed.py {argv}".strip(),
            per_seed={f"run {k}": dict(zip([r.name for r in runners], run)) for k, run in enumerate(repeats)},
            columns=["path", "env steps/s (best)", "agent steps/s", "× raw (median)"],
            rows=rows,
        )
        print(f"wrote {path}")
    for runner in runners:
        runner.close()


if __name__ == "__main__":
    main()
