"""VMAS transport with a potential-based shaping term for reaching the package's far side.

Transport pays only for moving the package towards the goal (docs/vmas.md, "transport"), and an
untrained team rarely touches the package. ``ShapedTransport`` adds, per agent and step,
``behind_factor`` x the decrease of the agent's distance to the point just behind the package
(on the side away from the goal, where VMAS's scripted policy steers first): a potential-based
term (Ng et al. 1999), so it sums over an episode to the start's potential minus the end's and
does not change which policies are optimal. With ``around_package: true`` an agent on the goal's
side of the package is measured along a path around it instead of straight through;
``behind_offset`` moves the point (default: where an agent touches the far face). Dynamics,
observations and the package reward are the scenario's own; ``info()`` reports
``package_return``, the episode's task return so far, which lightmarl's evaluation reads at an
episode's last step (``env.info_fields``):

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
        self.around_package = bool(kwargs.pop("around_package", False))
        behind_offset = kwargs.pop("behind_offset", None)
        world = super().make_world(batch_dim, device, **kwargs)
        # Default: where an agent just touches the package's far face. VMAS's scripted policy aims
        # 0.02 inside the face instead (0.055 from the centre of the default package), so that an
        # agent holding the target keeps pushing.
        contact = self.package_width / 2 + self.agent_radius
        self.behind_offset = contact if behind_offset is None else float(behind_offset)
        return world

    def behind_distance(self, agent) -> torch.Tensor:  # type: ignore[no-untyped-def]
        """The agent's distance to the point ``behind_offset`` behind the package's centre.

        With ``around_package`` an agent on the goal's side of the package is measured along a path
        around it: to the point beside the package on the agent's side, then to the point behind."""
        package = self.packages[0]
        away = package.state.pos - package.goal.state.pos
        away = away / away.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        target = package.state.pos + away * self.behind_offset
        reach = self.package_width / 2 + self.agent_radius
        direct = torch.linalg.vector_norm(agent.state.pos - target, dim=-1)
        if not self.around_package:
            return direct
        offset = agent.state.pos - package.state.pos
        side = torch.stack([-away[:, 1], away[:, 0]], dim=-1)  # perpendicular to the push direction
        side = side * torch.where((offset * side).sum(-1, keepdim=True) >= 0, 1.0, -1.0)
        beside = package.state.pos + side * reach * 1.5
        around = torch.linalg.vector_norm(agent.state.pos - beside, dim=-1) + torch.linalg.vector_norm(
            beside - target, dim=-1
        )
        in_front = (offset * away).sum(-1) < 0
        return torch.where(in_front, around, direct)

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
