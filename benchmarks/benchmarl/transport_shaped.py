"""VMAS transport with a potential-based shaping term for reaching the package's far side.

Transport pays only for moving the package towards the goal (docs/vmas.md, "transport"), and an
untrained team rarely touches the package. ``ShapedTransport`` adds, per agent and step,
``behind_factor`` x the decrease of the agent's distance to the point just behind the package
(on the side away from the goal, where VMAS's scripted policy steers first): a potential-based
term (Ng et al. 1999), so it sums over an episode to the start's potential minus the end's and
does not change which policies are optimal. Dynamics, observations and the package reward are the
scenario's own; ``info()`` reports ``package_return``, the episode's task return so far, which
lightmarl's evaluation reads at an episode's last step (``env.info_fields``):

    PYTHONPATH=benchmarks/benchmarl lightmarl fit --config recipes/vmas_transport.yaml \\
      --model.env.init_args.scenario transport_shaped.ShapedTransport \\
      --model.env.init_args.info_fields '[package_return]'
"""

from __future__ import annotations

import torch
from vmas.scenarios.transport import Scenario


class ShapedTransport(Scenario):
    """Transport plus ``behind_factor`` x the decrease of each agent's distance to the package's far side."""

    def make_world(self, batch_dim: int, device: torch.device, **kwargs):  # type: ignore[no-untyped-def]
        self.behind_factor = float(kwargs.pop("behind_factor", 10.0))
        return super().make_world(batch_dim, device, **kwargs)

    def behind_distance(self, agent) -> torch.Tensor:  # type: ignore[no-untyped-def]
        """The agent's distance to the point a package half-width plus an agent radius behind the package."""
        package = self.packages[0]
        away = package.state.pos - package.goal.state.pos
        away = away / away.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        target = package.state.pos + away * (self.package_width / 2 + self.agent_radius)
        return torch.linalg.vector_norm(agent.state.pos - target, dim=-1)

    def reset_world_at(self, env_index: int | None = None) -> None:
        super().reset_world_at(env_index)
        for agent in self.world.agents:
            potential = self.behind_distance(agent) * self.behind_factor
            if env_index is None or not hasattr(agent, "behind_potential"):
                agent.behind_potential = potential
                agent.package_return = torch.zeros(self.world.batch_dim, device=self.world.device)
            else:
                agent.behind_potential[env_index] = potential[env_index]
                agent.package_return[env_index] = 0

    def reward(self, agent):  # type: ignore[no-untyped-def]
        package_reward = super().reward(agent)
        agent.package_return = agent.package_return + package_reward
        potential = self.behind_distance(agent) * self.behind_factor
        shaping = agent.behind_potential - potential
        agent.behind_potential = potential
        return package_reward + shaping

    def info(self, agent):  # type: ignore[no-untyped-def]
        return {"package_return": agent.package_return}
