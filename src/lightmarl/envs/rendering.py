"""Recording the RGB frames of an env copy as it is stepped, for evaluation videos."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class FrameRecorder:
    """An env (a PettingZoo env, or a VMAS ``Environment`` of one copy) that keeps an RGB frame of every state it reaches.

    Every other attribute is the wrapped env's. Each ``reset`` (and VMAS's auto-reset
    ``reset_at``) starts a new episode in `episodes`; each ``step`` appends to the current
    one, before the vector stepping the env resets it, so an episode ends on its final state.

    Args:
        env: the env, able to draw RGB frames (a PettingZoo env built with ``render_mode="rgb_array"``).
        render: draws the env's current frame (default ``env.render()``).
        max_side: downsample frames by the smallest integer stride that brings their longer
            side to at most this many pixels (``None``: keep full size). Keeps memory and file
            size small for large screens (knights_archers_zombies renders 1280x720).
        max_frames: stop keeping frames after this many (an episode that never ends must not
            fill the memory); `dropped` counts those not kept.
    """

    def __init__(
        self,
        env: Any,
        max_side: int | None = 512,
        max_frames: int = 5_000,
        render: Callable[[Any], Any] | None = None,
    ) -> None:
        self.env = env
        self.render_frame = render or (lambda e: e.render())
        self.max_side = max_side
        self.max_frames = max_frames
        self.episodes: list[list[np.ndarray]] = []
        self.kept = 0
        self.dropped = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["env"], name)

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        result = self.env.reset(*args, **kwargs)
        self.episodes.append([])
        self._record()
        return result

    def step(self, actions: Any) -> Any:
        result = self.env.step(actions)
        self._record()
        return result

    def reset_at(self, *args: Any, **kwargs: Any) -> Any:
        """VMAS's reset of one copy (its vector's auto-reset): a new episode starts."""
        result = self.env.reset_at(*args, **kwargs)
        self.episodes.append([])
        self._record()
        return result

    def _record(self) -> None:
        if self.kept >= self.max_frames:
            self.dropped += 1
            return
        self.episodes[-1].append(self.frame())
        self.kept += 1

    def frame(self) -> np.ndarray:
        """The env's current RGB frame ``[height, width, 3]`` (uint8), downsampled to ``max_side``."""
        frame = self.render_frame(self.env)
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[-1] not in (3, 4):
            raise RuntimeError(
                f"rendering {type(self.env).__name__} returned {type(frame).__name__} "
                f"{getattr(frame, 'shape', '')}, not an RGB array [height, width, 3]; "
                "its render_mode must be 'rgb_array'"
            )
        stride = frame_stride(frame.shape[:2], self.max_side)
        return np.ascontiguousarray(frame[::stride, ::stride, :3], dtype=np.uint8)


def frame_stride(size: Sequence[int], max_side: int | None) -> int:
    """The smallest integer stride that brings the longer of ``size`` to at most ``max_side`` pixels."""
    if max_side is None:
        return 1
    return max(1, math.ceil(max(size) / max_side))
