"""Optional transforms of a vector's outputs: observation and reward normalization, frame stacking.

A recipe lists them under its env, applied in order to what every
:class:`~lightmarl.envs.pettingzoo.VecEnv` returns (in-process, worker processes or VMAS)::

    env:
      env_fn: mpe2.simple_spread_v3.parallel_env
      transforms:
        - class_path: lightmarl.envs.transforms.ObservationNorm
        - class_path: lightmarl.envs.transforms.RewardNorm
          init_args: {gamma: 0.99}
        - class_path: lightmarl.envs.transforms.FrameStack
          init_args: {num_frames: 4}

Two kinds of state, kept apart:

* **statistics** (running means and variances) belong to the :class:`VecTransform` object of
  the recipe. Every vector built from the recipe shares them: training vectors update them,
  evaluation vectors read them frozen. They are saved in the model checkpoint
  (:func:`transforms_state_dict`) and restored on resume and in ``validate --ckpt_path``.
* **per-vector memory** (the last frames of each agent, each agent's discounted return) belongs
  to the :class:`BoundTransform` that :meth:`VecTransform.bind` makes for one vector.

Transforms run in the training process on the vector's torch outputs
(:class:`TransformedVecEnv`), so env worker processes stay torch-free. The spec a policy is built
from, ``EnvConfig.spec()``, is the transformed one (frame stacking widens observations).
Transforms apply to agent groups, never to the global ``state`` of the root.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from tensordict import TensorDict

from lightmarl import keys
from lightmarl.envs.spec import EnvSpec, GroupSpec

if TYPE_CHECKING:
    from lightmarl.envs.pettingzoo import VecEnv

#: what a vector's ``reset`` / ``step`` return: group name (or ``ROOT``) -> key -> tensor ``[num_envs, agents, ...]``
Outputs = dict[str, dict[str, torch.Tensor]]


class BoundTransform(ABC):
    """One transform at work on one vector: holds that vector's memory, if any.

    Both methods replace entries of the given dicts (never write into the tensors they hold,
    which may be the vector's own buffers).
    """

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

    Subclasses say how the spec changes (:meth:`transform_spec`), make the per-vector
    :class:`BoundTransform` (:meth:`bind`) and, when they learn statistics, save and load them.

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

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        if state:
            raise ValueError(f"{self.field}: it keeps no statistics, but the checkpoint has {sorted(state)}")


class RunningMeanStd:
    """Mean and variance of every sample seen so far, updated batch by batch (Chan et al. 1979), in float64.

    Args:
        shape: shape of one sample.
    """

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(shape)
        self.mean = torch.zeros(self.shape, dtype=torch.float64)
        self.var = torch.ones(self.shape, dtype=torch.float64)
        self.count = 0

    def update(self, samples: torch.Tensor) -> None:
        """Fold in ``samples`` ``[n, *shape]``."""
        n = samples.shape[0]
        if n == 0:
            return
        samples = samples.to(torch.float64)
        batch_mean = samples.mean(0)
        batch_var = samples.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.var = (self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)) / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count}

    def load_state_dict(self, state: Mapping[str, Any], where: str) -> None:
        mean, var = torch.as_tensor(state["mean"]), torch.as_tensor(state["var"])
        if tuple(mean.shape) != self.shape or tuple(var.shape) != self.shape:
            raise ValueError(
                f"{where}: the checkpoint's statistics have shape {tuple(mean.shape)}, expected {self.shape}"
            )
        self.mean, self.var, self.count = mean.to(torch.float64), var.to(torch.float64), int(state["count"])


class _GroupStatistics(VecTransform):
    """A transform that keeps one :class:`RunningMeanStd` per group (created when it first sees the spec)."""

    def __init__(self, groups: list[str] | None = None) -> None:
        super().__init__(groups)
        self.statistics: dict[str, RunningMeanStd] = {}

    @abstractmethod
    def sample_shape(self, group: GroupSpec) -> tuple[int, ...]:
        """Shape of one sample of ``group``'s statistics."""

    def ensure_statistics(self, spec: EnvSpec) -> None:
        for group in self.selected(spec):
            shape = self.sample_shape(group)
            known = self.statistics.get(group.name)
            if known is None:
                self.statistics[group.name] = RunningMeanStd(shape)
            elif known.shape != shape:
                raise ValueError(
                    f"{self.field}: group {group.name!r} has statistics of shape {known.shape}, but env "
                    f"{spec.name!r} gives it shape {shape}"
                )

    def transform_spec(self, spec: EnvSpec) -> EnvSpec:
        self.ensure_statistics(spec)
        return spec

    def state_dict(self) -> dict[str, Any]:
        return {"statistics": {g: s.state_dict() for g, s in self.statistics.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = dict(state.get("statistics", {}))
        if self.statistics and set(saved) != set(self.statistics):
            raise ValueError(
                f"{self.field}: the checkpoint has statistics of groups {sorted(saved)}, this env of {sorted(self.statistics)}"
            )
        for group, values in saved.items():
            stats = self.statistics.get(group) or RunningMeanStd(torch.as_tensor(values["mean"]).shape)
            stats.load_state_dict(values, f"{self.field}, group {group!r}")
            self.statistics[group] = stats


class ObservationNorm(_GroupStatistics):
    """Observations standardized per feature with a running mean and std, per group.

    ``(observation - mean) / sqrt(var + epsilon)``, clipped to ``[-clip, clip]``, like the
    observation half of Stable-Baselines3's ``VecNormalize``. The statistics are per group and
    per observation entry, updated (in training vectors only) from the observations the
    policies are about to see, of present agents only (``valid``); every vector built from the
    recipe reads the same statistics. Absent agents' observations stay zero.

    Args:
        clip: bound on the normalized values (``None``: no clipping).
        epsilon: added to the variance before the square root.
        groups: the agent groups to normalize (default: every group).
    """

    def __init__(self, clip: float | None = 10.0, epsilon: float = 1e-8, groups: list[str] | None = None) -> None:
        super().__init__(groups)
        if clip is not None and not clip > 0:
            raise ValueError(f"{self.field}.clip: expected a positive number or null, got {clip!r}")
        if not epsilon > 0:
            raise ValueError(f"{self.field}.epsilon: expected a positive number, got {epsilon!r}")
        self.clip = clip
        self.epsilon = epsilon

    def sample_shape(self, group: GroupSpec) -> tuple[int, ...]:
        return tuple(group.observation_shape)

    def bind(self, spec: EnvSpec, num_envs: int, training: bool) -> BoundTransform:
        self.ensure_statistics(spec)
        return _BoundObservationNorm(self, [g.name for g in self.selected(spec)], training)

    def normalize(self, group: str, observation: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """``observation`` ``[num_envs, agents, *shape]`` normalized; zero where ``present`` is False."""
        stats = self.statistics[group]
        mean = stats.mean.to(observation.dtype)
        inverse_std = (stats.var + self.epsilon).rsqrt().to(observation.dtype)
        normalized = (observation - mean) * inverse_std
        if self.clip is not None:
            normalized = normalized.clamp(-self.clip, self.clip)
        mask = present.view(*present.shape, *([1] * (observation.dim() - present.dim())))
        return normalized * mask


class _BoundObservationNorm(BoundTransform):
    def __init__(self, transform: ObservationNorm, groups: list[str], training: bool) -> None:
        self.transform = transform
        self.groups = groups
        self.training = training
        self.present: dict[str, torch.Tensor] = {}  # who saw the current observations (acts at the next step)

    def _current(self, current: Outputs) -> None:
        for g in self.groups:
            entries = current[g]
            valid = entries[keys.VALID]
            if self.training:
                self.transform.statistics[g].update(entries[keys.OBSERVATION][valid])
            entries[keys.OBSERVATION] = self.transform.normalize(g, entries[keys.OBSERVATION], valid)
            self.present[g] = valid

    def reset(self, current: Outputs) -> None:
        self._current(current)

    def step(self, nxt: Outputs, current: Outputs, ended: torch.Tensor) -> None:
        acted = dict(self.present)
        self._current(current)  # statistics first: both observations of the step use the same ones
        for g in self.groups:
            nxt[g][keys.OBSERVATION] = self.transform.normalize(g, nxt[g][keys.OBSERVATION], acted[g])


class RewardNorm(_GroupStatistics):
    """Rewards divided by a running std of each agent's discounted return, per group.

    Each training vector keeps every agent's discounted return ``R <- gamma * R + reward``
    (restarted when the agent is done); the std of those returns, over present agents and all
    steps so far, scales the rewards: ``reward / sqrt(var(R) + epsilon)``, clipped to
    ``[-clip, clip]``, like the reward half of Stable-Baselines3's ``VecNormalize``. Rewards are
    not centred, so a reward of 0 stays 0. Evaluation vectors pass rewards through unchanged:
    evaluation reports the env's own returns. Training vectors keep the env's reward beside the
    scaled one (``keys.ENV_REWARD``), so the collector's episode returns
    (``collect/<binding>/episode_return``) are the env's own too.

    Args:
        gamma: discount of the returns whose spread sets the scale; use the algorithm's.
        clip: bound on the scaled rewards (``None``: no clipping).
        epsilon: added to the variance before the square root.
        groups: the agent groups to scale (default: every group).
    """

    def __init__(
        self, gamma: float = 0.99, clip: float | None = 10.0, epsilon: float = 1e-8, groups: list[str] | None = None
    ) -> None:
        super().__init__(groups)
        if not 0 <= gamma <= 1:
            raise ValueError(f"{self.field}.gamma: expected a number in [0, 1], got {gamma!r}")
        if clip is not None and not clip > 0:
            raise ValueError(f"{self.field}.clip: expected a positive number or null, got {clip!r}")
        if not epsilon > 0:
            raise ValueError(f"{self.field}.epsilon: expected a positive number, got {epsilon!r}")
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon

    def sample_shape(self, group: GroupSpec) -> tuple[int, ...]:
        return ()

    def bind(self, spec: EnvSpec, num_envs: int, training: bool) -> BoundTransform:
        self.ensure_statistics(spec)
        groups = {g.name: g.num_agents for g in self.selected(spec)}
        return _BoundRewardNorm(self, groups, num_envs) if training else _Identity()

    def scale(self, group: str, reward: torch.Tensor) -> torch.Tensor:
        stats = self.statistics[group]
        scaled = reward * float((stats.var + self.epsilon).rsqrt())
        return scaled if self.clip is None else scaled.clamp(-self.clip, self.clip)


class _BoundRewardNorm(BoundTransform):
    def __init__(self, transform: RewardNorm, groups: dict[str, int], num_envs: int) -> None:
        self.transform = transform
        self.returns = {g: torch.zeros(num_envs, agents, dtype=torch.float64) for g, agents in groups.items()}
        self.present: dict[str, torch.Tensor] = {}

    def reset(self, current: Outputs) -> None:
        for g, returns in self.returns.items():
            returns.zero_()
            self.present[g] = current[g][keys.VALID]

    def step(self, nxt: Outputs, current: Outputs, ended: torch.Tensor) -> None:
        for g, returns in self.returns.items():
            entries, acted = nxt[g], self.present[g]
            returns.mul_(self.transform.gamma).add_(entries[keys.REWARD].to(torch.float64) * acted)
            self.transform.statistics[g].update(returns[acted])
            entries.setdefault(keys.ENV_REWARD, entries[keys.REWARD])  # episode statistics report the env's own
            entries[keys.REWARD] = self.transform.scale(g, entries[keys.REWARD])
            returns.masked_fill_(entries[keys.DONE], 0.0)
            self.present[g] = current[g][keys.VALID]


class _Identity(BoundTransform):
    def reset(self, current: Outputs) -> None:
        """Leaves the outputs as they are."""

    def step(self, nxt: Outputs, current: Outputs, ended: torch.Tensor) -> None:
        """Leaves the outputs as they are."""


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


class _BoundFrameStack(BoundTransform):
    def __init__(self, transform: FrameStack, groups: dict[str, GroupSpec], num_envs: int) -> None:
        self.transform = transform
        k = transform.num_frames
        # Per group: frames [num_envs, agents, num_frames, *observation_shape], oldest first.
        self.frames = {g: torch.zeros(num_envs, s.num_agents, k, *s.observation_shape) for g, s in groups.items()}
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


def transformed_spec(spec: EnvSpec, transforms: Sequence[VecTransform]) -> EnvSpec:
    """``spec`` after ``transforms``, in order."""
    for transform in transforms:
        spec = transform.transform_spec(spec)
    return spec


class TransformedVecEnv:
    """A :class:`~lightmarl.envs.pettingzoo.VecEnv` whose outputs pass through ``transforms``, in order.

    Implements the same protocol as the vector it wraps, with the transformed :attr:`spec`.

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

    def observation_td(self) -> TensorDict:
        from lightmarl.envs.pettingzoo import observation_td

        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> Any:
        return self.base.render(index)

    def close(self) -> None:
        self.base.close()


def transforms_state_dict(transforms: Sequence[VecTransform]) -> list[dict[str, Any]]:
    """The transforms' statistics for a checkpoint: per transform its class name and state."""
    return [{"transform": type(t).__name__, "state": t.state_dict()} for t in transforms]


def load_transforms_state_dict(transforms: Sequence[VecTransform], states: Sequence[Mapping[str, Any]]) -> None:
    """Restore :func:`transforms_state_dict`'s output; the checkpoint's transforms must be the recipe's.

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


__all__ = [
    "BoundTransform",
    "FrameStack",
    "ObservationNorm",
    "RewardNorm",
    "RunningMeanStd",
    "TransformedVecEnv",
    "VecTransform",
    "load_transforms_state_dict",
    "transformed_spec",
    "transforms_state_dict",
]
