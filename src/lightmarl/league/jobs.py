"""Jobs: what the league asks an active player to do next, and how many it may run at once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Job:
    """One unit of work for an active player: play ``opponent_ids`` (none in solo games).

    Attributes:
        player_id: the active player that launches the job (its slot is held until the job ends).
        opponent_ids: the opponents chosen for it, empty in solo environments.
        branch: the rule that chose the opponent (``"pfsp"``, ``"self_play"``, ``"verification"``...),
            counted in the ``league/<player>/jobs/<branch>`` metrics.
        job_id: unique within a league, assigned by the manager (-1 until then).
    """

    player_id: str
    opponent_ids: tuple[str, ...] = ()
    branch: str = "solo"
    job_id: int = -1

    def as_dict(self) -> dict[str, Any]:
        """Plain-Python form (saved in the league state)."""
        return {
            "player_id": self.player_id,
            "opponent_ids": list(self.opponent_ids),
            "branch": self.branch,
            "job_id": self.job_id,
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> Job:
        # Keys of no field are dropped: league states saved before jobs lost their per-role kwargs
        # (forward / adder / env kwargs, always empty in `lightmarl fit`) still resume.
        known = {f.name for f in fields(cls)}
        return cls(
            **{k: v for k, v in state.items() if k in known and k != "opponent_ids"},
            opponent_ids=tuple(state["opponent_ids"]),
        )


class LaunchCount:
    """How many jobs a player runs now, bounded by ``capacity`` (``launch_count`` in DI-engine's league).

    Not locked itself: the league manager guards it with its own lock.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"max_active_player_job must be >= 1, got {capacity}")
        self.capacity = capacity
        self.used = 0

    @property
    def free(self) -> int:
        return self.capacity - self.used

    def acquire(self) -> bool:
        """Take a slot; False when all are taken."""
        if self.used >= self.capacity:
            return False
        self.used += 1
        return True

    def release(self) -> None:
        if self.used <= 0:
            raise RuntimeError("released a job slot that was never acquired")
        self.used -= 1
