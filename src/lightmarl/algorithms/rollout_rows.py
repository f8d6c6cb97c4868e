"""The rows one update learns from: each rollout on its own, or with the transitions an earlier one left open.

A learner holds one [`RolloutRows`][lightmarl.algorithms.rollout_rows.RolloutRows], chosen by the env:
[`rollout_rows`][lightmarl.algorithms.rollout_rows.rollout_rows] gives the plain one for parallel envs
and a [`TurnBasedRows`][lightmarl.algorithms.rollout_rows.TurnBasedRows] for turn-based ones. Each
update asks it for an [`UpdateRows`][lightmarl.algorithms.rollout_rows.UpdateRows] (`RolloutRows.take`):
the experience to learn from, a copy of its own to write advantages and masks into, with what the
learner needs to know about it (which leading steps were carried over, which transitions closed, which
rewards count). The turn-based carry-over (`lightmarl.algorithms.open_transitions`) lives only in
`TurnBasedRows`: a learner's update reads the same way for both kinds of env.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase

from lightmarl.algorithms.open_transitions import AgentTransitions, OpenTransitions, row_marks


@dataclass
class UpdateRows:
    """The experience of one update (``[envs, time]``) and what the learner must know about its rows."""

    data: TensorDictBase
    """The rows: the update's own structural copy (entries it writes stay out of the caller's experience)."""
    carried: int
    """Leading env steps carried over from earlier rollouts (their rows were in earlier updates already)."""
    closed: torch.Tensor | None
    """``[envs, time, agents]`` bool: rows whose transition closed in this update and may enter a loss
    (``None``: every row; parallel envs leave nothing open)."""
    transitions: AgentTransitions | None
    """The group's agent transitions when already grouped (turn-based), else ``None`` (GAE groups them)."""
    counted: torch.Tensor
    """``[envs, time, agents]`` bool: rows whose reward counts (a carried row's reward that is already in a
    closed transition does not)."""

    def learnable(self, mask: torch.Tensor) -> torch.Tensor:
        """``mask`` (``[envs, time, agents]``) restricted to rows whose transition closed now: each enters a loss once."""
        return mask if self.closed is None else mask & self.closed

    def new(self, mask: torch.Tensor) -> torch.Tensor:
        """``mask`` without the carried steps, for losses that read rows, not transitions (e.g. distillation)."""
        if not self.carried:
            return mask
        mask = mask.clone()
        mask[:, : self.carried] = False
        return mask


class RolloutRows:
    """Parallel envs: each rollout is learned from on its own; nothing is kept between updates.

    Args:
        group_name: the agent group the learner reads.
    """

    def __init__(self, group_name: str) -> None:
        self.group_name = group_name

    def take(self, experience: TensorDictBase) -> UpdateRows:
        """The rows of this update: ``experience`` (a structural copy)."""
        data = experience.copy()
        counted, _ = row_marks(data, self.group_name)
        return UpdateRows(data=data, carried=0, closed=None, transitions=None, counted=counted)

    def restart(self) -> None:
        """New weights for the learner's binding: forget what depends on the old ones."""

    def state_dict(self) -> dict:
        """What a resumed run needs to learn from the same rows (per process); ``{}``: nothing."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        del state


class TurnBasedRows(RolloutRows):
    """Turn-based envs: the tail of the last rollout that holds open transitions goes in front of the next.

    Each update's rows are the kept tail followed by the new rollout; the transitions that close
    there enter the loss, the ones still open are kept for the next update
    (`OpenTransitions`).

    Args:
        group_name: the agent group the learner reads.
        binding_index: the learner's binding (its index in the binding table): only its open
            transitions are kept.
    """

    def __init__(self, group_name: str, binding_index: int) -> None:
        super().__init__(group_name)
        self.open_transitions = OpenTransitions(group_name, binding_index)

    def take(self, experience: TensorDictBase) -> UpdateRows:
        """The kept tail, then ``experience``; the transitions that close in it are the learnable ones."""
        data = self.open_transitions.extend(experience)
        transitions, closed, counted = self.open_transitions.close(data, max_steps=experience.shape[1])
        return UpdateRows(
            data=data,
            carried=data.shape[1] - experience.shape[1],
            closed=closed,
            transitions=transitions,
            counted=counted,
        )

    def restart(self) -> None:
        """The open transitions' actions were the old policy's: they enter no loss."""
        self.open_transitions.forget_learning()

    def state_dict(self) -> dict:
        return self.open_transitions.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.open_transitions.load_state_dict(state)


def rollout_rows(group_name: str, binding_index: int, *, turn_based: bool) -> RolloutRows:
    """The rows source of a learner of ``group_name``'s binding ``binding_index``: turn-based or plain."""
    return TurnBasedRows(group_name, binding_index) if turn_based else RolloutRows(group_name)


__all__ = ["RolloutRows", "TurnBasedRows", "UpdateRows", "rollout_rows"]
