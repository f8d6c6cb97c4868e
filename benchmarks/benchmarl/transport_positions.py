"""Where a transport team's agents are, and which way they push: a policy's behaviour, measured.

Transport pays only for moving the package towards the goal, so a team earns by getting behind
the package (on its far side from the goal) and pushing; from the near side a push moves the
package away (docs/vmas.md, "Transport"). This script plays policies greedily on BenchMARL's
transport task through lightmarl's ``VmasVecEnv`` and reports, at a few steps of the episode and
over every agent of every copy:

* the share of agents behind the package (further from the goal than the package, along the
  goal-package line);
* the share touching the package (centre within 0.14 of the package's, the default package's
  half-diagonal plus an agent radius and a margin) from behind, and from the goal's side;
* the mean force along the direction from the package to the goal (positive: towards the goal);
* the per-agent return so far.

Policies: ``--checkpoint LABEL=PATH#BINDING`` (any lightmarl checkpoint or export; repeatable) and
``--scripted`` (VMAS's own ``HeuristicPolicy``, ``lightmarl_examples.vmas_transport``).

Usage, from the repository root with lightmarl's virtualenv (the ``vmas`` extra)::

    python benchmarks/benchmarl/transport_positions.py --scripted \\
        --checkpoint kickstarted=runs/transport_kickstart/vmas_transport/lightmarl-kickstarted_seed0/checkpoints/last.ckpt#main
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
#: BenchMARL 1.5.2's ``vmas/transport`` task config (as in ``compare.py``'s ``TASKS``).
SCENARIO_KWARGS = {"n_agents": 4, "n_packages": 1, "package_width": 0.15, "package_length": 0.15, "package_mass": 50}
MAX_STEPS = 100
TOUCHING = 0.14
REPORT_STEPS = (0, 25, 50, 75, 99)
#: The example teacher's class path: loading a checkpoint that names it needs it allowed.
SCRIPTED = "lightmarl_examples.vmas_transport.TransportHeuristicPolicy"

Policy = Callable[[torch.Tensor], torch.Tensor]


def checkpoint_policy(spec: str) -> Policy:
    """``PATH#BINDING`` -> the binding's greedy policy: observation ``[envs, agents, 11]`` -> forces."""
    from tensordict import TensorDict
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    from lightmarl import keys
    from lightmarl.inference import load_population

    path, _, binding = spec.partition("#")
    population = load_population(path, allow=[SCRIPTED])
    policy = population.bindings[binding or "main"]
    group = policy.group

    def act(observation: torch.Tensor) -> torch.Tensor:
        rows = {
            keys.OBSERVATION: observation,
            keys.AGENT_ID: torch.tensor(group.agent_ids).expand(*observation.shape[:2]),
        }
        td = TensorDict(
            {group.name: TensorDict(rows, batch_size=observation.shape[:2])}, batch_size=observation.shape[:1]
        )
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            return policy(td).get((group.name, keys.ACTION))

    return act


def positions(policy: Policy, num_envs: int, seed: int, package_mass: float) -> list[dict[str, float]]:
    """One episode of ``num_envs`` copies; at each of :data:`REPORT_STEPS`, the shares and means above."""
    from lightmarl.envs.vmas import VmasEnvConfig

    config = VmasEnvConfig(
        scenario="transport",
        scenario_kwargs={**SCENARIO_KWARGS, "package_mass": package_mass},
        num_envs=num_envs,
        max_steps=MAX_STEPS,
        continuous_actions=True,
    )
    vector = config.make_base_vector(seed=seed, num_envs=num_envs)
    current = vector.reset()
    group = next(iter(vector.spec.groups))
    returns = torch.zeros(num_envs)
    report = []
    for step in range(MAX_STEPS):
        # transport's observation: own pos (0:2), vel (2:4), package - goal (4:6), package - agent (6:8), ...
        observation = current[group]["observation"]
        away = observation[..., 4:6] / observation[..., 4:6].norm(dim=-1, keepdim=True).clamp_min(1e-6)
        behind = ((-observation[..., 6:8]) * away).sum(-1) > 0
        touching = observation[..., 6:8].norm(dim=-1) < TOUCHING
        action = policy(observation)
        towards_goal = (action * -away).sum(-1)
        result, _ = vector.step({group: action})
        returns += result[group]["reward"].mean(dim=1).reshape(-1)
        current = vector.current
        if step in REPORT_STEPS:
            report.append(
                {
                    "step": step,
                    "behind": float(behind.float().mean()),
                    "touching_behind": float((touching & behind).float().mean()),
                    "touching_in_front": float((touching & ~behind).float().mean()),
                    "force_towards_goal": float(towards_goal.mean()),
                    "return_so_far": float(returns.mean()),
                }
            )
    vector.close()
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", default=[], metavar="LABEL=PATH#BINDING")
    parser.add_argument("--scripted", action="store_true", help="also play VMAS's scripted HeuristicPolicy")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--package-mass", type=float, default=SCENARIO_KWARGS["package_mass"])
    parser.add_argument("--json", metavar="NAME", help="also write benchmarks/results/NAME.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    policies: dict[str, Policy] = {}
    if args.scripted:
        from lightmarl.envs.vmas import VmasEnvConfig
        from lightmarl_examples.vmas_transport import TransportHeuristicPolicy

        spec = VmasEnvConfig(scenario="transport", scenario_kwargs=SCENARIO_KWARGS, continuous_actions=True).spec()
        policies["VMAS's scripted HeuristicPolicy"] = TransportHeuristicPolicy(spec.groups["agent"]).act
    for entry in args.checkpoint:
        label, sep, spec_path = entry.partition("=")
        if not sep or not label or not spec_path:
            parser.error(f"--checkpoint: {entry!r}: write LABEL=PATH#BINDING")
        policies[label] = checkpoint_policy(spec_path)
    if not policies:
        parser.error("name a policy: --checkpoint LABEL=PATH#BINDING and/or --scripted")
    measured = {
        label: positions(policy, args.num_envs, args.seed, args.package_mass) for label, policy in policies.items()
    }
    rows = [
        [
            label,
            r["step"],
            r["behind"],
            r["touching_behind"],
            r["touching_in_front"],
            r["force_towards_goal"],
            r["return_so_far"],
        ]
        for label, report in measured.items()
        for r in report
    ]
    for row in rows:
        print(" | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row))
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
                    "step",
                    {"name": "agents behind the package", "format": ".2f"},
                    {"name": "touching it from behind", "format": ".2f"},
                    {"name": "touching it from the goal's side", "format": ".2f"},
                    {"name": "force towards the goal", "format": ".2f"},
                    {"name": "return so far (per agent)", "format": ".2f"},
                ],
                rows=rows,
                notes=(
                    f"VMAS transport with BenchMARL's task config (package mass {args.package_mass:g}, "
                    f"{MAX_STEPS}-step episodes), {args.num_envs} copies, seed {args.seed}, greedy actions; shares "
                    f"of all agents; touching: agent centre within {TOUCHING} of the package's."
                ),
            ),
        )


if __name__ == "__main__":
    main()
