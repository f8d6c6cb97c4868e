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
