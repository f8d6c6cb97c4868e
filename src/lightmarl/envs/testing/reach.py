"""ReachTarget: a tiny continuous-action PettingZoo task for learning checks.

Every step each agent sees a fresh target point in ``[-1, 1]^dims`` and is paid
``-mean((action - target)^2)``: a policy that reads its observation and outputs it scores 0 per
step, uniformly random actions score about ``-2/3`` per step and the zero action ``-1/3``. It is
what [`MatchTargetEnv`][lightmarl.envs.testing.match.MatchTargetEnv] is for discrete actions:
learnable in a few thousand frames, so that a short run shows whether a loss drives the policy
at all. Imports no torch (env worker processes build it).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class ReachTargetEnv(ParallelEnv):
    """Output-the-target task for ``num_agents`` agents (``agent_0`` ...).

    Observation: the agent's target, ``Box(-1, 1, (dims,))``. Action: ``Box(-1, 1, (dims,))``.

    Args:
        num_agents: number of agents, each with its own target.
        dims: dimensions of a target (and of an action).
        max_cycles: steps per episode.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "reach_target_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, num_agents: int = 2, dims: int = 2, max_cycles: int = 8) -> None:
        if num_agents < 1 or dims < 1 or max_cycles < 1:
            raise ValueError(
                f"ReachTargetEnv: need num_agents, dims and max_cycles >= 1; got {num_agents}, {dims}, {max_cycles}"
            )
        self.dims = dims
        self.max_cycles = max_cycles
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self._space = spaces.Box(-1.0, 1.0, (dims,), np.float32)
        self._rng = np.random.default_rng()
        self._targets: dict[str, np.ndarray] = {}
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return self._space

    def action_space(self, agent: str) -> spaces.Space:
        return self._space

    def _draw(self) -> dict[str, np.ndarray]:
        self._targets = {a: self._rng.uniform(-1.0, 1.0, self.dims).astype(np.float32) for a in self.agents}
        return dict(self._targets)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        return self._draw(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rewards = {
            a: -float(np.mean((np.clip(np.asarray(actions[a], np.float32), -1, 1) - self._targets[a]) ** 2))
            for a in self.agents
        }
        self._t += 1
        truncated = self._t >= self.max_cycles
        observations = self._draw()
        terminations = dict.fromkeys(self.agents, False)
        truncations = dict.fromkeys(self.agents, truncated)
        infos: dict[str, dict] = {a: {} for a in self.agents}
        if truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        """Nothing to release: the env holds no window, file or process."""
