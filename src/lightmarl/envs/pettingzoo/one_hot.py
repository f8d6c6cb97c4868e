"""PettingZoo parallel envs with ``Discrete`` observations, seen as one-hot vectors.

The env layer reads ``Box`` observations; games such as ``pettingzoo.classic.rps_v2`` observe
a ``Discrete`` value (there: the opponent's last move, or "none yet"). `one_hot_parallel_env`
wraps such an env so that each observation is the one-hot vector of that value::

    env:
      env_fn: lightmarl.envs.pettingzoo.one_hot.one_hot_parallel_env
      env_kwargs: {env_fn: pettingzoo.classic.rps_v2.parallel_env, max_cycles: 1}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from lightmarl._imports import import_object


class OneHotObservations(ParallelEnv):
    """A parallel env whose ``Discrete(n)`` observations become ``Box(0, 1, (n,))`` one-hots.

    Args:
        env: the wrapped parallel env; every agent's observation space must be ``Discrete``.
    """

    def __init__(self, env: ParallelEnv) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.metadata = dict(getattr(env, "metadata", {}))
        self.render_mode = getattr(env, "render_mode", None)
        self._sizes: dict[str, int] = {}
        for agent in self.possible_agents:
            space = env.observation_space(agent)
            if not isinstance(space, spaces.Discrete) or int(space.start) != 0:
                raise ValueError(
                    f"one_hot_parallel_env: agent {agent!r} observes {space!r}; expected Discrete(n) starting at 0"
                )
            self._sizes[agent] = int(space.n)

    @property
    def agents(self) -> list[str]:  # type: ignore[override]
        return list(self.env.agents)

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self._sizes[agent],), dtype=np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return self.env.action_space(agent)

    def _encode(self, observations: dict[str, Any]) -> dict[str, np.ndarray]:
        encoded = {}
        for agent, value in observations.items():
            one_hot = np.zeros(self._sizes[agent], dtype=np.float32)
            one_hot[int(value)] = 1.0
            encoded[agent] = one_hot
        return encoded

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._encode(observations), infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._encode(observations), rewards, terminations, truncations, infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def state(self) -> np.ndarray:
        return self.env.state()


def one_hot_parallel_env(env_fn: str | Callable[..., ParallelEnv], **kwargs: Any) -> OneHotObservations:
    """``env_fn(**kwargs)`` with one-hot observations.

    Args:
        env_fn: a parallel env factory: its import path (from a recipe), or the callable itself
            (from Python, e.g. ``pettingzoo.classic.rps_v2.parallel_env``).
        kwargs: passed to ``env_fn``.
    """
    make = env_fn if callable(env_fn) else import_object(env_fn, field="env_kwargs.env_fn")
    if not callable(make):
        raise ValueError(f"one_hot_parallel_env: env_fn {env_fn!r} is not callable")
    return OneHotObservations(make(**kwargs))
