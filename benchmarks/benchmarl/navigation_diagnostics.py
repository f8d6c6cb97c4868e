"""VMAS navigation with two per-agent diagnostics in ``info()``, for ``env.info_fields``.

``collision_steps``: how many steps of the episode so far the agent has collided with another
(each costs it the scenario's collision penalty, -1); ``distance``: its distance to its goal.
lightmarl's evaluation reads a field at an episode's last step, so ``eval/main/info/...`` are
the collision steps per agent per episode and the distance left at the end. Rewards,
observations and dynamics are the scenario's own. Used for docs/vmas.md, "Navigation":

    PYTHONPATH=benchmarks/benchmarl lightmarl validate --config recipes/vmas_navigation.yaml \\
      --ckpt_path last --model.env.init_args.scenario navigation_diagnostics.DiagnosedNavigation \\
      --model.env.init_args.info_fields '[collision_steps, distance]'
"""

from __future__ import annotations

import torch
from vmas.scenarios.navigation import Scenario


class DiagnosedNavigation(Scenario):
    def reset_world_at(self, env_index: int | None = None) -> None:
        super().reset_world_at(env_index)
        for agent in self.world.agents:
            if env_index is None or not hasattr(agent, "collision_steps"):
                agent.collision_steps = torch.zeros(self.world.batch_dim, device=self.world.device)
            else:
                agent.collision_steps[env_index] = 0

    def reward(self, agent):  # type: ignore[no-untyped-def]
        reward = super().reward(agent)
        # The first agent's call fills every agent's collision penalty of this step.
        agent.collision_steps = agent.collision_steps + (agent.agent_collision_rew < 0).float()
        return reward

    def info(self, agent):  # type: ignore[no-untyped-def]
        return {"collision_steps": agent.collision_steps, "distance": agent.distance_to_goal}
