"""CueMemory: a small partially observable PettingZoo task that only a memory can solve.

Each agent privately sees one of ``num_cues`` cues at the first step, then ``delay`` steps of
nothing, then an "answer now" signal: answering with its cue pays 1, anything else 0. A
policy without memory sees the same observation at the answer step whatever the cue was, so
it scores ``1 / num_cues`` at best; a recurrent policy can score 1.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

CUE, WAIT, ANSWER = 0, 1, 2


class CueMemoryEnv(ParallelEnv):
    """Recall-a-cue task for ``num_agents`` agents (``agent_0`` ...).

    Observation: ``[cue one-hot (num_cues), phase one-hot (cue, wait, answer)]``; the cue part
    is zero after the first step. Action: ``Discrete(num_cues)``, scored only at the answer step.

    Args:
        num_agents: number of agents, each with its own cue.
        num_cues: number of distinct cues (chance level is ``1 / num_cues``).
        delay: empty steps between the cue and the answer step.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "cue_memory_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, num_agents: int = 2, num_cues: int = 4, delay: int = 4) -> None:
        if num_agents < 1 or num_cues < 2 or delay < 0:
            raise ValueError(
                f"CueMemoryEnv: need num_agents >= 1, num_cues >= 2, delay >= 0; got {num_agents}, {num_cues}, {delay}"
            )
        self.num_cues = num_cues
        self.delay = delay
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self._observation_space = spaces.Box(0.0, 1.0, (num_cues + 3,), np.float32)
        self._action_space = spaces.Discrete(num_cues)
        self._rng = np.random.default_rng()
        self._cues: dict[str, int] = {}
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def _observe(self, phase: int) -> dict[str, np.ndarray]:
        out = {}
        for agent in self.agents:
            obs = np.zeros(self.num_cues + 3, np.float32)
            if phase == CUE:
                obs[self._cues[agent]] = 1.0
            obs[self.num_cues + phase] = 1.0
            out[agent] = obs
        return out

    def _phase(self) -> int:
        if self._t == 0:
            return CUE
        return ANSWER if self._t == self.delay + 1 else WAIT

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._cues = {a: int(self._rng.integers(self.num_cues)) for a in self.agents}
        self._t = 0
        return self._observe(self._phase()), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        answering = self._phase() == ANSWER
        rewards = {a: float(answering and int(actions.get(a, -1)) == self._cues[a]) for a in self.agents}
        self._t += 1
        done = answering
        observations = self._observe(self._phase())
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, False)
        infos: dict[str, dict] = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        pass


def parallel_env(**kwargs: Any) -> CueMemoryEnv:
    """Constructor for recipes: ``env_fn: lightmarl.envs.testing.memory.parallel_env`` (or the class, ``lightmarl.envs.CueMemoryEnv``)."""
    return CueMemoryEnv(**kwargs)
