"""Hand-written policies for specific tasks: opponents, partners and distillation teachers."""

from __future__ import annotations

import torch

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import ScriptedPolicy

# mpe2 discrete moves: 0 no-op, 1 -x, 2 +x, 3 -y, 4 +y (``SimpleEnv._set_action``).
_MPE_MOVES = ((0.0, 0.0), (-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0))


class SpreadToLandmarkPolicy(ScriptedPolicy):
    """mpe2 ``simple_spread``: the agent with id ``i`` heads for landmark ``i % N``.

    Every agent claims its own landmark, so the landmarks are covered without talking.
    Each move is scored by the *progress* it makes: how much closer it brings the point the
    agent is heading for (its position plus ``coast * v`` for velocity ``v``, since MPE damps
    velocity only 25% a step) to its landmark, each move shifting that point by ``push``. The
    logits are ``sharpness * progress``: greedy play takes the best move, sampling explores
    around it, and a student can be distilled from the distribution.

    Observation layout (``simple_spread_v3``): ``[self_vel(2), self_pos(2),
    landmark_rel_pos(2N), other_agents_rel_pos(2(N-1)), communication(2(N-1))]``.

    Args:
        group: the agent group this policy acts for (``simple_spread`` with discrete actions).
        num_landmarks: ``N``; ``None`` reads it from the observation size (``6N`` in ``simple_spread``).
        sharpness: inverse temperature of the logits; higher is closer to greedy.
        coast: look-ahead: distance credited per unit of current velocity. MPE's physical
            coasting distance is ``dt / damping`` = 0.4; half of it arrives sooner and scored
            best on ``simple_spread`` N=3 (-10.7 vs -11.5 greedy per-agent return).
        push: distance credited to one move (``dt * accel * dt / damping`` = 0.2 in MPE).

    Examples:
        >>> from lightmarl.envs import PettingZooEnvConfig
        >>> env = PettingZooEnvConfig(env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 3})
        >>> policy = SpreadToLandmarkPolicy(env.spec().groups["agent"])
        >>> policy.action_logits(torch.zeros(2, 18), agent_id=torch.tensor([0, 1])).shape
        torch.Size([2, 5])
    """

    moves: torch.Tensor

    def __init__(
        self,
        group: GroupSpec,
        num_landmarks: int | None = None,
        sharpness: float = 20.0,
        coast: float = 0.2,
        push: float = 0.2,
    ) -> None:
        if group.action_kind != "discrete" or group.num_actions != len(_MPE_MOVES) or len(group.observation_shape) != 1:
            raise ValueError(
                f"SpreadToLandmarkPolicy needs mpe2 simple_spread with discrete actions (5 moves, flat observations); "
                f"group {group.name!r} has {group.action_kind} actions ({group.num_actions or group.action_shape}) "
                f"and observations {group.observation_shape}"
            )
        obs_dim = group.observation_shape[0]
        if num_landmarks is None:
            if obs_dim % 6:
                raise ValueError(
                    f"policy_kwargs.num_landmarks: cannot infer it from observation size {obs_dim} "
                    "(simple_spread has 6N); set it explicitly"
                )
            num_landmarks = obs_dim // 6
        if num_landmarks < 1 or 4 + 2 * num_landmarks > obs_dim:
            raise ValueError(
                f"policy_kwargs.num_landmarks: {num_landmarks!r} landmarks do not fit observations of size {obs_dim}"
            )
        if sharpness <= 0:
            raise ValueError(f"policy_kwargs.sharpness: expected a positive number, got {sharpness!r}")
        super().__init__(group)
        self.num_landmarks = num_landmarks
        self.sharpness = sharpness
        self.coast = coast
        self.push = push
        self.register_buffer("moves", torch.tensor(_MPE_MOVES), persistent=False)

    def action_logits(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor:
        batch = observation.shape[:-1]
        if agent_id is None:  # outside an env: every row is agent 0
            agent_id = torch.zeros(batch, dtype=torch.int64, device=observation.device)
        velocity = observation[..., 0:2]
        landmarks = observation[..., 4 : 4 + 2 * self.num_landmarks].unflatten(-1, (self.num_landmarks, 2))
        target = (agent_id % self.num_landmarks).expand(batch)
        offset = torch.gather(landmarks, -2, target[..., None, None].expand(*batch, 1, 2)).squeeze(-2)
        # Where the agent is heading, relative to its landmark, without / with each move.
        miss = offset - self.coast * velocity
        miss_after = miss[..., None, :] - self.push * self.moves.to(observation.dtype)
        progress = miss.norm(dim=-1, keepdim=True) - miss_after.norm(dim=-1)
        return self.sharpness * progress


class ConnectFourHeuristicPolicy(ScriptedPolicy):
    """PettingZoo ``connect_four_v3``: win if possible, else block the opponent's win, else random.

    A classic scripted opponent: among the legal columns it plays one that completes four of
    its own in a row; failing that, one where the opponent would complete four on its next
    move; failing that, a uniformly random legal column. It samples with its own generator in
    every exploration mode, so deterministic evaluation still meets a varied opponent.

    Observation layout (``connect_four_v3``, from the acting player's view): ``[6 rows (top
    first), 7 columns, 2]``, channel 0 its own pieces, channel 1 the opponent's; a piece
    dropped in a column lands on its lowest empty cell.

    Args:
        group: the agent group this policy acts for (connect four's players).
        seed: seed of the policy's own generator (``None``: torch's global RNG).
        block: also block the opponent's immediate wins (``False``: win-or-random).
    """

    kernels: torch.Tensor

    def __init__(self, group: GroupSpec, seed: int | None = None, block: bool = True) -> None:
        if group.action_kind != "discrete" or group.num_actions != 7 or tuple(group.observation_shape) != (6, 7, 2):
            raise ValueError(
                f"ConnectFourHeuristicPolicy needs connect_four_v3 (observations (6, 7, 2), 7 discrete actions); "
                f"group {group.name!r} has observations {group.observation_shape} and {group.action_kind} "
                f"actions ({group.num_actions or group.action_shape})"
            )
        super().__init__(group)
        self.block = block
        self._generator = None if seed is None else torch.Generator().manual_seed(seed)
        # 4x4 kernels that sum a horizontal, vertical and both diagonal lines of four.
        kernels = torch.zeros(4, 1, 4, 4)
        kernels[0, 0, 0, :] = 1
        kernels[1, 0, :, 0] = 1
        kernels[2, 0] = torch.eye(4)
        kernels[3, 0] = torch.eye(4).flip(-1)
        self.register_buffer("kernels", kernels, persistent=False)

    def _wins(self, pieces: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
        """``[B, 7]``: dropping a piece of ``pieces``' owner in each column completes four in a row."""
        batch = pieces.shape[0]
        # Landing row of each column: the lowest empty cell (-1 when the column is full).
        rows = torch.arange(6, device=pieces.device).view(1, 6, 1)
        landing = torch.where(empty, rows, -1).amax(1)  # [B, 7]
        boards = pieces.unsqueeze(1).repeat(1, 7, 1, 1)  # [B, column played, 6, 7]
        column = torch.arange(7, device=pieces.device)
        placed = torch.zeros_like(boards)
        rows_idx = landing.clamp(min=0)
        placed[torch.arange(batch).unsqueeze(1), column, rows_idx, column] = 1.0
        boards = boards + placed * (landing >= 0).unsqueeze(-1).unsqueeze(-1)
        lines = torch.nn.functional.conv2d(
            torch.nn.functional.pad(boards.reshape(-1, 1, 6, 7), (3, 3, 3, 3)), self.kernels.to(boards.dtype)
        )
        return (lines >= 4).flatten(1).any(-1).view(batch, 7) & (landing >= 0)

    def act(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor:
        batch = observation.shape[:-3]
        board = observation.reshape(-1, 6, 7, 2).float()
        own, theirs = board[..., 0], board[..., 1]
        empty = (own + theirs) == 0
        legal = empty[:, 0, :] if action_mask is None else action_mask.reshape(-1, 7).bool()
        score = torch.zeros(board.shape[0], 7, device=board.device)
        if self.block:
            score += self._wins(theirs, empty).float()
        score += 2 * self._wins(own, empty).float()
        score = torch.where(legal, score, -1.0)
        # Uniform among the legal columns with the best score (any column where none is legal: an absent row).
        best = (score == score.amax(-1, keepdim=True)) & (legal | ~legal.any(-1, keepdim=True))
        choice = torch.multinomial(best.float().cpu(), 1, generator=self._generator).view(batch)
        return choice.to(observation.device)
