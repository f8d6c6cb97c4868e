"""Multi-binding forward: grouped forward of B bindings vs one batched forward over all rows.

A synthetic agent group (18-dim observations, 5 discrete actions, ``A`` agents) is acted for
by ``B`` bindings, each an ``MLPActorCritic`` with hidden sizes 64, 64. The grouped forward is
``MultiAgentPolicy`` with the agents split between the bindings, measured both with its
stacked path (same-shaped MLP actors as one batched matmul chain, the default) and with
``stack_same_shape=False`` (each binding's policy forwarded on its own rows); the reference is one
``MLPActorCritic`` actor over all ``A`` rows (``MultiAgentPolicy`` with one binding: the
stacked path's plain forward without a gather). Layouts:

- ``blocks``: agent ``a`` -> binding ``a * B // A`` (contiguous blocks), one env copy;
- ``round-robin``: agent ``a`` -> binding ``a % B``, one env copy;
- ``per-env``: 8 env copies of ``A / 8`` agents, a per-env map, agent ``a`` of copy ``e`` ->
  binding ``(a + e) % B`` (flat row indices over ``[envs, agents]``).

Grouped and reference calls alternate, so load from other processes hits both alike; each
figure is the median over ``--repeats`` rounds of ``--calls`` calls. Run from the repository
root::

    python benchmarks/binding_forward.py --threads 1
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.envs.spec import EnvSpec, GroupSpec
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding

OBS_DIM, NUM_ACTIONS, PER_ENV_COPIES = 18, 5, 8


def make_spec(num_agents: int) -> EnvSpec:
    agents = tuple(f"agent_{i}" for i in range(num_agents))
    group = GroupSpec("agent", agents, tuple(range(num_agents)), (OBS_DIM,), "discrete", num_actions=NUM_ACTIONS)
    return EnvSpec("synthetic", agents, {"agent": group})


def make_population(
    num_agents: int, num_bindings: int, layout: str, stack: bool = True
) -> tuple[MultiAgentPolicy, TensorDict]:
    envs = PER_ENV_COPIES if layout == "per-env" else 1
    agents = num_agents // envs
    spec = make_spec(agents)
    ids = [f"b{i}" for i in range(num_bindings)]
    if layout == "blocks":
        agent_map: list[str] | dict = [ids[a * num_bindings // agents] for a in range(agents)]
    elif layout == "round-robin":
        agent_map = [ids[a % num_bindings] for a in range(agents)]
    else:
        agent_map = {"per_env": {e: [ids[(a + e) % num_bindings] for a in range(agents)] for e in range(envs)}}
    table = BindingTable(
        [PolicyBinding(b, class_path="lightmarl.policies.MLPActorCritic") for b in ids], spec, agent_map
    )
    group = spec.groups["agent"]
    policies = {b: MLPActorCritic(group, hidden_sizes=(64, 64), critic="none") for b in table.active_ids}
    obs = torch.randn(envs, agents, OBS_DIM)
    td = TensorDict({"agent": TensorDict({"observation": obs}, batch_size=[envs, agents])}, batch_size=[envs])
    return MultiAgentPolicy(policies, table, stack_same_shape=stack), td


def time_calls(fn, td: TensorDict, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(td)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--bindings", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--layouts", nargs="+", default=["blocks", "round-robin", "per-env"])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--write-result", action="store_true", help="also write benchmarks/results/binding_forward.json"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    print(
        f"synthetic group: {OBS_DIM}-dim observations, {NUM_ACTIONS} actions, MLPActorCritic 64x64 per binding; "
        f"{args.repeats} rounds x {args.calls} calls, median; torch threads {args.threads}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, torch {torch.__version__}; load average "
        + " / ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    print()
    print(
        "| layout | A (rows) | B | one batched forward (µs) | grouped, stacked (µs) | × batched "
        "| grouped, separate forwards (µs) | × batched |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rows: list[list[object]] = []
    per_run: dict[str, dict[str, list[float]]] = {}
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        for layout in args.layouts:
            for num_agents in args.agents:
                reference, td = make_population(num_agents, 1, "blocks" if layout != "per-env" else layout)
                for num_bindings in args.bindings:
                    if layout == "per-env" and num_agents < PER_ENV_COPIES:
                        continue
                    stacked, _ = make_population(num_agents, num_bindings, layout)
                    separate, _ = make_population(num_agents, num_bindings, layout, stack=False)
                    paths = (reference, stacked, separate)
                    for fn in paths:  # warm-up (and first-call index build)
                        time_calls(fn, td.clone(), 5)
                    times: list[list[float]] = [[], [], []]
                    for _ in range(args.repeats):
                        for i, fn in enumerate(paths):
                            times[i].append(time_calls(fn, td, args.calls))
                    ref, stk, sep = (statistics.median(t) for t in times)
                    # Ratios are medians of per-round ratios, so slow rounds hit both sides.
                    r_stk = statistics.median(s / r for s, r in zip(times[1], times[0]))
                    r_sep = statistics.median(s / r for s, r in zip(times[2], times[0]))
                    print(
                        f"| {layout} | {num_agents} | {num_bindings} | {ref * 1e6:,.0f} | {stk * 1e6:,.0f} | "
                        f"{r_stk:.2f} | {sep * 1e6:,.0f} | {r_sep:.2f} |",
                        flush=True,
                    )
                    timings = [
                        f"{ref * 1e6:,.0f}",
                        f"{stk * 1e6:,.0f}",
                        f"{r_stk:.2f}",
                        f"{sep * 1e6:,.0f}",
                        f"{r_sep:.2f}",
                    ]
                    rows.append([layout, num_agents, num_bindings, *timings])
                    per_run[f"{layout} / {num_agents} / {num_bindings}"] = {
                        "batched_s": times[0],
                        "stacked_s": times[1],
                        "separate_s": times[2],
                    }
    if args.write_result:
        from results import write_result  # benchmarks/results.py, beside this script

        argv = " ".join(a for a in sys.argv[1:] if a != "--write-result")
        columns = ["layout", "A (rows)", "B", "one batched forward (µs)", "grouped, stacked (µs)", "× batched"]
        path = write_result(
            "binding_forward",
            command=f"python benchmarks/binding_forward.py {argv}".strip(),
            per_seed=per_run,
            columns=[*columns, "grouped, separate forwards (µs)", "× batched"],
            rows=rows,
            notes=f"Synthetic group: {OBS_DIM}-dim observations, {NUM_ACTIONS} actions, MLPActorCritic 64×64 per "
            f"binding; {args.repeats} rounds × {args.calls} calls, median; torch threads {args.threads}.",
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
