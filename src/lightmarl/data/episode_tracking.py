"""Episodes in progress per env copy, for :class:`~lightmarl.data.rollout_buffer.MultiAgentRolloutBuffer`.

One :class:`EpisodeTracker` follows ``num_envs`` env copies step by step: which episode each
plays, its clock (env steps since its first valid row), the running return and length per
agent, the binding of each agent, and when the episode completes. It sees only the small
per-step tensors (ids, validity, reward, done), never the rows' payload, so it costs the same
whether the rows are copied into a store or kept where they are.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from lightmarl import keys


class EpisodeTracker:
    """Per-env state of the episodes in progress, and the table of those that completed.

    An env's episode completes at the step where every agent that took part in it has had a
    ``done`` row; it also completes when the env starts a new ``episode_id`` first.

    Args:
        num_envs: env copies followed.
        n_agents: agents per env copy (one group).
        device: where the per-env state lives (that of the steps).
    """

    def __init__(self, num_envs: int, n_agents: int, device: torch.device) -> None:
        shape = (num_envs, n_agents)
        self.num_envs = num_envs
        self.open = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self.episode = torch.full((num_envs,), -1, dtype=torch.long, device=device)
        self.last_closed = torch.full((num_envs,), -1, dtype=torch.long, device=device)
        self.closed_any = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self.clock = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.seen = torch.zeros(shape, dtype=torch.bool, device=device)
        self.done = torch.zeros(shape, dtype=torch.bool, device=device)
        self.ret = torch.zeros(shape, dtype=torch.float64, device=device)
        self.length = torch.zeros(shape, dtype=torch.long, device=device)
        self.binding = torch.full(shape, -1, dtype=torch.long, device=device)

    #: the per-env state, saved for a resumed run.
    _STATE = ("open", "episode", "last_closed", "closed_any", "clock", "seen", "done", "ret", "length", "binding")

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name).clone() for name in self._STATE}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name in self._STATE:
            current = getattr(self, name)
            setattr(self, name, state[name].to(current.device).clone())

    def step(
        self,
        episode_id: torch.Tensor,
        valid: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        binding: torch.Tensor,
        env_index: torch.Tensor,
    ) -> tuple[torch.Tensor, list[TensorDict]]:
        """Follow one env step.

        Args:
            episode_id: ``[num_envs]`` each env's episode at this step.
            valid: ``[num_envs, n_agents]`` bool, the agent acted.
            reward: ``[num_envs, n_agents]``.
            done: ``[num_envs, n_agents]`` bool.
            binding: ``[num_envs, n_agents]`` binding ids.
            env_index: ``[num_envs]`` the envs' indices, for the completed episodes' table.

        Returns:
            ``(time_index, completed)``: ``[num_envs]`` the step's time within its episode (a
            new tensor), and the episodes this step completed (tables as :func:`episode_record`).

        Raises:
            ValueError: when an env sends a completed episode's id again.
        """
        completed: list[TensorDict] = []
        active = valid.any(1)
        starts = active & (~self.open | (episode_id != self.episode))
        if bool(starts.any()):
            reused = starts & self.closed_any & (episode_id == self.last_closed)
            if bool(reused.any()):
                env = int(reused.nonzero()[0, 0])
                raise ValueError(
                    f"add_batch: env {env} sent episode_id {int(episode_id[env])} again after that episode "
                    "completed; every episode needs a new id"
                )
            interrupted = starts & self.open
            if bool(interrupted.any()):
                completed.append(self._close(interrupted.nonzero().squeeze(1), env_index))
            self._start(starts, episode_id)
        time_index = self.clock.clone()
        self.seen |= valid
        self.done |= valid & done
        self.ret += torch.where(valid, reward.double(), 0.0)
        self.length += valid.long()
        first = valid & (self.binding < 0)
        self.binding = torch.where(first, binding.long(), self.binding)
        # Env steps in which every agent waits still advance the episode's clock.
        self.clock += self.open.long()
        finished = active & ~(self.seen & ~self.done).any(1)
        if bool(finished.any()):
            completed.append(self._close(finished.nonzero().squeeze(1), env_index))
        return time_index, completed

    def _start(self, starts: torch.Tensor, episode: torch.Tensor) -> None:
        self.episode = torch.where(starts, episode, self.episode)
        self.open |= starts
        self.clock[starts] = 0
        self.seen[starts] = False
        self.done[starts] = False
        self.ret[starts] = 0.0
        self.length[starts] = 0
        self.binding[starts] = -1

    def _close(self, envs: torch.Tensor, env_index: torch.Tensor) -> TensorDict:
        record = episode_record(
            episode_id=self.episode[envs].cpu(),
            env_index=env_index[envs].long().cpu(),
            returns=self.ret[envs].cpu(),
            lengths=self.length[envs].cpu(),
            bindings=self.binding[envs].cpu(),
            present=self.seen[envs].cpu(),
        )
        self.last_closed[envs] = self.episode[envs]
        self.closed_any[envs] = True
        self.open[envs] = False
        return record


def episode_record(
    *,
    episode_id: torch.Tensor,
    env_index: torch.Tensor,
    returns: torch.Tensor,
    lengths: torch.Tensor,
    bindings: torch.Tensor,
    present: torch.Tensor,
) -> TensorDict:
    """Completed episodes as a table with batch ``[episodes]`` (per-agent entries ``[episodes, n_agents]``)."""
    return TensorDict(
        {
            keys.EPISODE_ID: episode_id,
            keys.ENV_INDEX: env_index,
            "episode_return": returns.double(),
            "episode_length": lengths.long(),
            keys.BINDING_ID: bindings.long(),
            "present": present.bool(),
        },
        batch_size=[episode_id.numel()],
    )
