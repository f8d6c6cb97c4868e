"""Observation and reward normalization with running statistics: [`ObservationNorm`][lightmarl.envs.transforms.normalization.ObservationNorm], [`RewardNorm`][lightmarl.envs.transforms.normalization.RewardNorm]."""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lightmarl import keys
from lightmarl.envs.base import Outputs
from lightmarl.envs.spec import EnvSpec, GroupSpec
from lightmarl.envs.transforms.base import BoundTransform, VecTransform


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
    """A transform that keeps one `RunningMeanStd` per group (created when it first sees the spec),
    and scales by ``1 / sqrt(var + epsilon)`` clipped to ``[-clip, clip]``."""

    def __init__(self, groups: list[str] | None, clip: float | None, epsilon: float) -> None:
        super().__init__(groups)
        if clip is not None and not clip > 0:
            raise ValueError(f"{self.field}.clip: expected a positive number or null, got {clip!r}")
        if not epsilon > 0:
            raise ValueError(f"{self.field}.epsilon: expected a positive number, got {epsilon!r}")
        self.clip = clip
        self.epsilon = epsilon
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
        super().__init__(groups, clip, epsilon)

    def sample_shape(self, group: GroupSpec) -> tuple[int, ...]:
        return tuple(group.observation_shape)

    def transform_spec(self, spec: EnvSpec) -> EnvSpec:
        """Normalized observations are float32 whatever the env's dtype (``uint8`` images included)."""
        self.ensure_statistics(spec)
        groups = dict(spec.groups)
        for group in self.selected(spec):
            groups[group.name] = dataclasses.replace(group, observation_dtype="float32")
        return dataclasses.replace(spec, groups=groups)

    def bind(self, spec: EnvSpec, num_envs: int, training: bool) -> BoundTransform:
        self.ensure_statistics(spec)
        return _BoundObservationNorm(self, [g.name for g in self.selected(spec)], training)

    def normalize(self, group: str, observation: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        """``observation`` ``[num_envs, agents, *shape]`` normalized; zero where ``present`` is False."""
        stats = self.statistics[group]
        if not observation.is_floating_point():  # uint8 images
            observation = observation.to(torch.float32)
        mean = stats.mean.to(observation.dtype)
        inverse_std = (stats.var + self.epsilon).rsqrt().to(observation.dtype)
        normalized = (observation - mean) * inverse_std
        if self.clip is not None:
            normalized = normalized.clamp(-self.clip, self.clip)
        mask = present.view(*present.shape, *([1] * (observation.dim() - present.dim())))
        return normalized * mask


class _BoundObservationNorm(BoundTransform):
    per_copy_state = ("present",)

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
                self.transform.statistics[g].update(entries[keys.OBSERVATION][valid].to(torch.float32))
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
        super().__init__(groups, clip, epsilon)
        if not 0 <= gamma <= 1:
            raise ValueError(f"{self.field}.gamma: expected a number in [0, 1], got {gamma!r}")
        self.gamma = gamma

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
    per_copy_state = ("returns", "present")

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
