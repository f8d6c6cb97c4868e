"""Stepping PettingZoo parallel envs into the vector layout: :class:`ParallelSlice`.

The one implementation of stepping, auto-reset and error messages for parallel envs, run by
the in-process vector (one slice over every copy) and by each env worker process. This module
imports no torch (worker processes import it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lightmarl import keys
from lightmarl.envs.layout import ROOT, Arrays, GroupLayout
from lightmarl.envs.runners.worker import close_envs


class ParallelSlice:
    """Steps PettingZoo parallel env copies ``start .. start + len(envs) - 1`` of a vector, writing their rows.

    An :class:`~lightmarl.envs.layout.EnvSlice`. Rows are written, never cleared: the caller
    hands in zeroed rows. Arrays that carry a :data:`~lightmarl.envs.layout.ROOT` entry also get
    each copy's global ``env.state()``, next to its observations.

    Args:
        envs: the env copies of this slice.
        groups: the env's groups.
        seeds: each copy's reset seed (``reset()`` reseeds; auto-resets continue the env's RNG).
        start: index of ``envs[0]`` in the vector.
        env_name: the env's name, for messages.
        possible_agents: every agent name, for messages.
    """

    def __init__(
        self,
        envs: Sequence[Any],
        groups: Sequence[GroupLayout],
        seeds: Sequence[int],
        start: int,
        env_name: str,
        possible_agents: Sequence[str],
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
        # agent name -> (group name, position in group)
        self.slot = {a: (g.name, i) for g in groups for i, a in enumerate(g.agents)}
        self._start_state()

    def _start_state(self) -> None:
        """Set up per-copy state of subclasses (none here)."""

    def where(self, e: int) -> str:
        """``env 'name' (copy e, seed s)``: how messages name env copy ``e`` (a vector index)."""
        return f"env {self.env_name!r} (copy {e}, seed {self.seeds[e - self.start]})"

    def write_obs(self, arrays: Arrays, e: int, observations: dict, live: Sequence[str]) -> None:
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
        """Reset every copy with its seed, writing the first observations into ``current``."""
        for j, env in enumerate(self.envs):
            e = self.start + j
            try:
                observations, _ = env.reset(seed=self.seeds[j])
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
        """Step every copy; see :meth:`~lightmarl.envs.base.VecEnv.step`.

        Writes the step's results into ``nxt`` (final observation where the episode ended),
        the observations for the next step into ``current`` (the reset ones where it ended) and
        ``True`` into ``ended`` for copies that were reset.
        """
        slot = self.slot
        for j, env in enumerate(self.envs):
            e = self.start + j
            acting = list(env.agents)  # env.step mutates env.agents
            joint = {}
            for agent in acting:
                group, i = slot[agent]
                value = actions[group][e, i]
                joint[agent] = value.item() if value.ndim == 0 else value
            try:
                observations, rewards, terminations, truncations, _ = env.step(joint)
            except Exception as err:
                raise RuntimeError(f"{self.where(e)} raised in step(): {type(err).__name__}: {err}") from err
            self.write_obs(nxt, e, observations, ())
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
                continue
            # Episode over: mark everyone who was present done, and reset this copy.
            ended[e] = True
            for agent in acting:
                group, i = slot[agent]
                if not (nxt[group][keys.TERMINATED][e, i] or nxt[group][keys.TRUNCATED][e, i]):
                    nxt[group][keys.TRUNCATED][e, i] = True
            try:
                observations, _ = env.reset()
            except Exception as err:
                raise RuntimeError(f"{self.where(e)} raised in reset(): {type(err).__name__}: {err}") from err
            self.write_obs(current, e, observations, env.agents)
            if ROOT in current:
                self.write_state(current, e, env)
        rows = slice(self.start, self.stop)
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

    def close(self) -> None:
        close_envs(self.envs)
