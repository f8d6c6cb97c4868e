"""VMAS ``transport``'s scripted policy, wrapped as a lightmarl :class:`ScriptedPolicy`.

It reads transport's observation layout, so it lives with the example, not in lightmarl: a recipe
names it by class path (``lightmarl_examples.vmas_transport.TransportHeuristicPolicy``).
"""

from __future__ import annotations

import torch

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import ScriptedPolicy


class TransportHeuristicPolicy(ScriptedPolicy):
    """VMAS transport: each agent steers to the package's far side along a spline, then pushes it to the goal.

    This is ``vmas.scenarios.transport.HeuristicPolicy`` (VMAS's own script for the scenario),
    called on each row's observation: ``[pos(2), vel(2), package - goal(2), package - agent(2),
    package vel(2), on_goal(1)]`` for one package. Deterministic: it has no distribution, so it
    teaches by its actions (distillation's cross-entropy to the teacher's action for continuous
    actions, docs/distillation.md).

    Args:
        group: the agent group this policy acts for (transport with continuous actions).

    Examples:
        >>> from lightmarl.envs.vmas import VmasEnvConfig
        >>> env = VmasEnvConfig(scenario="transport", num_envs=2, continuous_actions=True)
        >>> policy = TransportHeuristicPolicy(env.spec().groups["agent"])
        >>> policy.act(torch.zeros(3, 4, 11)).shape
        torch.Size([3, 4, 2])
    """

    def __init__(self, group: GroupSpec) -> None:
        super().__init__(group)
        if group.action_kind != "continuous" or tuple(group.action_shape) != (2,):
            raise ValueError(
                f"TransportHeuristicPolicy: needs transport's continuous 2-d forces; group {group.name!r} has "
                f"{group.action_kind} actions of shape {tuple(group.action_shape)} (set continuous_actions: true)"
            )
        if tuple(group.observation_shape) != (11,):
            raise ValueError(
                f"TransportHeuristicPolicy: reads transport's 11-value observation (one package); group "
                f"{group.name!r} observes {tuple(group.observation_shape)}"
            )
        from vmas.scenarios.transport import HeuristicPolicy

        self.script = HeuristicPolicy(continuous_action=True)
        self.u_range = float(group.action_high[0])

    def act(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor:
        rows = observation.reshape(-1, observation.shape[-1]).float()
        action = self.script.compute_action(rows, u_range=self.u_range)
        return action.reshape(*observation.shape[:-1], 2)
