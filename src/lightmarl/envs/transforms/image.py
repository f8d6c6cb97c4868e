"""Image observation transforms that run where the env runs: [`Grayscale`][lightmarl.envs.transforms.image.Grayscale], [`Resize`][lightmarl.envs.transforms.image.Resize].

Unlike the other transforms (which run in the training process on the vector's torch outputs),
these change each frame alone, so they run inside the env's own process, in NumPy
(`image_ops`): in the env worker processes too, which stay torch-free.
The vector's arrays, the rollout and the policies see only the transformed frames, ``uint8``
where the env's are. They must come first in a recipe's ``env.transforms`` (before any
transform that runs in the training process, such as ``FrameStack``)::

    transforms:
      - class_path: lightmarl.envs.transforms.Grayscale
      - class_path: lightmarl.envs.transforms.Resize
        init_args: {height: 84, width: 84}
      - class_path: lightmarl.envs.transforms.FrameStack
        init_args: {num_frames: 4}
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Hashable, Sequence
from typing import Literal

from lightmarl.envs.image_ops import FrameOp, GrayscaleOp, ResizeOp
from lightmarl.envs.spec import EnvSpec
from lightmarl.envs.transforms.base import BoundTransform, VecTransform


class FrameTransform(VecTransform):
    """A transform of each observation alone, applied where the env runs.

    Subclasses return their NumPy op (`frame_op`); the spec follows from the op's output.
    """

    @abstractmethod
    def frame_op(self) -> FrameOp:
        """The torch-free, picklable op that transforms one frame."""

    def transform_spec(self, spec: EnvSpec) -> EnvSpec:
        groups = dict(spec.groups)
        op = self.frame_op()
        for group in self.selected(spec):
            try:
                shape, dtype = op.output(tuple(group.observation_shape), group.observation_dtype)
            except ValueError as err:
                raise ValueError(f"{self.field}: group {group.name!r}: {err}") from None
            groups[group.name] = dataclasses.replace(group, observation_shape=tuple(shape), observation_dtype=dtype)
        return dataclasses.replace(spec, groups=groups)

    def bind(self, spec: EnvSpec, num_envs: int, training: bool) -> BoundTransform:
        raise RuntimeError(
            f"{self.field} runs where the env runs (EnvConfig.make_vector applies it through the env family), "
            "not on a vector's outputs"
        )


class Grayscale(FrameTransform):
    """RGB images ``[H, W, 3]`` -> luma (ITU-R BT.601 weights, as PIL and OpenCV), ``uint8`` kept.

    Args:
        keep_channel: ``True``: ``[H, W, 1]`` (what ``FrameStack`` stacks into ``[H, W, k]``
            channels and a CNN reads); ``False``: ``[H, W]``.
        groups: the agent groups it applies to (default: every group).
    """

    def __init__(self, keep_channel: bool = True, groups: list[str] | None = None) -> None:
        super().__init__(groups)
        if not isinstance(keep_channel, bool):
            raise ValueError(f"{self.field}.keep_channel: expected true or false, got {keep_channel!r}")
        self.keep_channel = keep_channel

    def frame_op(self) -> FrameOp:
        return GrayscaleOp(self.keep_channel)


class Resize(FrameTransform):
    """Images ``[H, W]`` or ``[H, W, C]`` -> ``[height, width(, C)]``, ``uint8`` kept (rounded).

    Args:
        height: output rows.
        width: output columns.
        interpolation: ``area`` (each output pixel the mean of the source pixels it covers, as
            OpenCV's ``INTER_AREA``: no aliasing when shrinking) or ``nearest`` (the source pixel
            at its centre: cheapest, but thin features can vanish).
        groups: the agent groups it applies to (default: every group).
    """

    def __init__(
        self,
        height: int = 84,
        width: int = 84,
        interpolation: Literal["area", "nearest"] = "area",
        groups: list[str] | None = None,
    ) -> None:
        super().__init__(groups)
        for name, value in (("height", height), ("width", width)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.field}.{name}: expected a positive integer, got {value!r}")
        if interpolation not in ("area", "nearest"):
            raise ValueError(f"{self.field}.interpolation: expected 'area' or 'nearest', got {interpolation!r}")
        self.height, self.width, self.interpolation = height, width, interpolation

    def frame_op(self) -> FrameOp:
        return ResizeOp(self.height, self.width, self.interpolation)


def split_frame_transforms(transforms: Sequence[VecTransform]) -> tuple[list[FrameTransform], list[VecTransform]]:
    """The leading `FrameTransform` s (applied where the env runs) and the rest (on the
    vector's outputs).

    Raises:
        ValueError: when a frame transform follows another kind (it would have to see that
            transform's outputs, which only exist in the training process).
    """
    frames: list[FrameTransform] = []
    for i, transform in enumerate(transforms):
        if not isinstance(transform, FrameTransform):
            rest = list(transforms[i:])
            late = [type(t).__name__ for t in rest if isinstance(t, FrameTransform)]
            if late:
                raise ValueError(
                    f"env.transforms: {late} must come before {type(transform).__name__}: image transforms run "
                    "where the env runs, on its own frames, before any transform of the training process"
                )
            return frames, rest
        frames.append(transform)
    return frames, []


def frame_ops_by_agent(spec: EnvSpec, transforms: Sequence[FrameTransform]) -> dict[Hashable, tuple[FrameOp, ...]]:
    """For each env agent id (``GroupSpec.env_agents``) the ops of ``transforms`` on its group, in
    order; agents of groups no transform selects are left out. ``spec`` is the env's own."""
    ops: dict[Hashable, tuple[FrameOp, ...]] = {}
    for transform in transforms:
        op = transform.frame_op()
        for group in transform.selected(spec):
            for agent in group.env_agents:
                ops[agent] = (*ops.get(agent, ()), op)
        spec = transform.transform_spec(spec)
    return ops
