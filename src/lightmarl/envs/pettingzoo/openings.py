"""Turn-based board games that start each episode from a random opening.

Self-play between nearly deterministic policies plays the same handful of games again and again: the players meet few
positions and learn little that carries over to an opponent that plays differently (on connect
four, a main player trained that way missed most of the immediate wins and blocks it met against
a scripted opponent that plays random moves between its tactical ones, docs/league.md). Opening
each episode with a few uniformly random legal moves spreads the positions the players learn
from, as random openings do for game-playing agents generally. `random_opening_env` wraps
an AEC env by import path::

    env:
      env_fn: lightmarl.envs.pettingzoo.openings.random_opening_env
      env_kwargs: {env_fn: pettingzoo.classic.connect_four_v3.env, max_moves: 8}

The opening is part of the reset: no agent observes or is rewarded for it, and an opening that
ends the game is drawn again. Torch-free (worker processes build it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo.utils import BaseWrapper

from lightmarl._imports import import_object

#: openings drawn before giving up on one that does not end the game.
MAX_DRAWS = 100


class RandomOpening(BaseWrapper):
    """An AEC env whose episodes start after ``k`` uniformly random legal moves, ``k`` uniform in ``[min_moves, max_moves]``.

    The moves alternate between the agents as the env's turn order says; who moves first after
    the opening depends on ``k``. The opening's generator is seeded by ``reset(seed=...)`` (so a
    seeded reset always gives the same opening) and carries on between unseeded resets.

    Args:
        env: a PettingZoo AEC env with action masks (``observe(agent)["action_mask"]``).
        max_moves: the most random moves before the episode starts.
        min_moves: the fewest.
    """

    def __init__(self, env: Any, max_moves: int, min_moves: int = 0) -> None:
        if not hasattr(env, "agent_iter"):
            raise ValueError(
                f"random_opening_env: {type(env).__name__} is not a turn-based (AEC) env; random openings "
                "play one agent's move at a time"
            )
        if not (isinstance(min_moves, int) and isinstance(max_moves, int) and 0 <= min_moves <= max_moves):
            raise ValueError(
                f"random_opening_env: expected integers 0 <= min_moves <= max_moves, got min_moves={min_moves!r}, "
                f"max_moves={max_moves!r}"
            )
        super().__init__(env)
        self.min_moves, self.max_moves = min_moves, max_moves
        self._rng = np.random.default_rng()

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        moves = int(self._rng.integers(self.min_moves, self.max_moves + 1))
        for _ in range(MAX_DRAWS):
            self.env.reset(seed=seed, options=options)
            if self._play_opening(moves):
                # The opening is part of the reset: nobody is rewarded for it.
                for rewards in (self.env.rewards, self.env._cumulative_rewards):
                    for agent in rewards:
                        rewards[agent] = 0
                return
        raise RuntimeError(
            f"random_opening_env: {MAX_DRAWS} random openings of {moves} moves all ended the game; "
            "use a smaller max_moves"
        )

    def _play_opening(self, moves: int) -> bool:
        """Plays ``moves`` random legal moves; ``False`` when the game ended on the way."""
        for _ in range(moves):
            agent = self.env.agent_selection
            observation = self.env.observe(agent)
            if not isinstance(observation, dict) or "action_mask" not in observation:
                raise ValueError(
                    f"random_opening_env: agent {agent!r} observes no action_mask; random openings need the "
                    "env's legal moves"
                )
            legal = np.flatnonzero(np.asarray(observation["action_mask"]))
            if legal.size == 0:
                return False
            self.env.step(int(self._rng.choice(legal)))
            if any(self.env.terminations.values()) or any(self.env.truncations.values()):
                return False
        return True


def random_opening_env(env_fn: str, max_moves: int, min_moves: int = 0, **kwargs: Any) -> RandomOpening:
    """``env_fn(**kwargs)`` (an AEC env, by import path) wrapped in `RandomOpening`."""
    return RandomOpening(import_object(env_fn, field="env.env_kwargs.env_fn")(**kwargs), max_moves, min_moves)
