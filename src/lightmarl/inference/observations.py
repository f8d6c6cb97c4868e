"""The env transforms of a saved population, applied to observations one env step at a time.

Inference gets an env's own observations (a PettingZoo dict); the policies learned from the
transformed ones. `ObservationPipeline` rebuilds the run's transforms from an
[`SavedPopulation`][lightmarl.policies.artifact.SavedPopulation] (settings and statistics, frozen) and runs them
as an evaluation vector of one env copy does: image ops (``Grayscale``, ``Resize``) on each
agent's frame, then the vector transforms (``ObservationNorm``, ``FrameStack``, ...) through their
own `BoundTransform` code, so a policy sees exactly what
``lightmarl validate`` shows it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import torch

from lightmarl import keys
from lightmarl.envs.image_ops import FrameOp
from lightmarl.envs.spec import EnvSpec, GroupSpec, observation_storage_dtype
from lightmarl.envs.transforms import (
    BoundTransform,
    FrameStack,
    FrameTransform,
    ObservationNorm,
    RewardNorm,
    VecTransform,
    split_frame_transforms,
    transformed_spec,
)
from lightmarl.policies.artifact import SavedPopulation, group_from_dict
from lightmarl.policies.loading import resolve_class


def build_transforms(
    artifact: SavedPopulation, allow: Collection[str] = (), *, trust_code: bool = False
) -> list[VecTransform]:
    """The artifact's transforms, built from their settings with their statistics loaded (frozen);
    their classes as the loading rule allows ([`lightmarl.trust`][lightmarl.trust], ``allow`` / ``trust_code``)."""
    built = []
    for i, entry in enumerate(artifact.transforms):
        field = f"{artifact.source!r} transforms[{i}]"
        cls = resolve_class(
            entry["class_path"],
            field=field,
            source=artifact.source,
            base=VecTransform,
            allowed=allow,
            trust_code=trust_code,
        )
        try:
            transform = cls(**dict(entry.get("init_args") or {}))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{field}: {entry['class_path']}(**{entry.get('init_args')}) failed: {err}") from err
        transform.load_state_dict(entry.get("state") or {})
        built.append(transform)
    return built


def vector_input_spec(artifact: SavedPopulation, frames: list[FrameTransform], vector: list[VecTransform]) -> EnvSpec:
    """The spec the first vector transform reads: the env's own spec after the image ops, where the
    artifact records the env's own groups, else the policies' spec with the vector transforms undone."""
    possible = tuple(artifact.env.get("possible_agents") or [a for g in artifact.groups.values() for a in g["agents"]])
    base_groups = artifact.env.get("base_groups")
    if base_groups:
        base = EnvSpec("saved", possible, {n: group_from_dict(g) for n, g in base_groups.items()})
        return transformed_spec(base, frames)
    groups = {n: artifact.group_spec(n) for n in artifact.groups}
    for transform in reversed(vector):
        if isinstance(transform, FrameStack):
            for name in transform.groups or list(groups):
                group = groups[name]
                shape = list(group.observation_shape)
                shape[transform.axis(group)] //= transform.num_frames
                groups[name] = dataclasses.replace(group, observation_shape=tuple(shape))
        elif not isinstance(transform, ObservationNorm | RewardNorm):
            raise ValueError(
                f"{artifact.source!r}: transform {type(transform).__name__} changes observations in a way this "
                "file does not record (it predates the env's own spec in checkpoints); re-save it with this lightmarl"
            )
    return EnvSpec("saved", possible, groups)


class ObservationPipeline:
    """The run's transforms at work on one env copy.

    Args:
        artifact: the saved population.
        allow: class paths outside lightmarl the caller trusts.
        trust_code: build whatever transform classes the artifact names.
    """

    def __init__(self, artifact: SavedPopulation, allow: Collection[str] = (), *, trust_code: bool = False) -> None:
        self.transforms = build_transforms(artifact, allow, trust_code=trust_code)
        frames, vector = split_frame_transforms(self.transforms)
        self.frame_transforms = frames
        self.vector_transforms = vector
        self.input_spec = vector_input_spec(artifact, frames, vector)
        names = list(artifact.groups)
        #: group -> the image ops every agent's frame goes through, in order.
        self.frame_ops: dict[str, list[FrameOp]] = {n: [] for n in names}
        for frame_transform in frames:
            for name in frame_transform.groups or names:
                self.frame_ops[name].append(frame_transform.frame_op())
        spec = self.input_spec
        self.bound: list[BoundTransform] = []
        for transform in vector:
            self.bound.append(transform.bind(spec, 1, training=False))
            spec = transform.transform_spec(spec)
        for name in names:
            mine, theirs = spec.groups[name].observation_shape, artifact.group_spec(name).observation_shape
            if tuple(mine) != tuple(theirs):
                raise ValueError(
                    f"{artifact.source!r}: the transforms make observations of shape {tuple(mine)} for group "
                    f"{name!r}, but its policies read {tuple(theirs)}"
                )
        self._started = False

    @property
    def active(self) -> bool:
        """Whether any transform changes observations."""
        return bool(self.frame_transforms or self.vector_transforms)

    def reset(self) -> None:
        """A new episode: the next call starts every memory (frame stacks) afresh."""
        self._started = False

    def frame(self, group: str, observation: Any) -> np.ndarray:
        """One agent's observation through its group's image ops."""
        frame = np.asarray(observation)
        for op in self.frame_ops.get(group, []):
            frame = op(frame)
        return frame

    def empty(self, group: str) -> torch.Tensor:
        """Zero observations ``[1, agents, *shape]`` of ``group`` as the vector stores them."""
        spec = self.input_spec.groups[group]
        dtype = torch.uint8 if observation_storage_dtype(spec.observation_dtype) == "uint8" else torch.float32
        return torch.zeros(1, spec.num_agents, *spec.observation_shape, dtype=dtype)

    def __call__(self, observations: Mapping[str, torch.Tensor], valid: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """Every group's ``[1, agents, ...]`` observations (``valid``: who is present) after the vector transforms."""
        current = {g: {keys.OBSERVATION: observations[g], keys.VALID: valid[g]} for g in observations}
        if not self._started:
            for bound in self.bound:
                bound.reset(current)
            self._started = True
            return {g: entries[keys.OBSERVATION] for g, entries in current.items()}
        # A step of a running episode: the step's results are not needed, only the next observations.
        nxt = {
            g: {
                keys.OBSERVATION: entries[keys.OBSERVATION].clone(),
                keys.REWARD: torch.zeros(entries[keys.VALID].shape),
                keys.DONE: torch.zeros(entries[keys.VALID].shape, dtype=torch.bool),
                keys.TERMINATED: torch.zeros(entries[keys.VALID].shape, dtype=torch.bool),
                keys.TRUNCATED: torch.zeros(entries[keys.VALID].shape, dtype=torch.bool),
            }
            for g, entries in current.items()
        }
        for bound in self.bound:
            bound.step(nxt, current, torch.zeros(1, dtype=torch.bool))
        return {g: entries[keys.OBSERVATION] for g, entries in current.items()}


def group_of_agents(groups: Mapping[str, GroupSpec]) -> dict[Any, tuple[str, int]]:
    """Every agent (by name and by the env's own id) -> (group, position in the group)."""
    where: dict[Any, tuple[str, int]] = {}
    for name, group in groups.items():
        for i, (agent, env_agent) in enumerate(zip(group.agents, group.env_agents)):
            where[agent] = (name, i)
            where[env_agent] = (name, i)
    return where
