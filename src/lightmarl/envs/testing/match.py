"""MatchTarget: a tiny PettingZoo task with ``MultiDiscrete`` actions, action masks and agents that leave.

Every step each agent sees a target choice for each of its sub-actions and is paid the
fraction of sub-actions that hit their target. Some choices are illegal (its ``action_mask``
says which; the target never is), and an illegal choice raises, so a policy that ignores the
mask fails loudly. It exists to exercise the parts of the env layer the mpe2 tasks do not:
``MultiDiscrete`` (or ``Discrete``) actions, ``Dict`` observations with an ``action_mask``,
and agents leaving before the episode ends. A policy that reads its observation scores 1 per
step; uniformly random legal play scores about ``mean(1 / legal choices)``.

Each agent's ``infos`` report ``t`` (the steps played so far) at every step, ``score`` (its
return so far) only at its last step, and ``label`` (a string), so that env info fields can be
checked against returns and lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from lightmarl import keys


class MatchTargetEnv(ParallelEnv):
    """Hit-the-target task for ``num_agents`` agents (``agent_0`` ...).

    Observation: ``{"observation": target one-hots side by side (sum(nvec)), "action_mask":
    legal choices side by side (sum(nvec))}``, or the bare one-hots without ``action_mask``.
    Action: ``MultiDiscrete(nvec)``, or ``Discrete(nvec[0])`` when ``nvec`` has one entry.

    Args:
        num_agents: number of agents.
        nvec: choices per sub-action.
        action_mask: observations carry an ``action_mask`` (each non-target choice is legal
            with probability 1/2); without it every choice is legal.
        max_cycles: steps per episode.
        leave_probability: chance per step that an agent is terminated and leaves early.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "match_target_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(
        self,
        num_agents: int = 2,
        nvec: Sequence[int] = (3, 4),
        action_mask: bool = True,
        max_cycles: int = 8,
        leave_probability: float = 0.0,
    ) -> None:
        nvec = tuple(int(n) for n in nvec)
        if num_agents < 1 or not nvec or min(nvec) < 2 or max_cycles < 1 or not 0 <= leave_probability < 1:
            raise ValueError(
                "MatchTargetEnv: need num_agents >= 1, choices >= 2 per sub-action, max_cycles >= 1 and "
                f"0 <= leave_probability < 1; got {num_agents}, {nvec}, {max_cycles}, {leave_probability}"
            )
        self.nvec = nvec
        self.masked = action_mask
        self.max_cycles = max_cycles
        self.leave_probability = leave_probability
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        size = sum(nvec)
        targets = spaces.Box(0.0, 1.0, (size,), np.float32)
        self._observation_space: spaces.Space = (
            spaces.Dict({"observation": targets, "action_mask": spaces.Box(0, 1, (size,), np.int8)})
            if action_mask
            else targets
        )
        self._action_space: spaces.Space = (
            spaces.Discrete(nvec[0]) if len(nvec) == 1 else spaces.MultiDiscrete(np.array(nvec))
        )
        self._offsets = np.cumsum((0, *nvec[:-1]))
        self._rng = np.random.default_rng()
        self._targets: dict[str, np.ndarray] = {}
        self._legal: dict[str, np.ndarray] = {}
        self._t = 0
        self._scores: dict[str, float] = {}

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_space

    def _draw(self) -> dict[str, Any]:
        """New targets (and legal choices) for the present agents, and their observations."""
        out: dict[str, Any] = {}
        for agent in self.agents:
            target = np.array([self._rng.integers(n) for n in self.nvec])
            legal = self._rng.random(sum(self.nvec)) < 0.5 if self.masked else np.ones(sum(self.nvec), bool)
            legal[self._offsets + target] = True
            self._targets[agent], self._legal[agent] = target, legal
            one_hot = np.zeros(sum(self.nvec), np.float32)
            one_hot[self._offsets + target] = 1.0
            out[agent] = (
                {keys.OBSERVATION: one_hot, keys.ACTION_MASK: legal.astype(np.int8)} if self.masked else one_hot
            )
        return out

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._t = 0
        self._scores = dict.fromkeys(self.agents, 0.0)
        return self._draw(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rewards = {}
        for agent in self.agents:
            choice = np.atleast_1d(np.asarray(actions[agent], dtype=np.int64))
            if choice.shape != (len(self.nvec),) or not self._legal[agent][self._offsets + choice].all():
                raise ValueError(f"{agent}: illegal action {actions[agent]!r} (legal choices {self._legal[agent]})")
            rewards[agent] = float((choice == self._targets[agent]).mean())
            self._scores[agent] += rewards[agent]
        self._t += 1
        truncated = self._t >= self.max_cycles
        leaving = {a: bool(self._rng.random() < self.leave_probability) for a in self.agents}
        terminations = {a: leaving[a] for a in self.agents}
        truncations = dict.fromkeys(self.agents, truncated)
        observations = self._draw()
        infos: dict[str, dict] = {
            a: {"t": self._t, "label": "match", **({"score": self._scores[a]} if truncated or leaving[a] else {})}
            for a in self.agents
        }
        self.agents = [] if truncated else [a for a in self.agents if not leaving[a]]
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        """Nothing to release: the env holds no window, file or process."""


def parallel_env(**kwargs: Any) -> MatchTargetEnv:
    """Constructor for recipes: ``env_fn: lightmarl.envs.testing.match.parallel_env`` (or the class, ``lightmarl.envs.MatchTargetEnv``)."""
    return MatchTargetEnv(**kwargs)
