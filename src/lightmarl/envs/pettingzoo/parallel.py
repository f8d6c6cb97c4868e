"""Stepping PettingZoo parallel envs into the vector layout: `ParallelSlice`.

The one implementation of stepping, auto-reset and error messages for parallel envs, run by
the in-process vector (one slice over every copy) and by each env worker process. This module
imports no torch (worker processes import it).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from lightmarl import keys
from lightmarl.envs.layout import ROOT, Arrays, GroupLayout, empty_current, empty_next, episode_seed, write_infos
from lightmarl.envs.runners.worker import close_envs
from lightmarl.errors import TrainingFault


class ParallelSlice:
    """Steps PettingZoo parallel env copies ``start .. start + len(envs) - 1`` of a vector, writing their rows.

    An `EnvSlice`. Rows are written, never cleared: the caller
    hands in zeroed rows. Arrays that carry a `ROOT` entry also get
    each copy's global ``env.state()``, next to its observations.

    Args:
        envs: the env copies of this slice.
        groups: the env's groups.
        seeds: each copy's seed: its episode ``k`` is reset with
            `episode_seed` ``(seed, k)`` (the first with ``seed``).
        start: index of ``envs[0]`` in the vector.
        env_name: the env's name, for messages.
        possible_agents: every agent's id in the env (``EnvSpec.env_agents``), for messages.
    """

    def __init__(
        self,
        envs: Sequence[Any],
        groups: Sequence[GroupLayout],
        seeds: Sequence[int],
        start: int,
        env_name: str,
        possible_agents: Sequence[Hashable],
    ) -> None:
        if len(envs) != len(seeds):
            raise ValueError(f"{len(envs)} envs but {len(seeds)} seeds")
        self.envs = list(envs)
        self.seeds = list(seeds)
        self.start = start
        self.stop = start + len(self.envs)
        self.env_name = env_name
        self.possible_agents = list(possible_agents)
        self.groups = list(groups)
        # the env's agent id -> (group name, position in group)
        self.slot = {a: (g.name, i) for g in groups for i, a in enumerate(g.agents)}
        #: the env info fields every step records (``EnvSpec.info_fields``)
        self.info_fields = self.groups[0].info_fields if self.groups else ()
        #: each copy's episode number: episode k is reset with ``episode_seed(seed, k)``.
        self.episodes = [0] * len(self.envs)
        self._start_state()

    def _start_state(self) -> None:
        """Set up per-copy state of subclasses (none here)."""

    def where(self, e: int) -> str:
        """``env 'name' (copy e, seed s)``: how messages name env copy ``e`` (a vector index)."""
        return f"env {self.env_name!r} (copy {e}, seed {self.seeds[e - self.start]})"

    def write_obs(self, arrays: Arrays, e: int, observations: dict, live: Sequence[Hashable]) -> None:
        slot = self.slot
        for agent, obs in observations.items():
            try:
                group, i = slot[agent]
            except KeyError:
                raise RuntimeError(
                    f"{self.where(e)} returned an observation for unknown agent {agent!r}; "
                    f"possible_agents are {self.possible_agents}"
                ) from None
            target = arrays[group]
            try:
                if isinstance(obs, dict):
                    if keys.ACTION_MASK in target:
                        target[keys.ACTION_MASK][e, i] = obs["action_mask"]  # PettingZoo's dict observation
                    obs = obs["observation"]
                target[keys.OBSERVATION][e, i] = obs
            except (ValueError, TypeError, KeyError) as err:
                raise RuntimeError(
                    f"{self.where(e)} returned an observation for agent {agent!r} that does not fit its "
                    f"observation_space (expected shape {target['observation'].shape[2:]}): {type(err).__name__}: {err}"
                ) from None
        for agent in live:
            group, i = slot[agent]
            arrays[group][keys.VALID][e, i] = True

    def reset(self, current: Arrays) -> None:
        """Reset every copy for its first episode (with its seed), writing the first observations into ``current``."""
        for j in range(len(self.envs)):
            self.episodes[j] = 0
            self._reset_copy(j, current)

    def _reset_copy(self, j: int, current: Arrays) -> None:
        """Reset copy ``j`` of the slice for its episode ``episodes[j]``, writing its observations into ``current``."""
        e, env = self.start + j, self.envs[j]
        try:
            observations, _ = env.reset(seed=episode_seed(self.seeds[j], self.episodes[j]))
        except Exception as err:
            raise RuntimeError(f"{self.where(e)} raised in reset(): {type(err).__name__}: {err}") from err
        self.write_obs(current, e, observations, env.agents)
        if ROOT in current:
            self.write_state(current, e, env)

    def write_state(self, arrays: Arrays, e: int, env: Any) -> None:
        try:
            arrays[ROOT][keys.STATE][e] = env.state()
        except Exception as err:
            raise RuntimeError(
                f"{self.where(e)}: recording its global state() failed (expected shape "
                f"{arrays[ROOT]['state'].shape[1:]}): {type(err).__name__}: {err}"
            ) from err

    def step(self, actions: dict[str, np.ndarray], nxt: Arrays, current: Arrays, ended: np.ndarray) -> None:
        """Step every copy; see [`step`][lightmarl.envs.base.VecEnv.step].

        Writes the step's results into ``nxt`` (final observation where the episode ended),
        the observations for the next step into ``current`` (the reset ones where it ended) and
        ``True`` into ``ended`` for copies that were reset.
        """
        for j in range(len(self.envs)):
            self._step_copy(j, actions, nxt, current, ended)
        self._finish(slice(self.start, self.stop), nxt, current, ended)

    def _step_copy(
        self, j: int, actions: dict[str, np.ndarray], nxt: Arrays, current: Arrays, ended: np.ndarray
    ) -> None:
        """Step copy ``j`` of the slice (resetting it for its next episode where this one ends)."""
        slot = self.slot
        e, env = self.start + j, self.envs[j]
        acting = list(env.agents)  # env.step mutates env.agents
        joint = {}
        for agent in acting:
            group, i = slot[agent]
            value = actions[group][e, i]
            joint[agent] = value.item() if value.ndim == 0 else value
        try:
            observations, rewards, terminations, truncations, infos = env.step(joint)
        except Exception as err:
            # A fault of the run (exit code 3 in the CLI), like a worker that died: an env bug is not retried.
            raise TrainingFault(f"{self.where(e)} raised in step(): {type(err).__name__}: {err}") from err
        self.write_obs(nxt, e, observations, ())
        if self.info_fields:
            write_infos(nxt, e, self.slot, infos, self.info_fields, self.where(e))
        if ROOT in nxt:
            self.write_state(nxt, e, env)  # the final state where the episode ended
        for agent in acting:
            group, i = slot[agent]
            arrays = nxt[group]
            arrays[keys.REWARD][e, i] = rewards.get(agent, 0.0)
            arrays[keys.TERMINATED][e, i] = terminations.get(agent, False)
            arrays[keys.TRUNCATED][e, i] = truncations.get(agent, False)
        if env.agents and not all(terminations.get(a, False) or truncations.get(a, False) for a in env.agents):
            for agent in env.agents:
                group, i = slot[agent]
                current[group][keys.VALID][e, i] = True
            return
        # Episode over: mark everyone who was present done, and reset this copy for its next episode.
        ended[e] = True
        for agent in acting:
            group, i = slot[agent]
            if not (nxt[group][keys.TERMINATED][e, i] or nxt[group][keys.TRUNCATED][e, i]):
                nxt[group][keys.TRUNCATED][e, i] = True
        self.episodes[j] += 1
        self._reset_copy(j, current)

    def _finish(self, rows: slice, nxt: Arrays, current: Arrays, ended: np.ndarray) -> None:
        """After the copies ``rows`` stepped: ``done`` flags, and next observations where episodes go on."""
        going_on = ~ended[rows]
        for group, arrays in nxt.items():
            keep = going_on
            if group != ROOT:
                np.logical_or(arrays[keys.TERMINATED][rows], arrays[keys.TRUNCATED][rows], out=arrays[keys.DONE][rows])
                # Only agents still present: one that just left keeps zeros, not its final observation.
                keep = going_on[:, None] & current[group][keys.VALID][rows]
            # Observations (and state) for the next step: the new ones, except in copies that were reset.
            for key in (keys.OBSERVATION, keys.ACTION_MASK, keys.STATE):
                if key in arrays:
                    current[group][key][rows][keep] = arrays[key][rows][keep]

    def fast_forward(self, e: int, episode: int, actions: dict[str, np.ndarray], current: Arrays) -> bool:
        """Reset copy ``e`` for its episode ``episode`` and step it with ``actions``; see
        `fast_forward`."""
        j = e - self.start
        rows = len(current[self.groups[0].name][keys.VALID])  # the vector's copies: arrays are indexed by `e`
        state_shape = current[ROOT][keys.STATE].shape[1:] if ROOT in current else None
        self.episodes[j] = episode
        now = empty_current(self.groups, rows, state_shape)
        self._reset_copy(j, now)
        steps = len(next(iter(actions.values()))) if actions else 0
        completed = True
        for t in range(steps):
            step_actions = {}
            for group, recorded in actions.items():
                step_actions[group] = np.zeros((rows, *recorded.shape[1:]), dtype=recorded.dtype)
                step_actions[group][e] = recorded[t]
            nxt, ended = empty_next(self.groups, rows, state_shape), np.zeros(rows, dtype=bool)
            now = empty_current(self.groups, rows, state_shape)
            self._step_copy(j, step_actions, nxt, now, ended)
            self._finish(slice(e, e + 1), nxt, now, ended)
            if ended[e]:
                completed = False
                break
        for group, arrays in now.items():
            for key, array in arrays.items():
                current[group][key][e] = array[e]
        return completed

    def close(self) -> None:
        close_envs(self.envs)
