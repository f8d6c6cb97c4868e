"""An agent's transitions, from one of its turns to the next, and the ones a rollout leaves open.

Every learner reads experience as *agent transitions*: a transition starts on a row where the
agent acted (``valid``) and runs until its next own turn or its episode's end. This module is
the one place that decides which rows form a transition; PPO's GAE
(`valid_row_gae`) and the off-policy replay path
(`OffPolicyUnitTrainer`) both use it.

**Rows of a transition** (`agent_transitions`). Along one (env copy, agent) sequence, a
row's reward belongs to the transition of the agent's latest valid row at or before it, in the
same episode (no ``done`` row in between). In turn-based envs a row before the agent's first
valid row of an episode (the other seats moved first and paid it) belongs to the episode's
first transition of the agent; an episode in which the agent never acts gives it no transition,
so its rewards there reach no action of it. In parallel envs such rows are an absent agent's
and carry no signal. A transition *ends* at its last row: a ``done`` row (the agent's episode is
over), or the row before the agent's next valid row. Its reward is the sum of its rows' rewards
(undiscounted: they arrive within one of the agent's moves), its ``done``, ``terminated`` and
next observation are those of its end row, i.e. in turn-based envs what the agent sees at its
next own turn.

**Open transitions** (`OpenTransitions`). In a turn-based env a rollout ends in the
middle of the game: an agent's last move has no reply yet, and the reward of that reply (the
win on the opponent's next turn, the loser's -1) arrives in the next rollout. Such a transition
is *open*: its end is the rollout's last row and it is not done there. A transition enters a
loss only when it closes. The learner keeps the rollout's tail from the earliest open
transition (or the earliest row whose reward waits for the agent's first move of an episode)
and puts it in front of the next rollout, so the transition closes there with the rewards, the
``done`` and the next observation it really had. Rows of the kept tail that already entered a
loss are marked so and are not learned from twice, and their rewards are not counted twice.
In parallel envs every agent present at the rollout's end acts at the next step, whose
observation the last row already holds: nothing is open, nothing is kept.

The kept tail is state of the learner, per process (under DDP each rank keeps its own env
copies' tails). It is saved with the replay state of a checkpoint
(`OpenTransitions.state_dict`), so an exactly resumed run closes the same transitions; a
run that leaves the replay state out (``model.checkpoint_replay: false``) drops the open
transitions at resume (they never enter a loss; rewards arriving before the agent's next move
then go to that move's transition).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection

from lightmarl import keys

#: the shortest cap on a kept tail (env steps); the cap is this or one rollout, whichever is longer.
MIN_KEPT_STEPS = 256

#: the row entries (inside the group) that mark the kept tail.
REWARD_UNCOUNTED = keys.REWARD_UNCOUNTED  # the row's reward is not yet part of any transition's reward
LEARNABLE = keys.LEARNABLE  # a transition starting at the row may still enter a loss


@dataclass
class AgentTransitions:
    """The transitions of ``n`` sequences of ``T`` rows (see `agent_transitions`).

    Transitions are numbered per sequence in the order of their start rows: transition ``j`` of
    sequence ``i`` starts at the ``j``-th valid row of ``i``, flat index ``i * width + j``.
    """

    slot: torch.Tensor
    """``[n, T]`` long: the transition (per sequence) whose reward a row adds to, -1 for none."""
    end: torch.Tensor
    """``[n * width]`` long: end row (time) of each transition, -1 for padding."""
    open: torch.Tensor
    """``[n * width]`` bool: the transition is still open at the last row (turn-based only)."""
    pending: torch.Tensor
    """``[n, T]`` bool: rows whose reward waits for a transition that has not started (turn-based):
    rows of the sequence's last episode before the agent's first valid row there."""
    valid: torch.Tensor
    """``[n, T]`` bool: the start rows (where the agent acted)."""
    width: int
    """Transitions per sequence (the most valid rows of any sequence, at least 1)."""

    def _index(self, slot: torch.Tensor) -> torch.Tensor:
        n = slot.shape[0]
        return torch.arange(n, device=slot.device).unsqueeze(1) * self.width + slot.clamp(min=0)

    def at_start(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, T]``: each transition's ``x`` (``[n * width]``) on its start row; zero (False) on other rows."""
        start_slot = self.valid.long().cumsum(1) - 1
        out = torch.zeros(self.valid.shape, dtype=x.dtype, device=x.device)
        out[self.valid] = x[self._index(start_slot)[self.valid]]
        return out

    def fresh(self) -> torch.Tensor:
        """``[n, T]`` bool: rows of open transitions and `pending` rows (what a learner keeps)."""
        member = self.slot >= 0
        return (member & self.open[self._index(self.slot)]) | self.pending

    @property
    def used(self) -> torch.Tensor:
        """``[n * width]`` bool: a real transition, not padding."""
        return self.end >= 0

    def flat_end(self, steps: int) -> torch.Tensor:
        """``[n * width]``: the flat index (into ``[n * T]``) of each transition's end row (0 for padding)."""
        n_width = self.end.shape[0]
        sequence = torch.arange(n_width, device=self.end.device) // self.width
        return sequence * steps + self.end.clamp(min=0)

    def sum_rows(self, values: torch.Tensor) -> torch.Tensor:
        """``[n * width]``: the sum of ``values`` (``[n, T]``) over each transition's rows."""
        n = self.slot.shape[0]
        member = self.slot >= 0
        index = self._index(self.slot)[member]
        return torch.zeros(n * self.width, dtype=values.dtype, device=values.device).index_add_(
            0, index, values[member]
        )


def agent_transitions(valid: torch.Tensor, done: torch.Tensor, turn_based: bool) -> AgentTransitions:
    """Group the rows of ``n`` sequences ``[n, T]`` into agent transitions (see the module doc).

    Args:
        valid: ``[n, T]`` bool, the agent acted on the row.
        done: ``[n, T]`` bool, the agent's episode ended with the row.
        turn_based: rows where the agent did not act carry its rewards and ends (turn-based envs):
            rows before its first move of an episode go to that move's transition, and a
            transition whose end is the last row without a ``done`` is open. Otherwise such rows
            are an absent agent's and carry nothing, and no transition is open.
    """
    n, steps = valid.shape
    device = valid.device
    ok, d = valid.bool(), done.bool()
    time = torch.arange(steps, device=device).expand(n, steps)
    before = ok.long().cumsum(1)  # valid rows at or before each row
    slot = before - 1  # the latest valid row's transition (-1: none yet)
    episode = d.long().cumsum(1) - d.long()  # done rows strictly before each row: a row's episode number
    # The episode of the latest valid row at or before each row (non-decreasing in time: a running max finds it).
    start_episode = torch.where(ok, episode, 0).cummax(1).values
    member = (slot >= 0) & (episode == start_episode)
    pending = torch.zeros_like(ok)
    if turn_based:
        # The next valid row at or after each row (steps: none), by a running min from the end.
        candidate = torch.where(ok, time, steps)
        next_valid = candidate.flip(1).cummin(1).values.flip(1)
        next_episode = episode.gather(1, next_valid.clamp(max=steps - 1))
        has_next = next_valid < steps
        first = ~member & has_next & (next_episode == episode)
        # A row before the next valid row: that row's transition number is the count of valid rows before it.
        slot = torch.where(first, before, slot)
        member = member | first
        # Rows of the last episode, still going on, with no valid row yet: their rewards wait for the agent's next move.
        pending = ~member & ~has_next & (episode == episode[:, -1:]) & ~d[:, -1:]
    slot = torch.where(member, slot, -1)
    width = max(int(ok.sum(1).max()), 1) if n else 1
    index = (torch.arange(n, device=device).unsqueeze(1) * width + slot)[member]
    end = torch.full((n * width,), -1, dtype=torch.long, device=device)
    end.scatter_reduce_(0, index, time[member], reduce="amax")
    is_open = torch.zeros(n * width, dtype=torch.bool, device=device)
    if turn_based and steps:
        last_done = d[:, -1].repeat_interleave(width)
        is_open = (end == steps - 1) & ~last_done
    return AgentTransitions(slot=slot, end=end, open=is_open, pending=pending, valid=ok, width=width)


def sequences(x: torch.Tensor, time_dim: int, batch_shape: torch.Size) -> torch.Tensor:
    """``x`` (``batch_shape`` leading, maybe trailing singleton dims) as ``[n, T]`` sequences along ``time_dim``."""
    while x.dim() > len(batch_shape):
        x = x.squeeze(-1)
    return x.expand(batch_shape).movedim(time_dim, -1).reshape(-1, batch_shape[time_dim])


def rows_of(x: torch.Tensor, time_dim: int, batch_shape: torch.Size) -> torch.Tensor:
    """Inverse of `sequences`: ``[n, T]`` back to ``batch_shape``."""
    moved = list(batch_shape)
    moved.append(moved.pop(time_dim))
    return x.reshape(moved).movedim(-1, time_dim)


class OpenTransitions:
    """The tail of the last rollout that holds a learner's open transitions (see the module doc).

    One per learner (UnitTrainer) and process. Each update: `extend` puts the kept tail in
    front of the new rollout; the learner groups rows with `agent_transitions` (passing
    `counted` rows' rewards only), learns from the closed transitions whose start row is
    `learnable`, and hands the open ones back with `keep`.

    Args:
        group_name: the agent group the learner reads.
        binding_index: the learner's binding (its index in the binding table): only its
            sequences' open transitions are kept.
    """

    def __init__(self, group_name: str, binding_index: int) -> None:
        self.group_name = group_name
        self.binding_index = binding_index
        self.tail: TensorDictBase | None = None

    @property
    def carried_steps(self) -> int:
        """Env steps of the kept tail (0: none)."""
        return 0 if self.tail is None else int(self.tail.shape[1])

    def extend(self, experience: TensorDictBase) -> TensorDictBase:
        """The kept tail followed by ``experience`` along time (``[envs, tail + T]``), marked.

        The group's rows carry `REWARD_UNCOUNTED` and `LEARNABLE` (True on every new row).
        """
        g = self.group_name
        rows = experience.get(g)
        marks = torch.ones(rows.shape, dtype=torch.bool, device=rows.device)
        data = experience.copy()  # structural copy: the marks stay out of the caller's experience
        data.set((g, REWARD_UNCOUNTED), marks)
        data.set((g, LEARNABLE), marks.clone())
        if self.tail is None:
            return data
        tail = self.tail.to(experience.device)
        if tail.shape[0] != experience.shape[0] or set(tail.keys(True, True)) != set(data.keys(True, True)):
            # Another env layout or other entries (a new run shape): the tail cannot be joined; drop it.
            self.tail = None
            return data
        return torch.cat([tail, data], dim=1)

    def keep(self, data: TensorDictBase, fresh: torch.Tensor, learnable: torch.Tensor, max_steps: int) -> None:
        """Keep the tail of ``data`` (from `extend`) from the binding's earliest ``fresh`` row on.

        Args:
            data: the extended experience of this update.
            fresh: ``[envs, time, agents]`` bool, the rows whose rewards are not yet in a closed
                transition: open transitions' rows and rows waiting for the agent's first move.
            learnable: ``[envs, time, agents]`` bool, the start rows of open transitions that may
                still enter a loss.
            max_steps: the longest tail kept is ``max(max_steps, MIN_KEPT_STEPS)`` env steps; a
                transition open longer (an agent without a move for that long) is dropped with
                its rewards.
        """
        steps = data.shape[1]
        max_steps = max(max_steps, MIN_KEPT_STEPS)
        mine = data.get((self.group_name, keys.BINDING_ID)) == self.binding_index
        fresh, learnable = fresh & mine, learnable & mine
        hit = fresh.any(-1).any(0).nonzero()
        if not hit.numel():
            self.tail = None
            return
        first = int(hit[0])
        if steps - first > max_steps:
            first = steps - max_steps
            # Sequences whose open transition started before the cut lose it, rewards and all.
            cut = fresh[:, :first].any(1, keepdim=True)
            fresh = fresh & ~cut
            learnable = learnable & ~cut
        tail = data[:, first:].clone()
        tail.set((self.group_name, REWARD_UNCOUNTED), fresh[:, first:].clone())
        tail.set((self.group_name, LEARNABLE), learnable[:, first:].clone())
        self.tail = tail

    def close(self, data: TensorDictBase, max_steps: int) -> tuple[AgentTransitions, torch.Tensor, torch.Tensor]:
        """Group ``data``'s rows (from `extend`) into transitions and keep the open ones.

        Returns ``(transitions, closed, counted)``: the transitions of the group's ``[envs *
        agents, time]`` sequences (`agent_transitions`, turn-based), the start rows
        ``[envs, time, agents]`` of the closed transitions that may enter a loss now, and the rows
        whose reward counts (a kept row's reward already in a closed transition does not).
        """
        g = self.group_name
        rows = data.get(g)
        shape = rows.shape
        transitions = agent_transitions(
            sequences(rows.get(keys.VALID), 1, shape),
            sequences(data.get((keys.NEXT, g, keys.DONE)), 1, shape),
            turn_based=True,
        )
        counted, learnable = row_marks(data, g)
        open_start = rows_of(transitions.at_start(transitions.open), 1, shape)
        self.keep(data, rows_of(transitions.fresh(), 1, shape), learnable & open_start, max_steps)
        closed = rows.get(keys.VALID) & learnable & ~open_start
        return transitions, closed, counted

    def forget_learning(self) -> None:
        """The open transitions never enter a loss (new weights: their actions were another policy's).

        Their rows stay, so rewards still reach them rather than the agent's next move.
        """
        if self.tail is not None:
            learnable = self.tail.get((self.group_name, LEARNABLE))
            self.tail.set((self.group_name, LEARNABLE), torch.zeros_like(learnable))

    def clear(self) -> None:
        """Drop the kept tail."""
        self.tail = None

    def state_dict(self) -> dict:
        """The kept tail as tensors and plain data (loadable with ``weights_only=True``); ``{}``: none."""
        if self.tail is None:
            return {}
        return {
            "entries": [(_path(k), v.detach().to("cpu", copy=True)) for k, v in self.tail.items(True, True)],
            "batch_sizes": [
                (_path(k), list(v.batch_size)) for k, v in self.tail.items(True) if is_tensor_collection(v)
            ],
            "batch_size": list(self.tail.batch_size),
        }

    def load_state_dict(self, state: dict) -> None:
        if not state:
            self.tail = None
            return
        batch_sizes = {(): state["batch_size"], **{tuple(k): b for k, b in state["batch_sizes"]}}
        tree: dict = {}
        for key, value in state["entries"]:
            node = tree
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = value

        def nested(node: dict, prefix: tuple[str, ...]) -> TensorDict:
            fields = {k: nested(v, (*prefix, k)) if isinstance(v, dict) else v for k, v in node.items()}
            return TensorDict(fields, batch_size=batch_sizes[prefix])

        self.tail = nested(tree, ())


def _path(key: str | tuple[str, ...]) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def row_marks(data: TensorDictBase, group_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(counted, learnable)`` ``[envs, time, agents]`` of ``data`` from `OpenTransitions.extend` (all True without)."""
    rows = data.get(group_name)
    ones = torch.ones(rows.shape, dtype=torch.bool, device=rows.device)
    return rows.get(REWARD_UNCOUNTED, ones), rows.get(LEARNABLE, ones)


__all__ = [
    "LEARNABLE",
    "REWARD_UNCOUNTED",
    "AgentTransitions",
    "OpenTransitions",
    "agent_transitions",
    "row_marks",
    "rows_of",
    "sequences",
]
