"""Episodes in progress per env copy, for `MultiAgentRolloutBuffer`,
and the per-binding summary of completed episodes that the collector and the buffer both report.

One `EpisodeTracker` follows ``num_envs`` env copies step by step: which episode each
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
            new tensor), and the episodes this step completed (tables as `episode_record`).

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

    def steps_all_valid(
        self,
        episode_id: torch.Tensor,
        reward: torch.Tensor,
        done: torch.Tensor,
        binding: torch.Tensor,
        env_index: torch.Tensor,
    ) -> tuple[torch.Tensor, TensorDict | None] | None:
        """Follow ``T`` env steps at once where every agent acted in every step; what `step` gives, step by step.

        The rollout path of a store: one pass of ``[num_envs, T]`` tensor operations on the
        steps' device instead of ``T`` passes (and no copy of the steps to the host). With every
        agent acting, an episode is a run of steps with one id: it starts where the id changes
        (or where the env's last episode completed), completes at the step by which each agent
        has had a ``done`` row, and is cut short where the id changes first.

        Args:
            episode_id: ``[num_envs, T]``.
            reward: ``[num_envs, T, n_agents]``.
            done: ``[num_envs, T, n_agents]`` bool.
            binding: ``[num_envs, T, n_agents]``.
            env_index: ``[num_envs, T]``.

        Returns:
            ``(time_index [num_envs, T], the completed episodes as one table in the order
            `step` closes them, or None)``; ``None`` (nothing changed) where an id comes
            back after its episode completed: `step` raises the error for it.
        """
        E, T = episode_id.shape
        here = episode_id.device
        state = {name: getattr(self, name).to(here) for name in self._STATE}
        steps = torch.arange(T, device=here)
        new = torch.empty(E, T, dtype=torch.bool, device=here)  # an episode starts at this step
        new[:, 0] = ~state["open"] | (episode_id[:, 0] != state["episode"])
        new[:, 1:] = episode_id[:, 1:] != episode_id[:, :-1]
        last = torch.ones(E, T, dtype=torch.bool, device=here)  # the last step of a run of one id
        last[:, :-1] = new[:, 1:]
        start = torch.where(new, steps, 0).cummax(1).values  # the step the episode began at (0: before)
        carried = (start == 0) & ~new[:, :1]  # the steps of the episode in progress before these steps
        time_index = steps - start + torch.where(carried, state["clock"].unsqueeze(1), 0)
        # Per agent: done rows since the episode's start, from running sums over the steps.
        done_sum = done.long().cumsum(1)
        before = (start - 1).clamp(min=0).unsqueeze(-1).expand_as(done_sum)
        began = (start > 0).unsqueeze(-1)
        done_so_far = (done_sum - torch.where(began, done_sum.gather(1, before), 0)) > 0
        done_so_far |= carried.unsqueeze(-1) & state["done"].unsqueeze(1)
        reward_sum = reward.double().cumsum(1)

        def episode_at(env: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """``(return, length, binding)`` per agent of the episodes in progress at ``(env, step)``
            pairs, through that step: read only where episodes close and at the last step."""
            first, held = start[env, step], carried[env, step].unsqueeze(-1)
            ret = reward_sum[env, step] - torch.where(
                first.unsqueeze(-1) > 0, reward_sum[env, (first - 1).clamp(min=0)], 0.0
            )
            ret = ret + torch.where(held, state["ret"][env], 0.0)
            length = (step - first + 1).unsqueeze(-1) + torch.where(held, state["length"][env], 0)
            # An agent's binding is the one it first acted with in the episode (the carried one, if any).
            bound = torch.where(held & (state["binding"][env] >= 0), state["binding"][env], binding[env, first].long())
            return ret, length.expand(-1, ret.shape[-1]).clone(), bound

        finished = done_so_far.all(-1)
        # An id that comes back after its episode completed: within a run, or the first run after the last one.
        reused = (finished & ~last).any() | (
            new[:, 0] & state["closed_any"] & (episode_id[:, 0] == state["last_closed"])
        ).any()
        if bool(reused):  # the one host synchronisation
            return None
        # Closes: an episode cut short where a new id starts (kind 0), one that completed (kind 1).
        cut = new.clone()
        cut[:, 0] &= state["open"]
        cut[:, 1:] &= ~finished[:, :-1]
        # ``step`` closes, at each step, the cut episodes then the completed ones, each in env order.
        order = (steps * 2).unsqueeze(0) * E + torch.arange(E, device=here).unsqueeze(1)
        c_env, c_step = cut.nonzero(as_tuple=True)
        f_env, f_step = finished.nonzero(as_tuple=True)
        prev = (c_step - 1).clamp(min=0)
        at_zero = (c_step == 0).unsqueeze(-1)
        cut_ret, cut_length, cut_bound = episode_at(c_env, prev)
        end_ret, end_length, end_bound = episode_at(f_env, f_step)
        table = episode_record(
            episode_id=torch.cat([torch.where(c_step == 0, state["episode"][c_env], episode_id[c_env, prev]),
                                  episode_id[f_env, f_step]]),
            env_index=torch.cat([env_index[c_env, c_step], env_index[f_env, f_step]]).long(),
            returns=torch.cat([torch.where(at_zero, state["ret"][c_env], cut_ret), end_ret]),
            lengths=torch.cat([torch.where(at_zero, state["length"][c_env], cut_length), end_length]),
            bindings=torch.cat([torch.where(at_zero, state["binding"][c_env], cut_bound), end_bound]),
            present=torch.cat([torch.where(at_zero, state["seen"][c_env], True), torch.ones_like(end_bound,
                              dtype=torch.bool)]),
        )  # fmt: skip
        rank = torch.cat([order[c_env, c_step], order[f_env, f_step] + E])
        completed = table[rank.argsort()].to(torch.device("cpu")) if len(rank) else None
        # The state after the last step: the last run's episode, open unless it completed there.
        done_at_end = finished[:, -1]
        envs = torch.arange(E, device=here)
        ret, length, bound = episode_at(envs, torch.full_like(envs, T - 1))
        previous = torch.where(start[:, -1] > 0, episode_id.gather(1, (start[:, -1:] - 1).clamp(min=0)).squeeze(1),
                               torch.where(new[:, 0] & state["open"], state["episode"], state["last_closed"]))  # fmt: skip
        state.update(
            open=~done_at_end,
            episode=episode_id[:, -1].clone(),
            clock=time_index[:, -1] + 1,
            seen=torch.ones_like(state["seen"]),
            done=done_so_far[:, -1],
            ret=ret,
            length=length,
            binding=bound,
            last_closed=torch.where(done_at_end, episode_id[:, -1], previous),
            closed_any=state["closed_any"] | finished.any(1) | cut.any(1),
        )
        for name, value in state.items():
            setattr(self, name, value.to(getattr(self, name).device))
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


def binding_episodes(
    returns: torch.Tensor, lengths: torch.Tensor, bindings: torch.Tensor, took_part: torch.Tensor | None = None
) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """One sample per (episode, binding) of completed episodes: the mean return of the binding's agents
    in that episode and the longest of their lengths.

    Args:
        returns: ``[episodes, n_agents]`` each agent's return.
        lengths: ``[episodes, n_agents]`` each agent's steps acted.
        bindings: ``[episodes, n_agents]`` the binding id each agent counts for.
        took_part: ``[episodes, n_agents]`` agents to count; ``None``: every agent (a reward can
            reach an agent that never acted, e.g. the loser of a turn-based game that ended first).

    Returns:
        binding id -> ``(mean returns, lengths)``, one entry per episode the binding played.
    """
    counted = bindings if took_part is None else bindings[took_part]
    samples: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for binding in counted.unique().tolist():
        mine = bindings == binding
        if took_part is not None:
            mine &= took_part
        played = mine.any(-1)
        # masked_fill, not a product: another binding's NaN return must not reach this one (0 x NaN).
        mean_return = returns.masked_fill(~mine, 0).sum(-1)[played] / mine.sum(-1)[played]
        length = lengths.masked_fill(~mine, 0).max(-1).values[played]
        samples[binding] = (mean_return, length)
    return samples
