"""Env copies stepped in the training process, one after the other, with auto-reset."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from lightmarl.envs.base import FastForwardingVecEnv, Outputs, observation_td
from lightmarl.envs.layout import Arrays, GroupLayout, SliceFactory, empty_current, empty_next
from lightmarl.envs.spec import EnvSpec


class InProcessVecEnv(FastForwardingVecEnv):
    """``num_envs`` env copies stepped in this process by their family's stepping code, with auto-reset.

    ``reset()`` and ``step()`` return, per group, tensors shaped ``[num_envs, agents_in_group, ...]``.
    A copy whose agents are all gone (or all done) is reset inside ``step``: the step reports
    the episode's final observation, and `current` holds the reset one. The stepping
    itself is one `EnvSlice` over every copy, the code worker
    processes of [`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv] run too.

    Args:
        envs: the env copies (already constructed).
        spec: their shared [`EnvSpec`][lightmarl.envs.spec.EnvSpec].
        seeds: one seed per env copy: its episode ``k`` is reset with
            `episode_seed` ``(seed, k)``.
        make_slice: builds the stepping code for ``envs`` (e.g.
            `pettingzoo_slice`).
    """

    def __init__(self, envs: list[Any], spec: EnvSpec, seeds: list[int], make_slice: SliceFactory) -> None:
        if len(envs) != len(seeds):
            raise ValueError(f"{len(envs)} envs but {len(seeds)} seeds")
        self.envs = envs
        self.spec = spec
        self.seeds = seeds
        self.num_envs = len(envs)
        self._groups = GroupLayout.of(spec)
        self._block = make_slice(envs, self._groups, seeds, 0, spec.name, spec.env_agents)
        self.current: Outputs = {}
        self._agent_ids: dict[str, torch.Tensor] = {}
        self._closed = False

    @staticmethod
    def _to_torch(arrays: Arrays) -> Outputs:
        return {g: {k: torch.from_numpy(v) for k, v in d.items()} for g, d in arrays.items()}

    def reset(self) -> Outputs:
        current = empty_current(self._groups, self.num_envs, self.spec.state_shape)
        self._block.reset(current)
        self.current = self._to_torch(current)
        return self.current

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[Outputs, torch.Tensor]:
        """Step every env copy.

        Args:
            actions: group name -> ``[num_envs, agents_in_group, ...]`` actions; entries of
                agents that are not present are ignored.

        Returns:
            ``(next, episode_end)``: per group ``observation`` (final observation where the
            episode ended), ``reward``, ``terminated``, ``truncated``, ``done`` (and the state
            after the step, final where the episode ended, under ``ROOT`` where it is recorded);
            and a ``[num_envs]`` bool tensor of envs that were reset.
        """
        action_arrays = {g: a.numpy() for g, a in actions.items()}
        nxt = empty_next(self._groups, self.num_envs, self.spec.state_shape)
        current = empty_current(self._groups, self.num_envs, self.spec.state_shape)
        episode_end = np.zeros(self.num_envs, dtype=bool)
        self._block.step(action_arrays, nxt, current, episode_end)
        self.current = self._to_torch(current)
        return self._to_torch(nxt), torch.from_numpy(episode_end)

    def _fast_forward(
        self, episodes: Sequence[int], actions: Sequence[dict[str, torch.Tensor]]
    ) -> tuple[list[int], Outputs]:
        current = empty_current(self._groups, self.num_envs, self.spec.state_shape)
        diverged = [
            e
            for e in range(self.num_envs)
            if not self._block.fast_forward(e, int(episodes[e]), {g: a.numpy() for g, a in actions[e].items()}, current)
        ]
        return diverged, self._to_torch(current)

    def observation_td(self) -> TensorDict:
        """What the policies see now: see `observation_td`."""
        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> np.ndarray | None:
        return self.envs[index].render()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._block.close()
