"""Scripted policies for mpe2 ``simple_spread``: partners, opponents and distillation teachers.

They read ``simple_spread``'s observation layout, so they live with the example, not in
lightmarl: a recipe names them by class path (``lightmarl_examples.simple_spread.SpreadToLandmarkPolicy``).
"""

from __future__ import annotations

import itertools

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
        velocity = observation[..., 0:2]
        landmarks = observation[..., 4 : 4 + 2 * self.num_landmarks].unflatten(-1, (self.num_landmarks, 2))
        target = self.target_landmark(observation, agent_id).expand(batch)
        offset = torch.gather(landmarks, -2, target[..., None, None].expand(*batch, 1, 2)).squeeze(-2)
        # Where the agent is heading, relative to its landmark, without / with each move.
        miss = offset - self.coast * velocity
        miss_after = miss[..., None, :] - self.push * self.moves.to(observation.dtype)
        progress = miss.norm(dim=-1, keepdim=True) - miss_after.norm(dim=-1)
        return self.sharpness * progress

    def target_landmark(self, observation: torch.Tensor, agent_id: torch.Tensor | None) -> torch.Tensor:
        """The index of the landmark each row heads for: ``agent_id % N`` (agent 0 outside an env)."""
        if agent_id is None:
            return torch.zeros(observation.shape[:-1], dtype=torch.int64, device=observation.device)
        return agent_id % self.num_landmarks


class SpreadByAssignmentPolicy(SpreadToLandmarkPolicy):
    """mpe2 ``simple_spread``: every agent solves the same agent-landmark assignment and takes its part.

    A ``simple_spread`` observation holds the positions of all landmarks and of all other agents
    relative to the observer, so every agent can rebuild the whole map (up to a translation) and
    compute the assignment of agents to landmarks with the least total distance, by trying every
    permutation (``N!`` of them). All agents find the same assignment; each heads for the
    landmark assigned to itself, moving as :class:`SpreadToLandmarkPolicy` does (progress of its
    look-ahead point, ``sharpness`` times that as logits).

    Unlike :class:`SpreadToLandmarkPolicy` the behaviour is one function of the observation for
    every agent: the agent's id is not read. That is what makes it a teacher for a student that
    plays *other* agents than the ones it sees the teacher play (``recipes/scripted_teacher.yaml``):
    what the teacher does on agents 0-1 is what agents 2-3 should do in the same situation. It also
    scores better: nobody travels to a far landmark while a nearer one waits.

    The assignment uses positions only (an agent does not observe the others' velocities, and a
    term that only the observer sees would break the agreement). Assignments whose costs tie to
    within float rounding (each agent sums distances from its own origin), which random starting
    positions make vanishingly rare, may be resolved differently by different agents.

    Args:
        group: the agent group this policy acts for (``simple_spread`` with discrete actions and
            full observability: ``N`` agents, ``N`` landmarks, observations of size ``6N``).
        num_landmarks: ``N``; ``None`` reads it from the observation size.
        sharpness: inverse temperature of the logits; higher is closer to greedy.
        coast: look-ahead: distance credited per unit of current velocity (as in
            :class:`SpreadToLandmarkPolicy`).
        push: distance credited to one move.

    Examples:
        >>> from lightmarl.envs import PettingZooEnvConfig
        >>> env = PettingZooEnvConfig(env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 3})
        >>> policy = SpreadByAssignmentPolicy(env.spec().groups["agent"])
        >>> policy.action_logits(torch.zeros(2, 18)).shape
        torch.Size([2, 5])
    """

    #: largest ``N`` accepted: the assignment tries all ``N!`` permutations (5,040 at 7).
    MAX_AGENTS = 7

    permutations: torch.Tensor

    def __init__(
        self,
        group: GroupSpec,
        num_landmarks: int | None = None,
        sharpness: float = 20.0,
        coast: float = 0.2,
        push: float = 0.2,
    ) -> None:
        super().__init__(group, num_landmarks=num_landmarks, sharpness=sharpness, coast=coast, push=push)
        obs_dim = group.observation_shape[0]
        if obs_dim != 6 * self.num_landmarks:
            raise ValueError(
                f"SpreadByAssignmentPolicy needs simple_spread's full observations, 6N = {6 * self.num_landmarks} "
                f"values for N = {self.num_landmarks} (every landmark and every other agent); group "
                f"{group.name!r} has {obs_dim}"
            )
        if self.num_landmarks > self.MAX_AGENTS:
            raise ValueError(
                f"policy_kwargs.num_landmarks: SpreadByAssignmentPolicy tries all N! assignments and accepts "
                f"N <= {self.MAX_AGENTS}, got {self.num_landmarks}"
            )
        order = list(itertools.permutations(range(self.num_landmarks)))
        self.register_buffer("permutations", torch.tensor(order, dtype=torch.int64), persistent=False)

    def target_landmark(self, observation: torch.Tensor, agent_id: torch.Tensor | None) -> torch.Tensor:
        """The landmark the least-total-distance assignment gives the observer (row 0 of the agents)."""
        n = self.num_landmarks
        landmarks = observation[..., 4 : 4 + 2 * n].unflatten(-1, (n, 2))
        others = observation[..., 4 + 2 * n : 4 + 4 * n - 2].unflatten(-1, (n - 1, 2))
        observer = others.new_zeros(*others.shape[:-2], 1, 2)
        agents = torch.cat([observer, others], dim=-2)  # the observer first
        distance = torch.cdist(agents, landmarks)  # [*batch, agent, landmark]
        # cost[..., k] = sum over agents a of distance[a, permutation_k[a]]
        taken = distance[..., torch.arange(n, device=observation.device), self.permutations]  # [*batch, N!, N]
        best = taken.sum(-1).argmin(-1)
        return self.permutations[best, 0]
