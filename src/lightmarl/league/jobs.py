"""Jobs: what the league asks an active player to do next, and how many it may run at once."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class EpsilonSchedule:
    """Exploration epsilon decaying linearly with the player's agent steps.

    Attributes:
        start: epsilon at step 0.
        end: epsilon from ``decay_len`` steps on.
        decay_len: agent steps over which epsilon goes from ``start`` to ``end``.
    """

    start: float = 1.0
    end: float = 0.05
    decay_len: int = 100_000

    def __call__(self, step: int) -> float:
        if self.decay_len <= 0:
            return self.end
        fraction = min(1.0, max(0, step) / self.decay_len)
        return self.start + fraction * (self.end - self.start)


@dataclass
class JobSettings:
    """Per-role keyword arguments that every job of the player carries (the league design's job hooks).

    Attributes:
        forward_kwargs: passed to the acting policy (e.g. ``{"deterministic": False}``).
        adder_kwargs: passed to whatever turns experience into training data.
        env_kwargs: passed to the env copies that run the job.
        exploration: epsilon schedule; when set, each job's ``forward_kwargs`` gains ``eps``.
    """

    forward_kwargs: dict[str, Any] = field(default_factory=dict)
    adder_kwargs: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    exploration: EpsilonSchedule | None = None


@dataclass(frozen=True)
class Job:
    """One unit of work for an active player: play ``opponent_ids`` (none in solo games) with these kwargs.

    Attributes:
        player_id: the active player that launches the job (its slot is held until the job ends).
        opponent_ids: the opponents chosen for it, empty in solo environments.
        branch: the rule that chose the opponent (``"pfsp"``, ``"self_play"``, ``"verification"``...),
            for logging and tests.
        forward_kwargs: see :class:`JobSettings`.
        adder_kwargs: see :class:`JobSettings`.
        env_kwargs: see :class:`JobSettings`.
        job_id: unique within a league, assigned by the manager (-1 until then).
    """

    player_id: str
    opponent_ids: tuple[str, ...] = ()
    branch: str = "solo"
    forward_kwargs: dict[str, Any] = field(default_factory=dict)
    adder_kwargs: dict[str, Any] = field(default_factory=dict)
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    job_id: int = -1

    def as_dict(self) -> dict[str, Any]:
        """Plain-Python form (saved in the league state)."""
        state = asdict(self)
        state["opponent_ids"] = list(self.opponent_ids)
        return copy.deepcopy(state)

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> Job:
        return cls(**{**state, "opponent_ids": tuple(state["opponent_ids"])})


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
