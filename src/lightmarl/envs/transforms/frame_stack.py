"""Each agent's last observations side by side: [`FrameStack`][lightmarl.envs.transforms.frame_stack.FrameStack]."""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch

from lightmarl import keys
from lightmarl.envs.base import Outputs
from lightmarl.envs.spec import EnvSpec, GroupSpec, observation_storage_dtype
from lightmarl.envs.transforms.base import BoundTransform, VecTransform


class FrameStack(VecTransform):
    """Each agent's last ``num_frames`` observations side by side, oldest first, per group.

    Frames are concatenated along observation dimension ``dim`` (``-1``: a vector ``(n,)``
    becomes ``(num_frames * n,)``, an ``(H, W, C)`` image ``(H, W, num_frames * C)``), as
    TorchRL's ``CatFrames`` does. An agent's stack starts afresh at every episode start and
    whenever the agent appears (or reappears) in a running episode: with ``padding="same"`` the
    older frames repeat its first observation, with ``"zeros"`` they are zero. Absent agents
    (``valid`` False) see zeros, and their stack is forgotten.

    Args:
        num_frames: observations per stack.
        dim: observation dimension to concatenate along (negative: from the end).
        padding: what fills a fresh stack's older frames: ``same`` or ``zeros``.
        groups: the agent groups to stack (default: every group).
    """

    def __init__(
        self,
        num_frames: int = 4,
        dim: int = -1,
        padding: Literal["same", "zeros"] = "same",
        groups: list[str] | None = None,
    ) -> None:
        super().__init__(groups)
        if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
            raise ValueError(f"{self.field}.num_frames: expected a positive integer, got {num_frames!r}")
        if padding not in ("same", "zeros"):
            raise ValueError(f"{self.field}.padding: expected 'same' or 'zeros', got {padding!r}")
        self.num_frames = num_frames
        self.dim = dim
        self.padding = padding

    def axis(self, group: GroupSpec) -> int:
        """The concatenation axis of ``group``'s observation shape, from 0."""
        ndim = len(group.observation_shape)
        if not -ndim <= self.dim < ndim:
            raise ValueError(
                f"{self.field}.dim: {self.dim} is out of range for group {group.name!r}'s observations of shape "
                f"{group.observation_shape}"
            )
        return self.dim % ndim

    def transform_spec(self, spec: EnvSpec) -> EnvSpec:
        groups = dict(spec.groups)
        for group in self.selected(spec):
            shape = list(group.observation_shape)
            shape[self.axis(group)] *= self.num_frames
            groups[group.name] = dataclasses.replace(group, observation_shape=tuple(shape))
        return dataclasses.replace(spec, groups=groups)

    def bind(self, spec: EnvSpec, num_envs: int, training: bool) -> BoundTransform:
        return _BoundFrameStack(self, {g.name: g for g in self.selected(spec)}, num_envs)


def _stored_dtype(group: GroupSpec) -> torch.dtype:
    """Stacks keep the vector's dtype: ``uint8`` frames stay ``uint8``."""
    return torch.uint8 if observation_storage_dtype(group.observation_dtype) == "uint8" else torch.float32


class _BoundFrameStack(BoundTransform):
    per_copy_state = ("frames", "present")

    def __init__(self, transform: FrameStack, groups: dict[str, GroupSpec], num_envs: int) -> None:
        self.transform = transform
        k = transform.num_frames
        # Per group: frames [num_envs, agents, num_frames, *observation_shape], oldest first.
        self.frames = {
            g: torch.zeros(num_envs, s.num_agents, k, *s.observation_shape, dtype=_stored_dtype(s))
            for g, s in groups.items()
        }
        self.axes = {g: transform.axis(s) for g, s in groups.items()}
        self.present: dict[str, torch.Tensor] = {}

    def _flat(self, group: str, frames: torch.Tensor) -> torch.Tensor:
        """``[E, A, k, *shape]`` -> ``[E, A, *shape]`` with axis ``dim`` ``k`` times longer."""
        axis = self.axes[group]
        moved = frames.movedim(2, 2 + axis)  # the frame axis just before the concatenation axis
        shape = list(frames.shape[3:])
        shape[axis] *= frames.shape[2]
        return moved.reshape(*frames.shape[:2], *shape)

    def _fresh(self, observation: torch.Tensor) -> torch.Tensor:
        k = self.transform.num_frames
        if self.transform.padding == "same":
            return observation.unsqueeze(2).expand(-1, -1, k, *observation.shape[2:])
        fresh = torch.zeros(*observation.shape[:2], k, *observation.shape[2:], dtype=observation.dtype)
        fresh[:, :, -1] = observation
        return fresh

    @staticmethod
    def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return mask.view(*mask.shape, *([1] * (like.dim() - mask.dim())))

    def reset(self, current: Outputs) -> None:
        for g in self.frames:
            valid = current[g][keys.VALID]
            self.frames[g] = self._fresh(current[g][keys.OBSERVATION]) * self._rows(valid, self.frames[g])
            current[g][keys.OBSERVATION] = self._flat(g, self.frames[g])
            self.present[g] = valid

    def step(self, nxt: Outputs, current: Outputs, ended: torch.Tensor) -> None:
        for g, frames in self.frames.items():
            acted, done = self.present[g], nxt[g][keys.DONE]
            shifted = frames[:, :, 1:]
            # The step's result: each acting agent's stack with its new (final, if done) observation.
            after_step = torch.cat([shifted, nxt[g][keys.OBSERVATION].unsqueeze(2)], dim=2)
            nxt[g][keys.OBSERVATION] = self._flat(g, after_step * self._rows(acted, after_step))
            # The next step's stack: continued for agents still in the same episode, fresh for new ones.
            valid, observation = current[g][keys.VALID], current[g][keys.OBSERVATION]
            continuing = acted & ~done & ~ended.view(-1, 1) & valid
            continued = torch.cat([shifted, observation.unsqueeze(2)], dim=2)
            stacked = torch.where(self._rows(continuing, frames), continued, self._fresh(observation))
            self.frames[g] = stacked * self._rows(valid, stacked)
            current[g][keys.OBSERVATION] = self._flat(g, self.frames[g])
            self.present[g] = valid
