"""What a recipe's ``model.env`` entry must provide, whatever simulator is behind it.

[`PettingZooEnvConfig`][lightmarl.envs.pettingzoo.config.PettingZooEnvConfig] is the default (a recipe's ``env:``
without ``class_path``); others are selected by ``class_path``, e.g.
``lightmarl.envs.vmas.VmasEnvConfig``. A subclass says how to build its env's own spec and
vector; this base adds the recipe's `transforms` on top, so every env
family gets the same transforms, the same way.

It sits above `transforms` (it wraps vectors in them), which sits above
the vector protocol of `base`; that is why it is not in ``base``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lightmarl.envs.base import VecEnv
from lightmarl.envs.spec import EnvSpec
from lightmarl.envs.transforms import (
    FrameTransform,
    TransformedVecEnv,
    VecTransform,
    split_frame_transforms,
    transformed_spec,
)


class EnvConfig(ABC):
    """An env recipe: builds the vectors of env copies that training and evaluation step.

    Subclasses are dataclasses with (at least) the fields ``num_envs``, ``transforms`` and
    ``info_fields``, and build their vectors' specs with [`with_info_fields`][lightmarl.envs.config.EnvConfig.with_info_fields].

    Attributes:
        num_envs: env copies stepped together by each training process.
        transforms: [`VecTransform`][lightmarl.envs.transforms.base.VecTransform] objects applied, in order,
            to every vector's outputs.
        info_fields: numeric fields of the env's per-agent ``infos`` (e.g. ``[score]``) that the
            vectors record at every step (``EnvSpec.info_fields``); evaluation reports each
            one per binding (the value an agent's info held at the last step of the episode
            that reported it). Empty (the default): infos are not read.
    """

    num_envs: int
    transforms: list[VecTransform]
    info_fields: list[str]

    #: whether [`make_base_vector`][lightmarl.envs.config.EnvConfig.make_base_vector] applies the leading image transforms (``Grayscale``,
    #: ``Resize``: `split_frame_transforms`) where the env runs;
    #: families that cannot refuse them when the recipe is built.
    applies_frame_transforms = False

    @property
    @abstractmethod
    def name(self) -> str:
        """A readable env name for messages and logs."""

    @abstractmethod
    def base_spec(self) -> EnvSpec:
        """The env's own groups and spaces (before transforms), checked: a broken env fails here."""

    @abstractmethod
    def make_base_vector(self, seed: int, num_envs: int, evaluation: bool) -> VecEnv:
        """``num_envs`` env copies seeded from ``seed``, without the transforms that run on a
        vector's outputs (the leading image transforms, where the family applies them, are applied).

        Args:
            seed: base seed (copy ``i`` of a vector of separate envs is reset with ``seed + i``).
            num_envs: env copies.
            evaluation: the vector plays evaluation episodes (e.g. in-process, not in workers).
        """

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """Plain data naming the env (recorded in checkpoints)."""

    def spec(self) -> EnvSpec:
        """What the policies see: the env's spec after the transforms (e.g. stacked frames)."""
        return transformed_spec(self.base_spec(), self.transforms)

    def make_vector(self, seed: int, num_envs: int | None = None, *, evaluation: bool = False) -> VecEnv:
        """``num_envs`` (default ``self.num_envs``) env copies with the transforms applied.

        Args:
            seed: base seed of the copies.
            num_envs: env copies (default ``self.num_envs``).
            evaluation: a vector for evaluation episodes: the transforms' statistics are read,
                not updated, and rewards are the env's own.
        """
        count = self.num_envs if num_envs is None else num_envs
        vector = self.make_base_vector(seed, count, evaluation)
        rest = self.vector_transforms()
        if not rest:
            return vector
        return TransformedVecEnv(vector, rest, training=not evaluation)

    def make_recording_vector(self, seed: int, record: Callable[[Any, Callable[[Any], Any]], Any]) -> VecEnv:
        """One evaluation copy, seeded ``seed``, whose frames can be recorded; transforms applied frozen.

        The env object that the vector steps is handed to ``record(env, render)`` (``render(env)``
        draws its current RGB frame) and the vector steps what ``record`` returns instead, e.g. a
        `FrameRecorder`, so frames are drawn before the vector's
        auto-reset and an episode's final state is kept.

        Raises:
            ValueError: naming the env when it cannot draw RGB frames.
        """
        vector = self.make_base_recording_vector(seed, record)
        rest = self.vector_transforms()
        if not rest:
            return vector
        return TransformedVecEnv(vector, rest, training=False)

    def make_base_recording_vector(self, seed: int, record: Callable[[Any, Callable[[Any], Any]], Any]) -> VecEnv:
        """[`make_recording_vector`][lightmarl.envs.config.EnvConfig.make_recording_vector] without the transforms; env families that render override it."""
        raise ValueError(f"evaluation video: env {self.name!r} ({type(self).__name__}) cannot record RGB frames")

    def with_info_fields(self, spec: EnvSpec) -> EnvSpec:
        """``spec`` with this config's `info_fields`, so that vectors built on it record them."""
        return replace(spec, info_fields=tuple(self.info_fields))

    def check_info_fields(self) -> None:
        """Fail clearly when ``info_fields`` is not a list of distinct, non-empty names."""
        fields = self.info_fields
        if not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) and f for f in fields):
            raise ValueError(f"env.info_fields: expected a list of info field names (e.g. [score]), got {fields!r}")
        repeated = sorted({f for f in fields if list(fields).count(f) > 1})
        if repeated:
            raise ValueError(f"env.info_fields: {repeated} named more than once")

    def check_transforms(self) -> None:
        """Fail clearly when ``transforms`` holds something that is not a transform."""
        if not isinstance(self.transforms, list):
            raise ValueError(f"env.transforms: expected a list of transforms, got {self.transforms!r}")
        for i, transform in enumerate(self.transforms):
            if not isinstance(transform, VecTransform):
                raise ValueError(
                    f"env.transforms[{i}]: expected a lightmarl.envs.transforms.VecTransform "
                    f"(e.g. class_path: lightmarl.envs.transforms.ObservationNorm), got {transform!r}"
                )
        frames, _ = split_frame_transforms(self.transforms)
        if frames and not self.applies_frame_transforms:
            raise ValueError(
                f"env.transforms: {[type(t).__name__ for t in frames]} run where the env runs, which "
                f"{type(self).__name__} does not support (PettingZoo envs do)"
            )

    def frame_transforms(self) -> list[FrameTransform]:
        """The leading image transforms, applied where the env runs (by [`make_base_vector`][lightmarl.envs.config.EnvConfig.make_base_vector])."""
        return split_frame_transforms(self.transforms)[0]

    def vector_transforms(self) -> list[VecTransform]:
        """The transforms applied to a vector's outputs in the training process (all but the leading image ones)."""
        return split_frame_transforms(self.transforms)[1]
