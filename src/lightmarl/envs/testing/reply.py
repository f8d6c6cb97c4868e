"""ReplyReward: a tiny turn-based (AEC) task whose rewards arrive only on the other seat's turn.

Two seats move in turn for ``moves`` turns (``player_0`` first). When a seat moves, the seat
that moved before it is paid for that earlier move: +1 if it was action 1 (``Discrete``) or a
positive action (``Box``), -1 otherwise. The game's last move is never paid (nobody replies), and
the game ends (terminated) with it. With ``opening_pay``, the second seat is also paid that much
on the first seat's first move, before it has moved at all. So every reward arrives on a row
where the paid agent did not act, which is what a learner of turn-based games must credit to the
move that earned it (or, for the opening pay, to the agent's first move of the game). A policy
that always plays 1 scores ``+1`` per paid move; uniformly random play scores 0.

The observation is the turn's number (one-hot) and, for discrete actions, an all-legal
``action_mask``. Imports no torch (env worker processes build it).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv


class ReplyRewardEnv(AECEnv):
    """Two seats, ``moves`` turns; each move is paid +1 / -1 on the next seat's turn.

    Args:
        moves: turns per game (at least 2: the first paid move needs a reply).
        continuous: ``Box(-1, 1, (1,))`` actions (paid +1 when positive) instead of ``Discrete(2)``.
        opening_pay: paid to the second seat on the game's first move (before its own first move).
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "reply_reward_v0", "render_modes": [], "is_parallelizable": False}

    def __init__(self, moves: int = 4, continuous: bool = False, opening_pay: float = 0.0) -> None:
        super().__init__()
        if moves < 2:
            raise ValueError(f"ReplyRewardEnv: moves must be at least 2, got {moves}")
        self.moves = moves
        self.continuous = continuous
        self.opening_pay = float(opening_pay)
        self.possible_agents = ["player_0", "player_1"]
        board = spaces.Box(0.0, 1.0, (moves,), np.float32)
        if continuous:
            self._observation_space: spaces.Space = board
            self._action_space: spaces.Space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        else:
            self._observation_space = spaces.Dict(
                {"observation": board, "action_mask": spaces.Box(0, 1, (2,), np.int8)}
            )
            self._action_space = spaces.Discrete(2)
        self._turn = 0
        self._last_paid = 0.0

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_space

    def observe(self, agent: str) -> Any:
        board = np.zeros(self.moves, np.float32)
        board[min(self._turn, self.moves - 1)] = 1.0
        if self.continuous:
            return board
        return {"observation": board, "action_mask": np.ones(2, np.int8)}

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos: dict[str, dict] = {a: {} for a in self.agents}
        self._turn = 0
        self._pending: float | None = None  # the previous move's pay, given on the next move
        self.agent_selection = self.agents[0]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        other = self.possible_agents[1 - self.possible_agents.index(agent)]
        self.rewards = {a: 0.0 for a in self.agents}
        if self._pending is not None:
            self.rewards[other] = self._pending  # the reply pays the move before it
        elif self.opening_pay:
            self.rewards[other] = self.opening_pay  # the second seat, paid before its first move
        good = float(np.asarray(action).reshape(-1)[0]) > 0 if self.continuous else int(action) == 1
        self._pending = 1.0 if good else -1.0
        self._turn += 1
        if self._turn >= self.moves:
            self.terminations = {a: True for a in self.agents}
        self.agent_selection = other
        self._accumulate_rewards()
