"""What every vector of env copies offers the collector and evaluation, whatever simulator is behind it.

[`VecEnv`][lightmarl.envs.base.VecEnv] is the protocol (PettingZoo in process or in worker processes, VMAS, a
[`TransformedVecEnv`][lightmarl.envs.transforms.base.TransformedVecEnv] over any of them); [`PhasedVecEnv`][lightmarl.envs.base.PhasedVecEnv]
and [`AsyncVecEnv`][lightmarl.envs.base.AsyncVecEnv] are its optional asynchronous part (a vector whose copies come in
phases that step while the policy computes another phase's actions). [`observation_td`][lightmarl.envs.base.VecEnv.observation_td] is
the one way a vector's arrays become the TensorDict the policies read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

import torch
from tensordict import TensorDict

from lightmarl import keys
from lightmarl.envs.layout import ROOT
from lightmarl.envs.spec import EnvSpec

#: what a vector's ``reset`` / ``step`` return: group name (or `ROOT`)
#: -> key -> tensor ``[num_envs, agents_in_group, ...]``
Outputs: TypeAlias = dict[str, dict[str, torch.Tensor]]


@runtime_checkable
class VecEnv(Protocol):
    """What the collector and evaluation need from a vector of env copies.

    Implemented by [`InProcessVecEnv`][lightmarl.envs.runners.inprocess.InProcessVecEnv] (PettingZoo's
    [`ParallelVecEnv`][lightmarl.envs.pettingzoo.vector.ParallelVecEnv]), [`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv]
    (worker processes), [`VmasVecEnv`][lightmarl.envs.vmas.VmasVecEnv] and
    [`TransformedVecEnv`][lightmarl.envs.transforms.base.TransformedVecEnv]. Copy ``i`` is reset with
    ``seeds[i]``; the same seeds and actions give the same trajectories. Where
    ``spec.state_shape`` is set, ``current`` and a step's results also hold the env's global
    state under `ROOT` (``{"state": [num_envs, *state_shape]}``).
    """

    spec: EnvSpec
    num_envs: int
    seeds: list[int]
    current: Outputs

    def reset(self) -> Outputs:
        """Reset every copy; the first observations (also kept as `current`)."""
        ...

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[Outputs, torch.Tensor]:
        """Step every copy with ``actions`` (group -> ``[num_envs, agents_in_group, ...]``).

        Returns:
            ``(next, episode_end)``: per group ``observation`` (the final one where the episode
            ended), ``reward``, ``terminated``, ``truncated``, ``done``; and a ``[num_envs]``
            bool tensor of copies that were reset (`current` then holds their reset
            observations).
        """
        ...

    def observation_td(self) -> TensorDict:
        """What the policies see now (see [`observation_td`][lightmarl.envs.base.VecEnv.observation_td])."""
        ...

    def render(self, index: int = 0) -> Any:
        """An RGB frame of copy ``index``, where the env draws one."""
        ...

    def close(self) -> None:
        """Release the copies (and worker processes); idempotent."""
        ...


@runtime_checkable
class AsyncVecEnv(VecEnv, Protocol):
    """A [`VecEnv`][lightmarl.envs.base.VecEnv] whose step can be started and awaited separately (a phase of worker processes).

    Between [`step_async`][lightmarl.envs.base.AsyncVecEnv.step_async] and [`step_wait`][lightmarl.envs.base.AsyncVecEnv.step_wait] the caller does other work, e.g. the policy's
    forward pass for another phase. Steps of different phases must be awaited in the order they
    were sent.
    """

    def step_async(self, actions: dict[str, torch.Tensor]) -> None:
        """Start a step with ``actions``."""
        ...

    def step_wait(self) -> tuple[Outputs, torch.Tensor]:
        """The results of the step [`step_async`][lightmarl.envs.base.AsyncVecEnv.step_async] started, as [`VecEnv.step`][lightmarl.envs.base.VecEnv.step] returns them."""
        ...


@runtime_checkable
class PhasedVecEnv(VecEnv, Protocol):
    """A [`VecEnv`][lightmarl.envs.base.VecEnv] whose copies come in consecutive phases stepped in alternation.

    The collector sends one phase's actions and computes the next phase's while the first
    steps, so the policy's forward pass overlaps env stepping.
    """

    def phases(self) -> list[Any]:
        """The phases (each an [`AsyncVecEnv`][lightmarl.envs.base.AsyncVecEnv] over its own copies when there are several), in order."""
        ...


@runtime_checkable
class ResumableVecEnv(VecEnv, Protocol):
    """A [`VecEnv`][lightmarl.envs.base.VecEnv] that can put its copies back mid-episode, e.g. when a run resumes from a checkpoint.

    Each copy's episode ``k`` is reset with `episode_seed` of the
    copy's seed and ``k``; `restore` resets the copy for its episode in flight and fast-forwards it through
    the actions the episode was stepped with so far. PettingZoo vectors (in-process and in worker
    processes, and transforms over them) are resumable; VMAS vectors are not.
    """

    def resume_state(self) -> dict[str, Any] | None:
        """What `restore` needs besides the episodes and actions (the observations the policies
        see next, transforms' per-copy memory), as tensors; ``None`` where the vector cannot be restored."""
        ...

    def restore(
        self, episodes: Sequence[int], actions: Sequence[dict[str, torch.Tensor]], state: dict[str, Any]
    ) -> list[int]:
        """Bring every copy back to where `resume_state` was taken.

        Args:
            episodes: per copy, the number of its episode in flight (0: the first).
            actions: per copy, group -> ``[steps, agents_in_group, ...]``: the actions of that
                episode so far.
            state: what `resume_state` returned.

        Returns:
            The copies whose fast-forward did not reproduce the saved observations (an env that is
            not deterministic given its seed and actions); empty when the restore is exact.
        """
        ...


class FastForwardingVecEnv:
    """The `ResumableVecEnv` half of vectors whose copies fast-forward their episodes in flight.

    A subclass implements `_fast_forward`; this class keeps what the policies see next as the
    state to check the fast-forward against.
    """

    current: Outputs

    def resume_state(self) -> dict[str, Any]:
        """The observations the policies see next, which `restore` checks its fast-forward against."""
        return {"current": clone_outputs(self.current)}

    def restore(
        self, episodes: Sequence[int], actions: Sequence[dict[str, torch.Tensor]], state: dict[str, Any]
    ) -> list[int]:
        """See `ResumableVecEnv.restore`."""
        diverged, self.current = self._fast_forward(episodes, actions)
        return sorted(set(diverged) | set(differing_copies(self.current, state["current"])))

    def _fast_forward(
        self, episodes: Sequence[int], actions: Sequence[dict[str, torch.Tensor]]
    ) -> tuple[list[int], Outputs]:
        """Reset each copy for its episode ``episodes[i]`` and step it with ``actions[i]``: the copies whose
        episode ended before the last action, and the observations after the fast-forward."""
        raise NotImplementedError


def clone_outputs(outputs: Outputs) -> Outputs:
    """A copy of a vector's arrays that later steps cannot change."""
    return {g: {k: v.clone() for k, v in entries.items()} for g, entries in outputs.items()}


def differing_copies(restored: Outputs, saved: Outputs) -> list[int]:
    """The env copies (first dim) where any array of ``restored`` differs from ``saved``."""
    differ: torch.Tensor | None = None
    for g, entries in saved.items():
        for k, value in entries.items():
            other = restored.get(g, {}).get(k)
            rows = (
                torch.ones(value.shape[0], dtype=torch.bool)
                if other is None or other.shape != value.shape
                else (other != value).reshape(value.shape[0], -1).any(-1)
            )
            differ = rows if differ is None else differ | rows
    return [] if differ is None else differ.nonzero().flatten().tolist()


def observation_td(spec: EnvSpec, current: Outputs, num_envs: int, agent_ids: dict[str, torch.Tensor]) -> TensorDict:
    """The policies' view of a vector's ``current`` arrays, root batch ``[num_envs]``.

    Per group ``observation``, ``valid``, ``agent_id`` (index in ``possible_agents``, so scripted
    policies can tell agents apart) and ``action_mask`` where the env has one; the global
    ``state`` at the root where the vector records it.

    Args:
        spec: the vector's spec.
        current: the vector's current arrays.
        num_envs: env copies in the vector.
        agent_ids: a cache (group name -> ids tensor) the caller keeps between calls.
    """
    groups = {}
    for g in spec.groups.values():
        entries = dict(current[g.name])
        ids = agent_ids.get(g.name)
        if ids is None:
            ids = agent_ids[g.name] = torch.tensor(g.agent_ids, dtype=torch.int64)
        entries[keys.AGENT_ID] = ids.expand(num_envs, g.num_agents)
        groups[g.name] = TensorDict(entries, batch_size=[num_envs, g.num_agents])
    if ROOT in current:  # the env's global state, where the vector records it
        groups[keys.STATE] = current[ROOT][keys.STATE]
    return TensorDict(groups, batch_size=[num_envs])
