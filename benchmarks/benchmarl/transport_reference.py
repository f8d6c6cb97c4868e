"""What VMAS transport pays a policy that never learned: reference returns on BenchMARL's task.

Transport (4 agents push a package of mass 50 onto a goal, 100-step episodes: BenchMARL 1.5.2's
``vmas/transport`` config) pays, each step, 100 times the decrease of the package's distance to
the goal, to every agent. Nothing is paid for reaching the package, so a policy earns only once
its agents touch the package, and then the sign depends on the side they push from. This script
plays fixed policies through lightmarl's ``VmasVecEnv`` (the adapter the recipes train on) and
reports, per policy, the per-agent episode return (the quantity both frameworks evaluate), how
many episodes had any non-zero reward and how many ended with the package on the goal:

* uniformly random forces (what an untrained policy does);
* every agent driven at full force towards the package (contact from whatever side it starts on);
* VMAS's own scripted ``HeuristicPolicy`` for transport (each agent steers behind the package and
  pushes it towards the goal): what a policy that solved the pushing earns in 100 steps.

Usage, from the repository root with lightmarl's virtualenv (the ``vmas`` extra)::

    python benchmarks/benchmarl/transport_reference.py --num-envs 512 --episodes 2 --json vmas_transport_reference
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
#: BenchMARL 1.5.2's ``vmas/transport`` task config (as in ``compare.py``'s ``TASKS``).
SCENARIO_KWARGS = {"n_agents": 4, "n_packages": 1, "package_width": 0.15, "package_length": 0.15, "package_mass": 50}
MAX_STEPS = 100

Policy = Callable[[torch.Tensor], torch.Tensor]


def policies(num_envs: int, num_agents: int) -> dict[str, Policy]:
    """Fixed policies: observation ``[envs, agents, 11]`` -> forces ``[envs, agents, 2]`` in [-1, 1]."""
    from vmas.scenarios.transport import HeuristicPolicy

    heuristic = HeuristicPolicy(continuous_action=True)

    def uniform(obs: torch.Tensor) -> torch.Tensor:
        return torch.rand(num_envs, num_agents, 2) * 2 - 1

    def towards_package(obs: torch.Tensor) -> torch.Tensor:
        # Transport's observation: own pos (0:2), vel (2:4), package - goal (4:6), package - agent (6:8), ...
        return (obs[..., 6:8] * 10).clamp(-1, 1)

    def scripted(obs: torch.Tensor) -> torch.Tensor:
        return torch.stack([heuristic.compute_action(obs[:, j], u_range=1.0) for j in range(num_agents)], dim=1)

    return {
        "uniformly random forces": uniform,
        "full force towards the package": towards_package,
        "VMAS's scripted HeuristicPolicy": scripted,
    }


def play(
    policy: Policy, num_envs: int, episodes: int, seed: int, scenario_kwargs: dict[str, Any] = SCENARIO_KWARGS
) -> dict[str, float]:
    """``episodes`` episodes of every copy (auto-reset): mean per-agent return, share of episodes with
    any reward, share that ended with the package on the goal."""
    from lightmarl.envs.vmas import VmasEnvConfig

    config = VmasEnvConfig(
        scenario="transport",
        scenario_kwargs=dict(scenario_kwargs),
        num_envs=num_envs,
        max_steps=MAX_STEPS,
        continuous_actions=True,
    )
    vector = config.make_base_vector(seed=seed, num_envs=num_envs)
    torch.manual_seed(seed)
    current = vector.reset()
    group = next(iter(vector.spec.groups))
    running = torch.zeros(num_envs)
    touched = torch.zeros(num_envs, dtype=torch.bool)
    returns: list[float] = []
    rewarded = solved = 0
    for _ in range(episodes * MAX_STEPS):
        step, ended = vector.step({group: policy(current[group]["observation"])})
        reward = step[group]["reward"].mean(dim=1).reshape(-1)  # the per-agent return's mean over agents
        running += reward
        touched |= reward != 0
        solved += int((ended & step[group]["terminated"].all(dim=1)).sum())
        for i in ended.nonzero().flatten().tolist():
            returns.append(float(running[i]))
            rewarded += int(touched[i])
        running[ended] = 0.0
        touched[ended] = False
        current = vector.current
    vector.close()
    count = len(returns)
    return {
        "episodes": count,
        "return": sum(returns) / count,
        "return_std": float(torch.tensor(returns).std()),
        "rewarded_episodes": rewarded / count,
        "solved_episodes": solved / count,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=512)
    parser.add_argument("--episodes", type=int, default=2, help="episodes of each copy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--package-mass",
        type=float,
        default=SCENARIO_KWARGS["package_mass"],
        help="the package's mass (BenchMARL's task: 50); compare.py --task-setting package_mass=M trains on the same",
    )
    parser.add_argument("--json", metavar="NAME", help="also write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    scenario_kwargs = {**SCENARIO_KWARGS, "package_mass": args.package_mass}
    measured = {
        name: play(policy, args.num_envs, args.episodes, args.seed, scenario_kwargs)
        for name, policy in policies(args.num_envs, SCENARIO_KWARGS["n_agents"]).items()
    }
    for name, numbers in measured.items():
        print(
            f"{name}: return {numbers['return']:.4f} (std {numbers['return_std']:.3f}) over {numbers['episodes']} episodes; "
            f"rewarded {numbers['rewarded_episodes']:.3f}, package on the goal {numbers['solved_episodes']:.3f}"
        )
    if args.json:
        sys.path.insert(0, str(HERE.parent))  # benchmarks/, where results.py lives
        from results import command_line, write_result

        print(
            "wrote",
            write_result(
                args.json,
                command=command_line(),
                per_seed=measured,
                columns=[
                    "policy",
                    {"name": "episode return (per agent)", "format": ".4f"},
                    {"name": "std over episodes", "format": ".3f"},
                    {"name": "episodes with any reward", "format": ".3f"},
                    {"name": "episodes ending on the goal", "format": ".3f"},
                    {"name": "episodes", "format": ",.0f"},
                ],
                rows=[
                    [
                        name,
                        n["return"],
                        n["return_std"],
                        n["rewarded_episodes"],
                        n["solved_episodes"],
                        n["episodes"],
                    ]
                    for name, n in measured.items()
                ],
                notes=(
                    f"VMAS transport with BenchMARL's task config ({scenario_kwargs}, {MAX_STEPS}-step episodes), "
                    f"{args.num_envs} copies x {args.episodes} episodes through lightmarl's VmasVecEnv, seed {args.seed}."
                ),
            ),
        )


if __name__ == "__main__":
    main()
