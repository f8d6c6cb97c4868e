"""Operations on one image observation at a time, in NumPy: grayscale and resize.

The image transforms of a recipe (`lightmarl.envs.transforms.image`: ``Grayscale``,
``Resize``) run these where the env runs, in the env worker processes too, before a frame is
written into the vector's arrays: shrinking a frame there means the shared memory, the rollout
and the policy only ever see the small one. This module imports no torch (worker processes
import it).

An op is a small frozen dataclass (picklable, sent to worker processes) with
`output` (the shape and dtype it makes from an input shape and dtype, checked
when the recipe is built) and ``__call__`` (frames ``[..., H, W]`` or ``[..., H, W, C]``, channels
last as PettingZoo's images are, with any leading batch dims: the agents of one env step go
through together). ``uint8`` frames stay ``uint8`` (rounded); other dtypes come out ``float32``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, Protocol

import numpy as np

#: ITU-R BT.601 luma weights (what PIL's ``convert("L")`` and OpenCV's ``COLOR_RGB2GRAY`` use).
LUMA_WEIGHTS = (0.299, 0.587, 0.114)


class FrameOp(Protocol):
    """One operation on a single frame."""

    def output(self, shape: tuple[int, ...], dtype: str) -> tuple[tuple[int, ...], str]:
        """The output shape and dtype name for frames of ``shape`` and ``dtype``; ``ValueError`` if it cannot apply."""
        ...

    def __call__(self, frame: np.ndarray) -> np.ndarray: ...


def _out_dtype(dtype: str) -> str:
    return "uint8" if dtype == "uint8" else "float32"


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float results back to the frame's dtype: ``uint8`` rounded and clipped to 0..255."""
    if dtype == "uint8":
        return np.clip(np.rint(values), 0, 255).astype(np.uint8)
    return values.astype(np.float32, copy=False)


@dataclass(frozen=True)
class GrayscaleOp:
    """RGB ``[H, W, 3]`` (or RGBA, alpha ignored) -> luma ``[H, W, 1]`` (``keep_channel``) or ``[H, W]``."""

    keep_channel: bool = True

    def output(self, shape: tuple[int, ...], dtype: str) -> tuple[tuple[int, ...], str]:
        if len(shape) != 3 or shape[-1] not in (3, 4):
            raise ValueError(
                f"Grayscale reads RGB images [H, W, 3] (or RGBA [H, W, 4]); got observations of shape {shape}"
            )
        return ((*shape[:2], 1) if self.keep_channel else tuple(shape[:2])), _out_dtype(str(dtype))

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        luma = frame[..., :3].astype(np.float32) @ np.asarray(LUMA_WEIGHTS, dtype=np.float32)
        if self.keep_channel:
            luma = luma[..., None]
        return _cast(luma, frame.dtype.name)


def area_plan(source: int, target: int) -> tuple[np.ndarray, np.ndarray]:
    """``(index, weight)``, each ``[target, taps]``: output pixel ``i`` is ``sum_k weight[i, k] *
    source[index[i, k]]``, the mean of the source interval ``[i * source / target, (i + 1) * source
    / target)`` with partial pixels weighted by their overlap (OpenCV's ``INTER_AREA`` when
    shrinking). ``taps`` is the most source pixels one interval touches."""
    scale = source / target
    starts = np.arange(target) * scale
    index = np.floor(starts).astype(np.int64)[:, None] + np.arange(int(np.ceil(scale)) + 1)[None, :]
    overlap = np.minimum(starts[:, None] + scale, index + 1) - np.maximum(starts[:, None], index)
    weight = np.clip(overlap, 0, None) / scale
    used = weight.max(0) > 0
    return np.minimum(index, source - 1)[:, used], weight[:, used].astype(np.float32)


def area_resize_axis(x: np.ndarray, axis: int, plan: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """``x`` resized along ``axis`` by `area_plan`'s ``plan`` (float32): one gather and
    multiply-add per tap, so the cost is the output's size times the taps (a dense matrix product
    would also multiply every zero weight)."""
    index, weight = plan
    shape = [1] * x.ndim
    shape[axis] = len(index)
    out = np.take(x, index[:, 0], axis=axis) * weight[:, 0].reshape(shape)
    for k in range(1, index.shape[1]):
        out += np.take(x, index[:, k], axis=axis) * weight[:, k].reshape(shape)
    return out


def nearest_indices(source: int, target: int) -> np.ndarray:
    """The source index nearest the centre of each of ``target`` output pixels."""
    return np.minimum(((np.arange(target) + 0.5) * source / target).astype(np.int64), source - 1)


@dataclass(frozen=True)
class ResizeOp:
    """``[H, W(, C)]`` -> ``[height, width(, C)]`` by ``area`` averaging or ``nearest`` pixel.

    Frames may carry leading batch dims (several agents' frames at once) once the op knows its
    source frame shape (`for_source`).
    """

    height: int
    width: int
    interpolation: Literal["area", "nearest"] = "area"
    #: the shape of one source frame; ``()`` until `for_source` sets it.
    source: tuple[int, ...] = field(default=())

    def output(self, shape: tuple[int, ...], dtype: str) -> tuple[tuple[int, ...], str]:
        if len(shape) not in (2, 3):
            raise ValueError(f"Resize reads images [H, W] or [H, W, C]; got observations of shape {shape}")
        return (self.height, self.width, *shape[2:]), _out_dtype(str(dtype))

    def for_source(self, shape: tuple[int, ...]) -> ResizeOp:
        """This op for frames of ``shape`` (its plan is made once, for that size)."""
        return ResizeOp(self.height, self.width, self.interpolation, tuple(int(n) for n in shape))

    @cached_property
    def _plan(self) -> tuple[Any, Any]:
        rows, cols = self.source[:2]
        if self.interpolation == "nearest":
            return nearest_indices(rows, self.height), nearest_indices(cols, self.width)
        return area_plan(rows, self.height), area_plan(cols, self.width)

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        if not self.source:
            return self.for_source(frame.shape)(frame)
        row_axis = frame.ndim - len(self.source)  # after any batch dims
        rows, cols = self._plan
        if self.interpolation == "nearest":
            return np.take(np.take(frame, rows, axis=row_axis), cols, axis=row_axis + 1)
        x = area_resize_axis(frame, row_axis, rows)
        return _cast(area_resize_axis(x, row_axis + 1, cols), frame.dtype.name)


def apply_ops(ops: tuple[FrameOp, ...], frame: np.ndarray) -> np.ndarray:
    """``frame`` through ``ops`` in order, as a contiguous array."""
    for op in ops:
        frame = op(np.asarray(frame))
    return np.ascontiguousarray(frame)
