"""What every vector of env copies offers the collector and evaluation, whatever simulator is behind it.

:class:`VecEnv` is the protocol (PettingZoo in process or in worker processes, VMAS, a
:class:`~lightmarl.envs.transforms.TransformedVecEnv` over any of them); :class:`PhasedVecEnv`
and :class:`AsyncVecEnv` are its optional asynchronous part (a vector whose copies come in
phases that step while the policy computes another phase's actions). :func:`observation_td` is
the one way a vector's arrays become the TensorDict the policies read.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias, runtime_checkable

import torch
from tensordict import TensorDict

from lightmarl import keys
from lightmarl.envs.layout import ROOT
from lightmarl.envs.spec import EnvSpec

#: what a vector's ``reset`` / ``step`` return: group name (or :data:`~lightmarl.envs.layout.ROOT`)
#: -> key -> tensor ``[num_envs, agents_in_group, ...]``
Outputs: TypeAlias = dict[str, dict[str, torch.Tensor]]


@runtime_checkable
class VecEnv(Protocol):
    """What the collector and evaluation need from a vector of env copies.

    Implemented by :class:`~lightmarl.envs.runners.inprocess.InProcessVecEnv` (PettingZoo's
    :class:`~lightmarl.envs.pettingzoo.vector.ParallelVecEnv`), :class:`~lightmarl.envs.runners.process.ProcessVecEnv`
    (worker processes), :class:`~lightmarl.envs.vmas.VmasVecEnv` and
    :class:`~lightmarl.envs.transforms.TransformedVecEnv`. Copy ``i`` is reset with
    ``seeds[i]``; the same seeds and actions give the same trajectories. Where
    ``spec.state_shape`` is set, ``current`` and a step's results also hold the env's global
    state under :data:`~lightmarl.envs.layout.ROOT` (``{"state": [num_envs, *state_shape]}``).
    """

    spec: EnvSpec
    num_envs: int
    seeds: list[int]
    current: Outputs

    def reset(self) -> Outputs:
        """Reset every copy; the first observations (also kept as :attr:`current`)."""
        ...

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[Outputs, torch.Tensor]:
        """Step every copy with ``actions`` (group -> ``[num_envs, agents_in_group, ...]``).

        Returns:
            ``(next, episode_end)``: per group ``observation`` (the final one where the episode
            ended), ``reward``, ``terminated``, ``truncated``, ``done``; and a ``[num_envs]``
            bool tensor of copies that were reset (:attr:`current` then holds their reset
            observations).
        """
        ...

    def observation_td(self) -> TensorDict:
        """What the policies see now (see :func:`observation_td`)."""
        ...

    def render(self, index: int = 0) -> Any:
        """An RGB frame of copy ``index``, where the env draws one."""
        ...

    def close(self) -> None:
        """Release the copies (and worker processes); idempotent."""
        ...


@runtime_checkable
class AsyncVecEnv(VecEnv, Protocol):
    """A :class:`VecEnv` whose step can be started and awaited separately (a phase of worker processes).

    Between :meth:`step_async` and :meth:`step_wait` the caller does other work, e.g. the policy's
    forward pass for another phase. Steps of different phases must be awaited in the order they
    were sent.
    """

    def step_async(self, actions: dict[str, torch.Tensor]) -> None:
        """Start a step with ``actions``."""
        ...

    def step_wait(self) -> tuple[Outputs, torch.Tensor]:
        """The results of the step :meth:`step_async` started, as :meth:`VecEnv.step` returns them."""
        ...


@runtime_checkable
class PhasedVecEnv(VecEnv, Protocol):
    """A :class:`VecEnv` whose copies come in consecutive phases stepped in alternation.

    The collector sends one phase's actions and computes the next phase's while the first
    steps, so the policy's forward pass overlaps env stepping.
    """

    def phases(self) -> list[Any]:
        """The phases (each an :class:`AsyncVecEnv` over its own copies when there are several), in order."""
        ...


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
