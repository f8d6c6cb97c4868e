"""Rollouts of the whole population into annotated experience TensorDicts."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import cast

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.data import schema
from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer
from lightmarl.envs.pettingzoo import VecEnv
from lightmarl.envs.workers import ROOT
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.recurrent import IS_INIT, NEXT_RECURRENT_STATE, RECURRENT_STATE, RecurrentStates


@dataclass
class EpisodeStats:
    """Running episode statistics of one binding (means over the last ``window`` episodes)."""

    returns: deque
    lengths: deque
    finished: int = 0

    @property
    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")

    @property
    def mean_length(self) -> float:
        return sum(self.lengths) / len(self.lengths) if self.lengths else float("nan")


class RolloutCollector:
    """Steps a vectorized env (:class:`VecEnv`) with a :class:`MultiAgentPolicy` for ``rollout_steps`` steps.

    Each call to :meth:`collect` returns experience with root batch ``[num_envs, rollout_steps]``
    and, per group, rows ``[num_envs, rollout_steps, agents_in_group]`` carrying the
    observation, action, log-prob, validity and the annotations of
    :mod:`lightmarl.data.schema`; ``("next", group, ...)`` holds reward, done, terminated,
    truncated and the next observation, as TorchRL's value estimators expect. Where the env
    records its global state (``PettingZooEnvConfig.state``) it is at the root, ``"state"``
    ``[num_envs, rollout_steps, *state_shape]`` and ``("next", "state")``. Episodes
    continue across calls (envs are never reset between rollouts).

    Args:
        env: the vectorized env.
        policy: the population's policy.
        rollout_steps: env steps per env copy in one rollout.
        exploration: ``RANDOM`` samples actions (training); ``DETERMINISTIC`` takes the mode.
        stats_window: episodes per binding kept for the running means.
        device: where the policy runs; experience is returned there.
        buffers: group name -> a :class:`MultiAgentRolloutBuffer` that every rollout of that
            group is also written into (each row traceable to its env, agent, episode and binding).
    """

    def __init__(
        self,
        env: VecEnv,
        policy: MultiAgentPolicy,
        rollout_steps: int,
        exploration: ExplorationType = ExplorationType.RANDOM,
        stats_window: int = 100,
        device: torch.device | str = "cpu",
        buffers: dict[str, MultiAgentRolloutBuffer] | None = None,
    ) -> None:
        if rollout_steps < 1:
            raise ValueError(f"rollout_steps: expected a positive integer, got {rollout_steps!r}")
        self.env = env
        self.policy = policy
        self.table = policy.table
        self.rollout_steps = rollout_steps
        self.exploration = exploration
        self.device = torch.device(device)
        self.num_envs = env.num_envs
        self.table.check_num_envs(self.num_envs)  # per-env map indices, before the first env step
        self.stats = {b: EpisodeStats(deque(maxlen=stats_window), deque(maxlen=stats_window)) for b in self.table.ids}
        self._groups = list(env.spec.groups.values())
        self._episode_id = torch.arange(self.num_envs, dtype=torch.int64)
        self._next_episode_id = self.num_envs
        self._episode_return = {g.name: torch.zeros(self.num_envs, g.num_agents) for g in self._groups}
        self._episode_steps = {
            g.name: torch.zeros(self.num_envs, g.num_agents, dtype=torch.int64) for g in self._groups
        }
        self._started = False
        self.frames = 0  # env steps of every copy, summed
        # Recurrent bindings' state per (env, agent), stored with each row for sequence training.
        self.buffers = dict(buffers or {})
        unknown = set(self.buffers) - {g.name for g in self._groups}
        if unknown:
            raise ValueError(
                f"buffers: no agent group named {sorted(unknown)}; groups are {[g.name for g in self._groups]}"
            )
        self._table_version = self.table.version
        self.recurrent = RecurrentStates(
            dict(policy.policies.items()),
            self.table.group_of_binding,
            self.num_envs,
            {g.name: g.num_agents for g in self._groups},
        )

    @torch.no_grad()
    def collect(self) -> TensorDict:
        if not self._started:
            self.env.reset()
            self._started = True
        if self.table.version != self._table_version:
            # Another binding controls some agents now: its memory starts from scratch.
            self.recurrent.restart_all()
            self._table_version = self.table.version
        steps: list[TensorDict] = []
        nexts: list[dict] = []
        next_states: list[dict[str, torch.Tensor]] = []
        episode_ids: list[torch.Tensor] = []
        with set_exploration_type(self.exploration):
            for _ in range(self.rollout_steps):
                td = self.env.observation_td()
                self.recurrent.prepare(td)
                td = td.to(self.device)
                self.policy(td)
                actions = {g.name: td.get((g.name, schema.ACTION)).cpu() for g in self._groups}
                nxt, ended = self.env.step(actions)
                if self.recurrent:
                    self.recurrent.advance(td, ended)
                    # The state after the step goes with the next observation (a recurrent critic's input).
                    next_states.append({g: td.get((g, NEXT_RECURRENT_STATE)) for g in self.recurrent.states})
                    td = td.exclude(*[(g, NEXT_RECURRENT_STATE) for g in self.recurrent.states])
                steps.append(td)
                nexts.append(nxt)
                episode_ids.append(self._episode_id.clone())
                self._track_episodes(td, nxt, ended)
        self.frames += self.num_envs * self.rollout_steps
        experience = self._assemble(steps, nexts, torch.stack(episode_ids, dim=1), next_states)
        for group, buffer in self.buffers.items():
            rows = experience.get(group).clone(recurse=False)
            rows.set("next", experience.get(("next", group)))
            buffer.add_rollout(rows)
        return experience

    def _track_episodes(self, td: TensorDict, nxt: dict, ended: torch.Tensor) -> None:
        for g in self._groups:
            valid = td.get((g.name, schema.VALID)).cpu()
            # Every reward counts, also one on a step the agent did not act (turn-based envs: the
            # loser's -1 arrives on the winner's turn); parallel envs reward present agents only.
            self._episode_return[g.name] += nxt[g.name]["reward"]
            self._episode_steps[g.name] += valid.long()
        if not ended.any():
            return
        env_ids = torch.nonzero(ended).flatten()
        for g in self._groups:
            returns = self._episode_return[g.name][env_ids]
            lengths = self._episode_steps[g.name][env_ids]
            binding_of = self.table.bindings_of_envs(g.name, self.num_envs)[env_ids]  # [ended envs, agents]
            for binding in binding_of.unique().tolist():
                mine = binding_of == binding
                played = mine.any(-1)
                # One sample per (episode, binding): the mean return of the binding's agents in that episode.
                mean_return = (returns * mine).sum(-1)[played] / mine.sum(-1)[played]
                length = lengths.masked_fill(~mine, 0).max(-1).values[played]
                stats = self.stats[self.table.ids[binding]]
                stats.returns.extend(mean_return.tolist())
                stats.lengths.extend(length.tolist())
                stats.finished += int(played.sum())
            self._episode_return[g.name][env_ids] = 0
            self._episode_steps[g.name][env_ids] = 0
        new_ids = torch.arange(self._next_episode_id, self._next_episode_id + len(env_ids))
        self._episode_id[env_ids] = new_ids
        self._next_episode_id += len(env_ids)

    def _assemble(
        self,
        steps: list[TensorDict],
        nexts: list[dict],
        episode_ids: torch.Tensor,
        next_states: list[dict[str, torch.Tensor]],
    ) -> TensorDict:
        experience = cast(TensorDictBase, torch.stack(steps, dim=1))  # [E, T] root, [E, T, A] groups
        E, T = self.num_envs, self.rollout_steps
        next_groups = {}
        for g in self._groups:
            name = g.name
            A = g.num_agents
            stacked = {k: torch.stack([n[name][k] for n in nexts], dim=1) for k in nexts[0][name]}
            next_groups[name] = TensorDict(
                {
                    schema.OBSERVATION: stacked["observation"],
                    schema.REWARD: stacked["reward"].unsqueeze(-1),
                    schema.DONE: stacked["done"].unsqueeze(-1),
                    schema.TERMINATED: stacked["terminated"].unsqueeze(-1),
                    schema.TRUNCATED: stacked["truncated"].unsqueeze(-1),
                    **({schema.ACTION_MASK: stacked["action_mask"]} if "action_mask" in stacked else {}),
                },
                batch_size=[E, T, A],
            )
            if next_states and name in next_states[0]:
                next_groups[name].set(RECURRENT_STATE, torch.stack([s[name] for s in next_states], dim=1).cpu())
                # The next observation continues the step's episode: never a reset.
                next_groups[name].set(IS_INIT, torch.zeros(E, T, A, dtype=torch.bool))
            # Annotations follow the map each env copy plays (per-env overrides included).
            binding = self.table.bindings_of_envs(name, E).unsqueeze(1).expand(E, T, A)
            rows = experience.get(name)
            rows.set(schema.BINDING_ID, binding)
            rows.set(schema.LOSS_PROFILE_ID, self.table.profile_of_binding[binding])
            rows.set(schema.IS_TRAINABLE_AGENT, self.table.trainable[binding])
            rows.set(schema.EPISODE_ID, episode_ids.unsqueeze(-1).expand(E, T, A))
            rows.set(schema.ENV_INDEX, torch.arange(E).view(E, 1, 1).expand(E, T, A))
        if ROOT in nexts[0]:  # the env's global state after each step (the final one where an episode ended)
            next_groups[schema.STATE] = torch.stack([n[ROOT]["state"] for n in nexts], dim=1)
        experience.set("next", TensorDict(next_groups, batch_size=[E, T]).to(self.device))
        return experience

    def episode_summary(self) -> dict[str, dict[str, float]]:
        """binding -> ``{"episode_return", "episode_length", "episodes"}`` over the recent window."""
        return {
            b: {"episode_return": s.mean_return, "episode_length": s.mean_length, "episodes": float(s.finished)}
            for b, s in self.stats.items()
            if s.returns
        }

    def close(self) -> None:
        self.env.close()
