"""The transform interface ([`VecTransform`][lightmarl.envs.transforms.base.VecTransform], `BoundTransform`), the transformed vector and checkpoint state."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from tensordict import TensorDict

from lightmarl.envs.base import Outputs, VecEnv, clone_outputs, observation_td
from lightmarl.envs.spec import EnvSpec, GroupSpec


class BoundTransform(ABC):
    """One transform at work on one vector: holds that vector's memory, if any.

    Both methods replace entries of the given dicts (never write into the tensors they hold,
    which may be the vector's own buffers). The attributes named in `per_copy_state`
    (group -> tensor dicts: stacked frames, running returns, ...) are the memory a resumed run
    needs back ([`state_dict`][lightmarl.envs.transforms.base.VecTransform.state_dict]).
    """

    #: attributes holding per-copy memory, each a dict group -> tensor.
    per_copy_state: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """The per-copy memory (copies of `per_copy_state`), for a resumed run."""
        return {name: {g: t.clone() for g, t in getattr(self, name).items()} for name in self.per_copy_state}

    def load_state_dict(self, state: Mapping[str, Mapping[str, torch.Tensor]]) -> None:
        for name in self.per_copy_state:
            setattr(self, name, {g: t.clone() for g, t in state[name].items()})

    @abstractmethod
    def reset(self, current: Outputs) -> None:
        """Transform the first observations after the vector's ``reset``."""

    @abstractmethod
    def step(self, nxt: Outputs, current: Outputs, ended: torch.Tensor) -> None:
        """Transform a step's results (``nxt``) and the observations for the next step (``current``).

        Args:
            nxt: the step's results: ``observation`` (final where an episode ended), ``reward``,
                ``terminated``, ``truncated``, ``done`` per group.
            current: what the policies see next (``observation``, ``valid``, ...), reset where
                an episode ended.
            ended: ``[num_envs]`` bool, env copies whose episode ended and were reset.
        """


class VecTransform(ABC):
    """A transform of a vector's outputs, configured in a recipe by ``class_path``.

    Subclasses say how the spec changes ([`transform_spec`][lightmarl.envs.transforms.base.VecTransform.transform_spec]), make the per-vector
    `BoundTransform` ([`bind`][lightmarl.envs.transforms.base.VecTransform.bind]) and, when they learn statistics, save and load them.

    Args:
        groups: the agent groups it applies to (default: every group).
    """

    def __init__(self, groups: list[str] | None = None) -> None:
        if groups is not None and (isinstance(groups, str) or not all(isinstance(g, str) for g in groups)):
            raise ValueError(f"{self.field}.groups: expected a list of group names, got {groups!r}")
        self.groups = None if groups is None else list(groups)

    @property
    def field(self) -> str:
        """How messages name this transform in a recipe."""
        return f"env.transforms[{type(self).__name__}]"

    def selected(self, spec: EnvSpec) -> list[GroupSpec]:
        """The groups of ``spec`` this transform applies to; unknown names in ``groups`` raise."""
        if self.groups is None:
            return list(spec.groups.values())
        unknown = [g for g in self.groups if g not in spec.groups]
        if unknown:
            raise ValueError(
                f"{self.field}.groups: env {spec.name!r} has no group {unknown}; its groups are {list(spec.groups)}"
            )
        return [spec.groups[g] for g in self.groups]

    def transform_spec(self, spec: EnvSpec) -> EnvSpec:
        """The spec of the transformed outputs (default: unchanged, after checking ``groups``)."""
        self.selected(spec)
        return spec

    @abstractmethod
    def bind(self, spec: EnvSpec, num_envs: int, training: bool) -> BoundTransform:
        """This transform at work on a vector of ``num_envs`` copies whose outputs match ``spec``.

        Args:
            spec: the spec of this transform's input (after the transforms before it).
            num_envs: env copies in the vector.
            training: ``True``: statistics are updated; ``False`` (evaluation): frozen.
        """

    def state_dict(self) -> dict[str, Any]:
        """Learned statistics, for checkpoints (plain dicts of tensors and numbers)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """``{class_path, init_args}`` that rebuild this transform: its constructor's arguments, read
        from the attributes of the same names (checkpoints and exports record it beside the statistics).

        Raises:
            ValueError: when a constructor argument is not kept as an attribute of that name.
        """
        cls = type(self)
        init_args = {}
        for name, parameter in inspect.signature(cls.__init__).parameters.items():
            if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            if not hasattr(self, name):
                raise ValueError(
                    f"{self.field}: cannot record argument {name!r}: the transform keeps no attribute of that name"
                )
            value = getattr(self, name)
            init_args[name] = list(value) if isinstance(value, tuple) else value
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": init_args}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what [`state_dict`][lightmarl.envs.transforms.base.VecTransform.state_dict] returned."""
        if state:
            raise ValueError(f"{self.field}: it keeps no statistics, but the checkpoint has {sorted(state)}")


def transformed_spec(spec: EnvSpec, transforms: Sequence[VecTransform]) -> EnvSpec:
    """``spec`` after ``transforms``, in order."""
    for transform in transforms:
        spec = transform.transform_spec(spec)
    return spec


class TransformedVecEnv:
    """A [`VecEnv`][lightmarl.envs.base.VecEnv] whose outputs pass through ``transforms``, in order.

    Implements the same protocol as the vector it wraps, with the transformed `spec`.

    Args:
        base: the vector (in-process, worker processes, VMAS, ...).
        transforms: the recipe's transforms (their statistics are shared with every other
            vector built from them).
        training: update the transforms' statistics (training) or read them frozen (evaluation;
            reward normalization then passes rewards through).
    """

    def __init__(self, base: VecEnv, transforms: Sequence[VecTransform], training: bool = True) -> None:
        self.base = base
        self.transforms = list(transforms)
        self.training = training
        spec = base.spec
        self.bound: list[BoundTransform] = []
        for transform in transforms:
            self.bound.append(transform.bind(spec, base.num_envs, training))
            spec = transform.transform_spec(spec)
        self.spec = spec
        self.num_envs = base.num_envs
        self.seeds = base.seeds
        self.current: Outputs = {}
        self._agent_ids: dict[str, torch.Tensor] = {}

    @staticmethod
    def _copy(outputs: Outputs) -> Outputs:
        return {g: dict(entries) for g, entries in outputs.items()}

    def reset(self) -> Outputs:
        current = self._copy(self.base.reset())
        for bound in self.bound:
            bound.reset(current)
        self.current = current
        return current

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[Outputs, torch.Tensor]:
        return self._transform_step(*self.base.step(actions))

    def step_async(self, actions: dict[str, torch.Tensor]) -> None:
        """Where the base vector steps asynchronously (a phase of worker processes): start a step."""
        cast(Any, self.base).step_async(actions)

    def step_wait(self) -> tuple[Outputs, torch.Tensor]:
        return self._transform_step(*cast(Any, self.base).step_wait())

    def phases(self) -> list[TransformedVecEnv]:
        """The base vector's phases (if it has more than one), each with transforms of its own
        (their statistics shared, as between all vectors of a recipe)."""
        split = getattr(self.base, "phases", None)
        parts = split() if callable(split) else [self.base]
        if len(parts) == 1:
            return [self]
        return [TransformedVecEnv(part, self.transforms, self.training) for part in parts]

    def _transform_step(self, nxt: Outputs, ended: torch.Tensor) -> tuple[Outputs, torch.Tensor]:
        nxt, current = self._copy(nxt), self._copy(self.base.current)
        for bound in self.bound:
            bound.step(nxt, current, ended)
        self.current = current
        return nxt, ended

    def resume_state(self) -> dict[str, Any] | None:
        """The base vector's, the transformed observations, every transform's per-copy memory and
        statistics (under DDP each process has its own); ``None`` where the base vector cannot be restored."""
        base = getattr(self.base, "resume_state", lambda: None)()
        if base is None:
            return None
        return {
            "base": base,
            "current": clone_outputs(self.current),
            "bound": [b.state_dict() for b in self.bound],
            "statistics": transforms_state_dict(self.transforms),
        }

    def restore(
        self, episodes: Sequence[int], actions: Sequence[dict[str, torch.Tensor]], state: dict[str, Any]
    ) -> list[int]:
        """The base vector fast-forwards; the transforms take their memory and observations from ``state``
        (fast-forwarding through them would count the re-stepped steps in their statistics twice)."""
        differing = cast(Any, self.base).restore(episodes, actions, state["base"])
        load_transforms_state_dict(self.transforms, state["statistics"])
        for bound, saved in zip(self.bound, state["bound"]):
            bound.load_state_dict(saved)
        self.current = clone_outputs(state["current"])
        return differing

    def observation_td(self) -> TensorDict:
        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> Any:
        return self.base.render(index)

    def close(self) -> None:
        self.base.close()


def transforms_state_dict(transforms: Sequence[VecTransform]) -> list[dict[str, Any]]:
    """The transforms' statistics for a checkpoint: per transform its class name and state."""
    return [{"transform": type(t).__name__, "state": t.state_dict()} for t in transforms]


def load_transforms_state_dict(transforms: Sequence[VecTransform], states: Sequence[Mapping[str, Any]]) -> None:
    """Restore `transforms_state_dict`'s output; the checkpoint's transforms must be the recipe's.

    Raises:
        ValueError: when the checkpoint was trained with other transforms (a policy would see
            observations unlike those it learned from).
    """
    saved = [s["transform"] for s in states]
    configured = [type(t).__name__ for t in transforms]
    if saved != configured:
        raise ValueError(
            f"env.transforms: the checkpoint was trained with transforms {saved}, the recipe has {configured}; "
            "use the recipe's env.transforms of the run that wrote the checkpoint"
        )
    for transform, state in zip(transforms, states):
        transform.load_state_dict(state["state"])
