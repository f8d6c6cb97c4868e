"""Multi-agent rollout storage: one row per agent step, traceable to its env, episode and agent.

The buffer holds rows in one of two ways: **kept rollouts** (`MultiAgentRolloutBuffer.add_rollout`:
the collector's ``[envs, time]`` rollout TensorDicts themselves, by reference, the very rows
the trainers read) or **copied rows** (the single-env API of `add_transition` and
`add_batch`: a flat, preallocated store with batch
``[capacity]``). Every row carries the annotations of `lightmarl.keys` plus
`TIME_INDEX`, the env step within its episode, so any
``(episode_id, agent_id)`` trajectory can be rebuilt in time order and the rows can be
re-batched as padded episodes or fixed-length sequences for learning.

The kept rollouts live in `lightmarl.data.kept_rollouts`
(`KeptRollouts`, this class's base); this module adds the
copied rows and the learning views, which share the base's episode table and invariants (fixed
agent columns, unique episode ids, the time index). The per-env episode bookkeeping lives in
`lightmarl.data.episode_tracking`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict
from tensordict.utils import NestedKey

from lightmarl import keys
from lightmarl.data.episode_tracking import episode_record
from lightmarl.data.kept_rollouts import (
    ANNOTATION_DEFAULTS,
    DEFAULT_MAX_ROWS,
    KeptRollouts,
    RolloutBufferFullError,
    find_entry,
    group_rows,
    rollout_annotation,
)

__all__ = ["CURRENT_EPISODE_FIELDS", "MultiAgentRolloutBuffer", "RolloutBufferFullError"]

# The single-env API's ``current_episode`` field names (those of the rollout-buffer design) -> the
# TensorDict keys the rows are stored under.
CURRENT_EPISODE_FIELDS: dict[str, NestedKey] = {
    "states": keys.OBSERVATION,
    "state_values": keys.STATE_VALUE,
    "actions": keys.ACTION,
    "log_probs": keys.ACTION_LOG_PROB,
    "rewards": keys.REWARD,
    "next_states": (keys.NEXT, keys.OBSERVATION),
    "next_state_values": (keys.NEXT, keys.STATE_VALUE),
    "dones": keys.DONE,
}

_DEFAULT_CAPACITY = 4096


class MultiAgentRolloutBuffer(KeptRollouts):
    """Rollouts of a multi-agent env over many episodes, stored row-wise in preallocated tensors.

    One buffer holds one agent group of ``n_agents`` agents. It offers two ways in:

    * the single-env API: `add_transition` appends one step of all
      agents to `current_episode`, `end_episode` closes it (per-agent and average
      length and reward) and moves it to the row store, `reset_current_episode` drops it;
    * the vectorized API: `add_batch` takes one step of ``num_envs`` envs as a
      TensorDict with batch ``[num_envs, n_agents]``; episodes end per env when every agent
      that took part has signalled ``done`` (or when the env starts a new ``episode_id``).
    * kept rollouts: `add_rollout` keeps a ``[num_envs, time]`` rollout by reference (no
      copy) and follows its episodes as `add_batch` does; `rollouts` hands the
      rollouts back as they were added and `locate` finds one row in them (the
      collector's training path).

    and several ways out: `trajectory` (one agent of one episode, in time order),
    `rows` (flat ``[N]``), `as_tensordict` (padded ``[episodes, time, agents]``
    with a ``mask``), `sequences` (``[chunks, burn_in + length]`` for recurrent
    training), `episode_stats` (per-binding episode return and length).

    Rows with ``valid=False`` (the agent was absent or had left) are not stored. Each stored
    row keeps every entry of the step it came from (observation, action, reward, done,
    optional log-prob, values, ``("next", ...)`` entries and ``("extras", ...)`` such as
    recurrent states) plus ``env_index``, ``agent_id``, ``episode_id``, ``binding_id``,
    ``loss_profile_id``, ``is_trainable_agent`` and `TIME_INDEX`.

    Storage starts at ``capacity`` rows and doubles when full, never beyond ``max_rows``.
    Past that bound `add_batch` raises `RolloutBufferFullError`, or, with
    ``overwrite=True``, drops the oldest *completed* episodes (at least ``max_rows // 16``
    rows at a time, so the compaction cost is amortized); episodes still in progress are
    never dropped.

    Args:
        n_agents: agents in the group (the last batch dim of every step).
        capacity: rows (agent steps) allocated up front.
        max_rows: memory bound: the most rows the store may ever hold.
        overwrite: when the bound is hit, drop the oldest completed episodes instead of raising.
        device: where rows are stored; incoming steps are moved there. ``None`` keeps the
            device of the first step.

    Examples:
        >>> import torch
        >>> buffer = MultiAgentRolloutBuffer(n_agents=2)
        >>> for t in range(3):
        ...     buffer.add_transition(
        ...         states=torch.zeros(2, 4), actions=torch.zeros(2, dtype=torch.long),
        ...         log_probs=torch.zeros(2), rewards=[1.0, 0.5], next_states=torch.zeros(2, 4),
        ...         dones=[t == 2, t == 2],
        ...     )
        >>> buffer.end_episode()["episode_reward"]
        [3.0, 1.5]
        >>> buffer.as_tensordict()["mask"].shape
        torch.Size([1, 3, 2])
    """

    def __init__(
        self,
        n_agents: int,
        capacity: int = _DEFAULT_CAPACITY,
        max_rows: int = DEFAULT_MAX_ROWS,
        overwrite: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity: expected a positive integer, got {capacity!r}")
        if not isinstance(max_rows, int) or max_rows < capacity:
            raise ValueError(f"max_rows: expected an integer >= capacity ({capacity}), got {max_rows!r}")
        self.initial_capacity = capacity
        self.device = torch.device(device) if device is not None else None
        super().__init__(n_agents, max_rows, overwrite)

    # ------------------------------------------------------------------ state

    def reset(self, n_agents: int | None = None) -> None:
        """Forget everything (rows, episodes, the current episode), optionally changing ``n_agents``.

        Args:
            n_agents: the new number of agents; ``None`` keeps the current one.
        """
        super().reset(n_agents)
        self._storage: TensorDict | None = None
        self._size = 0
        self._leaves: dict[NestedKey, torch.Tensor] = {}
        # The single-env API's episode in progress: preallocated [steps, n_agents], grown by doubling.
        self._cur: TensorDict | None = None
        self._cur_leaves: dict[NestedKey, torch.Tensor] = {}
        self.reset_current_episode()

    def clear(self) -> None:
        """Drop stored rows and completed-episode records but keep episodes in progress.

        Use between on-policy updates: an episode that spans the clear keeps its env step
        counter and running return, so its later rows and its statistics stay consistent.
        """
        super().clear()
        self._size = 0

    def __len__(self) -> int:
        """Number of stored rows (agent steps), copied or in kept rollouts."""
        return self._size + super().__len__()

    @property
    def capacity(self) -> int:
        """Rows currently allocated."""
        return 0 if self._storage is None else self._storage.batch_size[0]

    @property
    def row_nbytes(self) -> int:
        """Bytes one stored row occupies (all entries, annotations included)."""
        if self._storage is None:
            return 0
        return sum(x[0].nbytes for x in self._storage.values(include_nested=True, leaves_only=True))

    @property
    def nbytes(self) -> int:
        """Bytes allocated by the row store."""
        return self.row_nbytes * self.capacity

    # ---------------------------------------------------- single-env API

    def reset_current_episode(self) -> None:
        """Discard the transitions of `current_episode` (allocated storage is kept)."""
        self._cur_len = 0

    def add_transition(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        log_probs: torch.Tensor | None,
        rewards: torch.Tensor | Sequence[float] | Mapping[Any, float],
        next_states: torch.Tensor,
        dones: torch.Tensor | Sequence[bool] | Mapping[Any, bool],
        state_values: torch.Tensor | None = None,
        next_state_values: torch.Tensor | None = None,
        extras: Mapping[str, torch.Tensor] | None = None,
        *,
        valid: torch.Tensor | Sequence[bool] | None = None,
    ) -> None:
        """Append one step of every agent to `current_episode`.

        Every argument has the agents as its leading dimension (``n_agents``). Optional
        fields must be given on every step of the buffer or on none.

        Args:
            states: ``[n_agents, *obs_shape]`` observations.
            actions: ``[n_agents, *action_shape]`` actions.
            log_probs: ``[n_agents]`` log-probabilities of the actions, or ``None``.
            rewards: ``[n_agents]`` rewards (a tensor, a sequence, or a mapping
                agent index -> reward in agent order).
            next_states: ``[n_agents, *obs_shape]`` next observations.
            dones: ``[n_agents]`` done flags (same forms as ``rewards``).
            state_values: ``[n_agents, ...]`` value estimates, or ``None``.
            next_state_values: ``[n_agents, ...]`` value estimates of the next states, or ``None``.
            extras: controller-specific per-agent tensors, e.g. ``{"prev_hidden_states":
                [n_agents, hidden]}``; stored under ``("extras", name)``.
            valid: ``[n_agents]`` which agents acted at this step (default: all); steps of
                absent agents are not part of their trajectories.
        """
        n = self.n_agents
        entries: dict[NestedKey, torch.Tensor] = {
            keys.OBSERVATION: torch.as_tensor(states),
            keys.ACTION: torch.as_tensor(actions),
            keys.REWARD: _per_agent(rewards, n, torch.float32, "rewards"),
            (keys.NEXT, keys.OBSERVATION): torch.as_tensor(next_states),
            keys.DONE: _per_agent(dones, n, torch.bool, "dones"),
        }
        optional = {
            keys.ACTION_LOG_PROB: log_probs,
            keys.STATE_VALUE: state_values,
            (keys.NEXT, keys.STATE_VALUE): next_state_values,
        }
        entries.update({k: torch.as_tensor(v) for k, v in optional.items() if v is not None})
        for name, value in (extras or {}).items():
            entries[(keys.EXTRAS, name)] = torch.as_tensor(value)
        for key, value in entries.items():
            if value.shape[:1] != (n,):
                raise ValueError(
                    f"add_transition: {key!r} must have n_agents={n} as leading dim, got shape {tuple(value.shape)}"
                )
        entries[keys.VALID] = (
            torch.ones(n, dtype=torch.bool) if valid is None else _per_agent(valid, n, torch.bool, keys.VALID)
        )

        if self._cur is None:
            self._set_current(_allocate(TensorDict(entries, batch_size=[n]), 64, self.device, stack=True))
        elif entries.keys() != self._cur_leaves.keys():
            raise ValueError(
                "add_transition: the fields given changed within the episode: expected "
                f"{sorted(map(str, self._cur_leaves))}, got {sorted(map(str, entries))}"
            )
        assert self._cur is not None
        t = self._cur_len
        if t == self._cur.batch_size[0]:
            if t * n >= self.max_rows:
                raise RolloutBufferFullError(f"current episode: {t} steps x {n} agents reach max_rows={self.max_rows}")
            self._set_current(_grow(self._cur, t, 2 * t))
        for key, value in entries.items():
            self._cur_leaves[key][t] = value
        self._cur_len = t + 1

    def _set_current(self, storage: TensorDict) -> None:
        self._cur = storage
        self._cur_leaves = dict(storage.items(include_nested=True, leaves_only=True))

    @property
    def current_episode(self) -> dict[str, Any]:
        """The single-env API's dict view of the episode in progress.

        ``states``, ``state_values``, ``actions``, ``log_probs``, ``rewards``, ``next_states``,
        ``next_state_values`` and ``dones`` map to a list (one entry per agent) of tensors with
        that agent's steps along dim 0 (empty lists for fields never given); ``extras`` maps
        each extra's name to such a list; ``episode_length`` / ``episode_reward`` are per-agent
        lists and ``average_episode_length`` / ``average_episode_reward`` their means over the
        agents that acted. The tensors are views of the buffer's storage.
        """
        n, T = self.n_agents, self._cur_len
        per_agent: dict[NestedKey, list[torch.Tensor]] = {}
        if self._cur is not None and T > 0:
            valid = self._cur.get(keys.VALID)[:T]
            all_valid = bool(valid.all())
            for key in self._cur.keys(True, True):
                if key == keys.VALID:
                    continue
                value = self._cur.get(key)[:T]
                per_agent[key] = [value[:, a] if all_valid else value[:, a][valid[:, a]] for a in range(n)]
            lengths = valid.sum(0)
            rewards = torch.where(valid, self._cur.get(keys.REWARD)[:T].double(), 0.0).sum(0)
        else:
            lengths = torch.zeros(n, dtype=torch.long)
            rewards = torch.zeros(n, dtype=torch.float64)
        view: dict[str, Any] = {
            name: per_agent.get(key, [[] for _ in range(n)]) for name, key in CURRENT_EPISODE_FIELDS.items()
        }
        view["extras"] = {
            key[1]: seq for key, seq in per_agent.items() if isinstance(key, tuple) and key[0] == keys.EXTRAS
        }
        view.update(_episode_summary(lengths, rewards, lengths > 0))
        return view

    def end_episode(self) -> dict[str, Any]:
        """Close `current_episode`: compute its statistics and move its rows to the store.

        The episode gets the next free ``episode_id``, ``env_index`` 0, ``binding_id`` 0,
        ``loss_profile_id`` 0 and ``is_trainable_agent`` True.

        Returns:
            The closed episode's seed-style dict (see `episodes`).

        Raises:
            ValueError: when the current episode has no transitions.
        """
        if self._cur is None or self._cur_len == 0:
            raise ValueError("end_episode: the current episode has no transitions; call add_transition first")
        n, T = self.n_agents, self._cur_len
        staged = self._cur[:T]
        valid = staged.get(keys.VALID)
        dev = staged.device
        episode_id = self._free_episode_id()
        rows = staged.exclude(keys.VALID)
        rows.set(keys.ENV_INDEX, torch.zeros(T, n, dtype=torch.long, device=dev))
        rows.set(keys.AGENT_ID, torch.arange(n, device=dev).expand(T, n).clone())
        rows.set(keys.EPISODE_ID, torch.full((T, n), episode_id, dtype=torch.long, device=dev))
        rows.set(keys.BINDING_ID, torch.zeros(T, n, dtype=torch.long, device=dev))
        rows.set(keys.LOSS_PROFILE_ID, torch.zeros(T, n, dtype=torch.long, device=dev))
        rows.set(keys.IS_TRAINABLE_AGENT, torch.ones(T, n, dtype=torch.bool, device=dev))
        rows.set(keys.TIME_INDEX, torch.arange(T, device=dev).unsqueeze(1).expand(T, n).clone())
        self._learn_columns(rows.get(keys.AGENT_ID)[0])
        self._append_rows(dict(rows.items(True, True)), 2, valid)

        lengths = valid.sum(0)
        returns = torch.where(valid, staged.get(keys.REWARD).reshape(T, n).double(), 0.0).sum(0)
        self._records.append(
            episode_record(
                episode_id=torch.tensor([episode_id]),
                env_index=torch.zeros(1, dtype=torch.long),
                returns=returns.cpu().unsqueeze(0),
                lengths=lengths.cpu().unsqueeze(0),
                bindings=torch.zeros(1, n, dtype=torch.long),
                present=(lengths > 0).cpu().unsqueeze(0),
            )
        )
        self.reset_current_episode()
        return self._episode_dict(self.completed_episodes()[-1])

    @property
    def episodes(self) -> list[dict[str, Any]]:
        """Completed episodes still held, oldest first, each as a seed-style dict.

        Each dict has the `current_episode` fields (per-agent tensors rebuilt from the
        stored rows) plus ``episode_id`` and ``env_index``. This is a convenience view that
        scans the store per episode; at scale use `completed_episodes` and
        `as_tensordict`.
        """
        table = self.completed_episodes()
        return [self._episode_dict(table[i]) for i in range(table.batch_size[0])]

    @property
    def average_episode_length(self) -> float:
        """Mean over completed episodes of the per-episode average agent length (NaN if none)."""
        table = self.completed_episodes()
        if table.batch_size[0] == 0:
            return math.nan
        present = table["present"]
        per_episode = torch.where(present, table["episode_length"].double(), 0.0).sum(1) / present.sum(1).clamp_min(1)
        return per_episode.mean().item()

    @property
    def average_episode_reward(self) -> float:
        """Mean over completed episodes of the per-episode average agent return (NaN if none)."""
        table = self.completed_episodes()
        if table.batch_size[0] == 0:
            return math.nan
        present = table["present"]
        per_episode = torch.where(present, table["episode_return"], 0.0).sum(1) / present.sum(1).clamp_min(1)
        return per_episode.mean().item()

    # ------------------------------------------------------- vectorized API

    def add_batch(self, step: TensorDict) -> None:
        """Store one env step of ``num_envs`` envs.

        Args:
            step: batch ``[num_envs, n_agents]``. Required: ``episode_id`` (unique per env
                copy and episode), ``reward`` and ``done`` (at the root or under ``"next"``,
                shape ``[num_envs, n_agents]`` or ``[num_envs, n_agents, 1]``). Optional
                annotations default to: ``valid`` True, ``env_index`` the env's position,
                ``agent_id`` the agent's position, ``binding_id`` 0, ``loss_profile_id`` 0,
                ``is_trainable_agent`` True. Every other entry (observation, action,
                log-prob, values, ``("next", ...)``, ``("extras", ...)``) is stored as given;
                the first call fixes the set of entries.

        Raises:
            ValueError: on a wrong batch shape, a missing required entry, a changed set of
                entries, agents of one env with different episode ids, or an episode id that
                reappears in an env after that episode completed.
            RolloutBufferFullError: when the rows do not fit in ``max_rows``.
        """
        if step.batch_dims != 2 or step.batch_size[1] != self.n_agents:
            raise ValueError(
                f"add_batch: expected a step with batch [num_envs, n_agents={self.n_agents}], got {list(step.batch_size)}"
            )
        if self.device is not None and step.device != self.device:
            step = step.to(self.device)
        E, A = step.batch_size
        if keys.EPISODE_ID not in step.keys():
            raise ValueError("add_batch: the step has no 'episode_id' entry; it is required to trace trajectories")
        dev = step.get(keys.EPISODE_ID).device
        reward = find_entry(step, keys.REWARD, keys.REWARD)
        done = find_entry(step, keys.DONE, keys.DONE)
        rows: dict[NestedKey, torch.Tensor] = dict(step.items(include_nested=True, leaves_only=True))
        valid = rows.pop(keys.VALID, None)
        valid = torch.ones(E, A, dtype=torch.bool, device=dev) if valid is None else valid.reshape(E, A).bool()
        for key, make in ANNOTATION_DEFAULTS.items():
            if key not in rows:
                rows[key] = make(E, A, dev)
        episode_id = rows[keys.EPISODE_ID].reshape(E, A)
        env_episode = episode_id[:, 0]
        agent_id = rows[keys.AGENT_ID].reshape(E, A)
        self._learn_columns(agent_id[0])
        assert self._column_agent_ids is not None
        same_episode = (episode_id == env_episode.unsqueeze(1)) | ~valid
        same_agents = agent_id == self._column_agent_ids.to(dev)
        # One host sync for both checks; the slow path only runs to name the failure.
        if not bool((same_episode & same_agents).all()):
            if not bool(same_episode.all()):
                raise ValueError("add_batch: agents of one env carry different episode_id values in the same step")
            raise ValueError(
                "add_batch: agent_id per column must be the same in every env and step, "
                f"expected {self._column_agent_ids.tolist()}"
            )
        if self._rollouts:
            raise ValueError("add_batch: this buffer keeps rollouts by reference (add_rollout); use another buffer")
        env_index = rows[keys.ENV_INDEX].reshape(E, A)[:, 0]
        time_index, completed = self._tracker(E, dev).step(
            env_episode,
            valid,
            reward.reshape(E, A),
            done.reshape(E, A).bool(),
            rows[keys.BINDING_ID].reshape(E, A),
            env_index,
        )
        self._records.extend(completed)
        rows[keys.TIME_INDEX] = time_index.unsqueeze(1).expand(E, A)
        self._append_rows(rows, 2, valid)

    def trajectory(self, episode_id: int, agent_id: int) -> TensorDict:
        """All stored rows of one agent in one episode, in time order.

        Args:
            episode_id: the episode.
            agent_id: the agent (its ``agent_id`` annotation).

        Returns:
            A TensorDict with batch ``[steps]`` (a copy).

        Raises:
            KeyError: when no row of that agent in that episode is stored.
        """
        rows = self.rows()
        hit = (rows.get(keys.EPISODE_ID) == episode_id) & (rows.get(keys.AGENT_ID) == agent_id)
        index = hit.nonzero().squeeze(1)
        if index.numel() == 0:
            raise KeyError(f"trajectory: no stored rows for episode_id={episode_id}, agent_id={agent_id}")
        order = torch.sort(rows.get(keys.TIME_INDEX)[index], stable=True).indices
        return rows[index[order]]

    def rows(self, binding_id: int | None = None, complete_only: bool = False) -> TensorDict:
        """Stored rows as a flat ``[N]`` TensorDict, in insertion order.

        Args:
            binding_id: keep only rows of this binding.
            complete_only: keep only rows of completed episodes.

        Returns:
            Without filters a view of the store of copied rows (clone it to keep it past the
            next add), otherwise, and for kept rollouts (their valid rows), a copy.
        """
        if self._rollouts:
            rows = self._kept_rows()
        elif self._storage is None:
            return TensorDict({}, batch_size=[0])
        else:
            rows = self._storage[: self._size]
        index = self._select(rows, binding_id, complete_only)
        return rows if index is None else rows[index]

    def as_tensordict(self, binding_id: int | None = None, complete_only: bool = False) -> TensorDict:
        """Rows padded to ``[episodes, time, n_agents]`` plus a bool ``mask`` entry.

        Episodes are ordered by ``episode_id``, agents by their column in the steps, and time
        starts at each episode's first stored step. Padded positions are zero (``episode_id``
        and ``agent_id`` are filled in everywhere) and have ``mask`` False.

        Args:
            binding_id: keep only rows of this binding (other agents' positions are masked).
            complete_only: keep only completed episodes.
        """
        rows = self.rows(binding_id, complete_only)
        n = self.n_agents
        if rows.batch_size[0] == 0:
            return TensorDict({keys.MASK: torch.zeros(0, 0, n, dtype=torch.bool)}, batch_size=[0, 0, n])
        episodes, e_idx = torch.unique(rows.get(keys.EPISODE_ID), return_inverse=True)
        t_idx = self._relative_time(rows.get(keys.TIME_INDEX), e_idx, episodes.numel())
        a_idx = self._column_of(rows.get(keys.AGENT_ID))
        E, T = episodes.numel(), int(t_idx.max()) + 1
        out = _zeros_like_rows(rows, (E, T, n))
        out[e_idx, t_idx, a_idx] = rows
        mask = torch.zeros(E, T, n, dtype=torch.bool, device=rows.device)
        mask[e_idx, t_idx, a_idx] = True
        out.set(keys.MASK, mask)
        out.set(keys.EPISODE_ID, episodes.view(E, 1, 1).expand(E, T, n).clone())
        assert self._column_agent_ids is not None
        out.set(keys.AGENT_ID, self._column_agent_ids.to(rows.device).expand(E, T, n).clone())
        return out

    def sequences(
        self,
        length: int | None,
        burn_in: int = 0,
        binding_id: int | None = None,
        complete_only: bool = False,
    ) -> TensorDict:
        """Per-agent trajectories cut into fixed-length chunks for recurrent training.

        Chunk ``k`` of a trajectory trains on its steps ``[k*length, (k+1)*length)`` and is
        preceded by up to ``burn_in`` earlier steps (fewer at the trajectory's start). Each
        chunk is left-aligned: position 0 is always a stored row, so
        ``chunks[:, 0]["extras", name]`` is the recurrent state stored at the chunk's first
        step, to start the policy from. Shorter chunks are padded at the end with zeros.

        Args:
            length: steps trained on per chunk; ``None`` gives one chunk per whole trajectory
                (padded to the longest, ``burn_in`` ignored).
            burn_in: steps rerun before each chunk to warm up the recurrent state.
            binding_id: keep only rows of this binding.
            complete_only: keep only completed episodes.

        Returns:
            Batch ``[num_chunks, burn_in + length]`` with every row entry plus ``mask`` (stored
            row), ``loss_mask`` (stored row outside the burn-in) and ``is_init`` (the
            trajectory's first stored row). Chunks are ordered by episode, agent, time.
        """
        if length is not None and (not isinstance(length, int) or length < 1):
            raise ValueError(f"sequences: length must be a positive integer or None, got {length!r}")
        if not isinstance(burn_in, int) or burn_in < 0:
            raise ValueError(f"sequences: burn_in must be a non-negative integer, got {burn_in!r}")
        rows = self.rows(binding_id, complete_only)
        dev = rows.device
        if rows.batch_size[0] == 0:
            width = 0 if length is None else burn_in + length
            empty = torch.zeros(0, width, dtype=torch.bool)
            return TensorDict({keys.MASK: empty, keys.LOSS_MASK: empty, keys.IS_INIT: empty}, batch_size=[0, width])
        episodes, e_idx = torch.unique(rows.get(keys.EPISODE_ID), return_inverse=True)
        t_idx = self._relative_time(rows.get(keys.TIME_INDEX), e_idx, episodes.numel())
        a_idx = self._column_of(rows.get(keys.AGENT_ID))
        # Sort rows by (episode, agent, time): stable sorts from the least significant key.
        order = torch.sort(t_idx, stable=True).indices
        order = order[torch.sort(a_idx[order], stable=True).indices]
        order = order[torch.sort(e_idx[order], stable=True).indices]
        trajectory_key = (e_idx * self.n_agents + a_idx)[order]
        _, counts = torch.unique_consecutive(trajectory_key, return_counts=True)
        offsets = torch.cumsum(counts, 0) - counts
        if length is None:
            chunks_per = torch.ones_like(counts)
            width = int(counts.max())
            burn_in, span = 0, width
        else:
            chunks_per = (counts + length - 1) // length
            width, span = burn_in + length, length
        trajectory_of_chunk = torch.repeat_interleave(torch.arange(counts.numel(), device=dev), chunks_per)
        first_chunk = torch.cumsum(chunks_per, 0) - chunks_per
        k = torch.arange(trajectory_of_chunk.numel(), device=dev) - first_chunk[trajectory_of_chunk]
        train_start = k * span
        window_start = (train_start - burn_in).clamp_min(0)
        window_end = torch.minimum(train_start + span, counts[trajectory_of_chunk])
        position = window_start.unsqueeze(1) + torch.arange(width, device=dev)
        mask = position < window_end.unsqueeze(1)
        C = trajectory_of_chunk.numel()
        out = _zeros_like_rows(rows, (C, width))
        source = order[(offsets[trajectory_of_chunk].unsqueeze(1) + position)[mask]]
        out[mask] = rows[source]
        out.set(keys.MASK, mask)
        out.set(keys.LOSS_MASK, mask & (position >= train_start.unsqueeze(1)))
        out.set(keys.IS_INIT, mask & (position == 0))
        return out

    # ------------------------------------------------------------ internals

    def _holds_copied_rows(self) -> bool:
        return bool(self._size or self._cur_len)

    def _append_rows(self, leaves: dict[NestedKey, torch.Tensor], batch_dims: int, keep: torch.Tensor) -> None:
        # Per-leaf writes into the preallocated tensors: TensorDict reshape/setitem costs
        # several times more than the copies themselves at a few hundred rows per step.
        if self._rollouts:
            raise ValueError("rollout buffer: it keeps rollouts by reference (add_rollout); copy rows into another one")
        keep = keep.reshape(-1)
        index = None if bool(keep.all()) else keep.nonzero().squeeze(1)
        flat = {}
        for key, value in leaves.items():
            value = value.reshape(-1, *value.shape[batch_dims:])
            flat[key] = value if index is None else value.index_select(0, index.to(value.device))
        n = keep.numel() if index is None else index.numel()
        if n == 0:
            return
        if self._storage is None:
            if n > self.max_rows:
                raise RolloutBufferFullError(f"rollout buffer: {n} rows exceed max_rows={self.max_rows}")
            template = TensorDict(flat, batch_size=[n])
            self._set_storage(_allocate(template, max(self.initial_capacity, n), self.device))
        elif flat.keys() != self._leaves.keys():
            expected, got = set(self._leaves), set(flat)
            raise ValueError(
                "rollout buffer: the entries of a step changed; missing "
                f"{sorted(map(str, expected - got))}, unexpected {sorted(map(str, got - expected))}"
            )
        if self._size + n > self.capacity:
            self._make_room(n)
        lo, hi = self._size, self._size + n
        for key, value in flat.items():
            self._leaves[key][lo:hi] = value
        self._size = hi

    def _kept_rows(self) -> TensorDict:
        parts = []
        for rollout, group, _ in self._rollouts:
            rows = group_rows(rollout, group)
            if any(key not in rows.keys() for key in ANNOTATION_DEFAULTS):
                rows = rows.clone(recurse=False)
                for key in ANNOTATION_DEFAULTS:
                    rows.set(key, rollout_annotation(rows, key))
            flat = rows.reshape(-1)
            valid = flat.get(keys.VALID, None)
            flat = flat.exclude(keys.VALID)
            parts.append(flat if valid is None else flat[valid.bool()])
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _set_storage(self, storage: TensorDict) -> None:
        self._storage = storage
        self._leaves = dict(storage.items(include_nested=True, leaves_only=True))

    def _make_room(self, n: int) -> None:
        assert self._storage is not None
        need = self._size + n
        if need > self.max_rows:
            if not self.overwrite:
                raise RolloutBufferFullError(
                    f"rollout buffer: storing {n} more rows would hold {need} rows, above max_rows={self.max_rows}. "
                    "Raise max_rows, consume and clear() the buffer more often, or set overwrite=True to drop the "
                    "oldest completed episodes."
                )
            self._drop_oldest(need - self.max_rows, max(need - self.max_rows, self.max_rows // 16))
            need = self._size + n
        if need > self.capacity:
            self._set_storage(_grow(self._storage, self._size, min(max(2 * self.capacity, need), self.max_rows)))

    def _drop_oldest(self, required: int, wanted: int) -> None:
        assert self._storage is not None
        rows = self._storage[: self._size]
        table = self.completed_episodes()
        episode_of_row = rows.get(keys.EPISODE_ID)
        # Rows held per completed episode (oldest first), counted in one pass over the store.
        ids = table[keys.EPISODE_ID].to(episode_of_row.device)
        held = torch.zeros(ids.numel(), dtype=torch.long, device=episode_of_row.device)
        if ids.numel():
            sorted_ids, perm = torch.sort(ids)
            pos = torch.searchsorted(sorted_ids, episode_of_row).clamp_max(ids.numel() - 1)
            match = sorted_ids[pos] == episode_of_row
            held[perm] = torch.bincount(pos[match], minlength=ids.numel())
        available = int(held.sum())
        if available < required:
            raise RolloutBufferFullError(
                f"rollout buffer: max_rows={self.max_rows} reached and dropping every completed episode frees only "
                f"{available} of the {required} rows needed; the episodes in progress alone exceed the bound. "
                "Raise max_rows."
            )
        target = torch.tensor(min(wanted, available), device=held.device)
        cut = int(torch.searchsorted(torch.cumsum(held, 0), target)) + 1
        keep = ~torch.isin(episode_of_row, ids[:cut])
        kept = rows[keep]
        self._storage[: kept.batch_size[0]] = kept
        self._size = kept.batch_size[0]
        self._records = [table[cut:]]

    def _select(self, rows: TensorDict, binding_id: int | None, complete_only: bool) -> torch.Tensor | None:
        keep: torch.Tensor | None = None
        if binding_id is not None:
            keep = rows.get(keys.BINDING_ID) == binding_id
        if complete_only:
            done = torch.isin(rows.get(keys.EPISODE_ID), self.completed_episodes()[keys.EPISODE_ID].to(rows.device))
            keep = done if keep is None else keep & done
        return None if keep is None else keep.nonzero().squeeze(1)

    def _column_of(self, agent_ids: torch.Tensor) -> torch.Tensor:
        assert self._column_agent_ids is not None
        columns = self._column_agent_ids.to(agent_ids.device)
        return (agent_ids.unsqueeze(1) == columns).long().argmax(1)

    @staticmethod
    def _relative_time(time_index: torch.Tensor, e_idx: torch.Tensor, n_episodes: int) -> torch.Tensor:
        # After clear() or overwrite an episode's first stored step may be > 0; start its time axis there.
        start = torch.full((n_episodes,), torch.iinfo(torch.long).max, dtype=torch.long, device=time_index.device)
        start = start.scatter_reduce(0, e_idx, time_index, reduce="amin")
        return time_index - start[e_idx]

    def _free_episode_id(self) -> int:
        candidates = [-1]
        if self._size:
            candidates.append(int(self.rows().get(keys.EPISODE_ID).max()))
        table = self.completed_episodes()
        if table.batch_size[0]:
            candidates.append(int(table[keys.EPISODE_ID].max()))
        if self._envs is not None:
            candidates.append(int(self._envs.episode.max()))
        return max(candidates) + 1

    def _episode_dict(self, record: TensorDict) -> dict[str, Any]:
        episode_id = int(record[keys.EPISODE_ID])
        n = self.n_agents
        view: dict[str, Any] = {"episode_id": episode_id, "env_index": int(record[keys.ENV_INDEX])}
        trajectories: list[TensorDict | None] = []
        assert self._column_agent_ids is not None or self._size == 0
        for a in range(n):
            try:
                agent_id = int(self._column_agent_ids[a]) if self._column_agent_ids is not None else a
                trajectories.append(self.trajectory(episode_id, agent_id))
            except KeyError:
                trajectories.append(None)
        stored = next((list(t.keys(True, True)) for t in trajectories if t is not None), [])
        for name, key in CURRENT_EPISODE_FIELDS.items():
            view[name] = [t.get(key) if t is not None and key in stored else [] for t in trajectories]
        view["extras"] = {
            key[1]: [t.get(key) if t is not None else [] for t in trajectories]
            for key in stored
            if isinstance(key, tuple) and key[0] == keys.EXTRAS
        }
        view.update(_episode_summary(record["episode_length"], record["episode_return"], record["present"]))
        return view


def _per_agent(value: Any, n: int, dtype: torch.dtype, name: str) -> torch.Tensor:
    if isinstance(value, Mapping):
        value = [value[k] for k in sorted(value)] if len(value) == n else None
        if value is None:
            raise ValueError(f"add_transition: {name} must have one entry per agent ({n})")
    tensor = torch.as_tensor(value).to(dtype)
    if tensor.numel() != n:
        raise ValueError(f"add_transition: {name} must have one entry per agent ({n}), got shape {tuple(tensor.shape)}")
    return tensor.reshape(n)


def _allocate(template: TensorDict, rows: int, device: torch.device | None, *, stack: bool = False) -> TensorDict:
    """Empty storage for ``rows`` rows shaped like ``template``'s rows (``stack``: like ``template`` itself)."""
    tail = 0 if stack else 1
    batch = [rows, *template.batch_size[tail:]]
    return template.apply(
        lambda x: torch.empty(
            (rows, *x.shape[tail:]), dtype=x.dtype, device=device if device is not None else x.device
        ),
        batch_size=batch,
    )


def _grow(storage: TensorDict, used: int, rows: int) -> TensorDict:
    grown = storage.apply(
        lambda x: torch.empty((rows, *x.shape[1:]), dtype=x.dtype, device=x.device),
        batch_size=[rows, *storage.batch_size[1:]],
    )
    grown[:used] = storage[:used]
    return grown


def _zeros_like_rows(rows: TensorDict, batch: tuple[int, ...]) -> TensorDict:
    return rows.apply(lambda x: x.new_zeros((*batch, *x.shape[1:])), batch_size=list(batch))


def _episode_summary(lengths: torch.Tensor, returns: torch.Tensor, present: torch.Tensor) -> dict[str, Any]:
    acted = int(present.sum())
    return {
        "episode_length": [int(x) for x in lengths.tolist()],
        "episode_reward": [float(x) for x in returns.tolist()],
        "average_episode_length": float(lengths[present].sum()) / acted if acted else 0.0,
        "average_episode_reward": float(returns[present].sum()) / acted if acted else 0.0,
    }
