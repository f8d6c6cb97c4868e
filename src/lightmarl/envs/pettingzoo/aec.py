"""Turn-based (AEC) PettingZoo envs in the same vector layout as parallel envs.

A PettingZoo ``AECEnv`` lets one agent act at a time (``env.agent_selection``). lightmarl
steps it with the vector machinery of parallel envs (`ParallelSlice`
and the runners), so the collector, the policies and evaluation see the usual rows
``[num_envs, agents_in_group, ...]``. One vector step is one turn in every env copy:

* **validity**: only the acting agent's row is ``valid``; every other agent of the copy has a
  row with ``valid`` False that step (its action is computed and ignored).
* **observations**: every agent still in the game gets its own ``env.observe(agent)`` in its
  row, acting or not, before and after the turn; so the row after an agent's last turn before
  its next one (``("next", observation)``) is what it will see when it next acts.
* **action masks**: the acting agent's row carries the env's mask (``observation["action_mask"]``,
  or ``infos[agent]["action_mask"]`` for envs that put it there); every other row carries an
  all-True mask, so a policy can sample (and discard) an action there without an empty
  distribution.
* **rewards**: after ``env.step(action)``, ``env.rewards`` holds the turn's reward of *every*
  agent. Each is written into that agent's ``("next", reward)`` row of this step, valid or not:
  the loser's -1 of connect four arrives on the winner's turn. Every learner credits a reward
  that arrives between two of an agent's turns to the earlier one, and one before its first turn
  of a game to that first turn (``lightmarl.algorithms.open_transitions``).
* **episode ends**: an agent's ``terminated`` / ``truncated`` flag is written in the step where
  the env first reports it, valid row or not; when the game is over (``env.agents`` empty)
  every agent of the episode not yet reported is marked ``truncated``, and the copy is reset
  like a parallel env (the step reports the final observations, ``current`` the reset ones).
* **dead agents**: PettingZoo steps an agent that is done with ``env.step(None)`` before it
  leaves ``env.agents``; the adapter does those steps itself, right after the turn, so policies
  never see them.

`AECSlice` is the stepping code; `pettingzoo_slice` picks it
for AEC envs, in-process and in worker processes. This module imports no torch at module
level (worker processes import it).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from lightmarl import keys
from lightmarl.envs.layout import ROOT, Arrays, episode_seed, write_infos
from lightmarl.envs.pettingzoo.checks import call_checked, first_legal_action
from lightmarl.envs.pettingzoo.parallel import ParallelSlice
from lightmarl.envs.pettingzoo.spec import env_spec_of
from lightmarl.envs.spec import EnvSpec
from lightmarl.errors import EnvContractError, TrainingFault


def is_aec_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo AEC (turn-based) env, i.e. has ``agent_iter`` (parallel envs do not)."""
    return hasattr(env, "agent_iter")


class AECSlice(ParallelSlice):
    """Steps AEC env copies ``start .. start + len(envs) - 1`` of a vector: one turn per copy per step.

    Same constructor, arrays and error messages as `ParallelSlice`
    (whose helpers it reuses); the rules for rows are in this module's docstring. Groups with an
    action mask read it from the observation dict, or from ``env.infos[agent]["action_mask"]``
    when observations are plain arrays.
    """

    def _start_state(self) -> None:
        self.masked_groups = [g.name for g in self.groups if g.has_action_mask]
        # Per copy: agents seen in the running episode, and those whose end was reported.
        self._playing: list[set[Hashable]] = [set() for _ in self.envs]
        self._finished: list[set[Hashable]] = [set() for _ in self.envs]

    # -- one copy ----------------------------------------------------------------------

    def _selected(self, e: int, env: Any) -> Hashable:
        agent = env.agent_selection
        if agent not in self.slot or agent not in env.agents:
            raise RuntimeError(
                f"{self.where(e)}: agent_selection is {agent!r}, which is not among the env's agents "
                f"{list(env.agents)} (possible_agents are {self.possible_agents})"
            )
        return agent

    def _observe(self, e: int, env: Any) -> dict[Hashable, Any]:
        observations = {}
        for agent in env.agents:
            try:
                observations[agent] = env.observe(agent)
            except Exception as err:
                raise RuntimeError(
                    f"{self.where(e)} raised in observe({agent!r}): {type(err).__name__}: {err}"
                ) from err
        return observations

    def _write_rows(self, arrays: Arrays, e: int, env: Any, acting: Hashable | None, valid: bool) -> None:
        """Every present agent's observation into ``arrays``; ``acting`` (the agent to act, if any) gets its
        real action mask and, with ``valid``, its ``valid`` flag; every other row an all-True mask."""
        observations = self._observe(e, env)
        self.write_obs(arrays, e, observations, (acting,) if valid and acting is not None else ())
        for group in self.masked_groups:
            arrays[group][keys.ACTION_MASK][e] = True
        if acting is None or self.slot[acting][0] not in self.masked_groups:
            return
        group, i = self.slot[acting]
        obs = observations.get(acting)
        mask = obs.get("action_mask") if isinstance(obs, dict) else _info_mask(env, acting)
        if mask is None:
            raise RuntimeError(
                f"{self.where(e)}: agent {acting!r} acts without an action mask (neither observation['action_mask'] "
                "nor infos[agent]['action_mask']), though its group has one"
            )
        try:
            arrays[group][keys.ACTION_MASK][e, i] = mask
        except (ValueError, TypeError) as err:
            raise RuntimeError(
                f"{self.where(e)}: the action mask of agent {acting!r} does not fit (expected shape "
                f"{arrays[group]['action_mask'].shape[2:]}): {type(err).__name__}: {err}"
            ) from None

    def _record_ends(self, e: int, j: int, env: Any, nxt: Arrays) -> None:
        """Write ``terminated`` / ``truncated`` of agents the env now reports done, once per episode."""
        finished = self._finished[j]
        for agent in env.agents:
            if agent in finished or agent not in self.slot:
                continue
            self._playing[j].add(agent)
            terminated = bool(env.terminations.get(agent, False))
            truncated = bool(env.truncations.get(agent, False))
            if terminated or truncated:
                group, i = self.slot[agent]
                nxt[group][keys.TERMINATED][e, i] = terminated
                nxt[group][keys.TRUNCATED][e, i] = truncated
                finished.add(agent)

    def _add_rewards(self, e: int, env: Any, nxt: Arrays) -> None:
        for agent, reward in env.rewards.items():
            try:
                group, i = self.slot[agent]
            except KeyError:
                raise RuntimeError(
                    f"{self.where(e)} reported a reward for unknown agent {agent!r}; "
                    f"possible_agents are {self.possible_agents}"
                ) from None
            nxt[group][keys.REWARD][e, i] += reward

    def _remove_dead(self, e: int, j: int, env: Any, nxt: Arrays) -> int:
        """Step every selected agent that is done with ``None`` (PettingZoo's dead steps) until a live one
        acts or none is left; returns how many it stepped."""
        steps = 0
        while env.agents and _is_done(env, env.agent_selection):
            agent = env.agent_selection
            count = len(env.agents)
            try:
                env.step(None)
            except Exception as err:
                raise RuntimeError(
                    f"{self.where(e)} raised in step(None) for done agent {agent!r}: {type(err).__name__}: {err}"
                ) from err
            if len(env.agents) >= count:
                raise RuntimeError(
                    f"{self.where(e)}: step(None) for done agent {agent!r} did not remove it from env.agents"
                )
            self._record_ends(e, j, env, nxt)
            steps += 1
        return steps

    def _start_episode(self, e: int, j: int, env: Any, current: Arrays) -> None:
        if not env.agents:
            raise RuntimeError(f"{self.where(e)}: env.agents is empty after reset(); no agent would act")
        self._playing[j] = {a for a in env.agents if a in self.slot}
        self._finished[j] = set()
        self._write_rows(current, e, env, self._selected(e, env), valid=True)
        if ROOT in current:
            self.write_state(current, e, env)

    # -- the slice interface -----------------------------------------------------------

    def _reset_copy(self, j: int, current: Arrays) -> None:
        e, env = self.start + j, self.envs[j]
        try:
            env.reset(seed=episode_seed(self.seeds[j], self.episodes[j]))
        except Exception as err:
            raise RuntimeError(f"{self.where(e)} raised in reset(): {type(err).__name__}: {err}") from err
        self._start_episode(e, j, env, current)

    def _step_copy(
        self, j: int, actions: dict[str, np.ndarray], nxt: Arrays, current: Arrays, ended: np.ndarray
    ) -> None:
        """One turn in copy ``j`` of the slice; arrays as in ``ParallelSlice.step`` (rows of this module's docstring)."""
        e, env = self.start + j, self.envs[j]
        agent = self._selected(e, env)
        group, i = self.slot[agent]
        value = actions[group][e, i]
        action = value.item() if value.ndim == 0 else value
        try:
            env.step(action)
        except Exception as err:
            # A fault of the run (exit code 3 in the CLI), like a worker that died: an env bug is not retried.
            raise TrainingFault(
                f"{self.where(e)} raised in step() of agent {agent!r} (action {action!r}): {type(err).__name__}: {err}"
            ) from err
        self._add_rewards(e, env, nxt)
        if self.info_fields:
            write_infos(nxt, e, self.slot, getattr(env, "infos", None), self.info_fields, self.where(e))
        self._record_ends(e, j, env, nxt)
        # The turn's final observations, before done agents leave env.agents.
        following = env.agent_selection
        live = following in env.agents and not _is_done(env, following)
        self._write_rows(nxt, e, env, following if live else None, valid=False)
        if ROOT in nxt:
            self.write_state(nxt, e, env)
        dead_steps = self._remove_dead(e, j, env, nxt)
        if env.agents and not dead_steps:
            # Nothing changed since the observations above: they are the next step's too.
            for g, arrays in nxt.items():
                for key in (keys.OBSERVATION, keys.ACTION_MASK, keys.STATE):
                    if key in arrays:
                        current[g][key][e] = arrays[key][e]
            group, i = self.slot[self._selected(e, env)]
            current[group][keys.VALID][e, i] = True
            return
        if env.agents:
            self._write_rows(current, e, env, self._selected(e, env), valid=True)
            if ROOT in current:
                self.write_state(current, e, env)
            return
        # Game over: everyone of the episode is done; reset this copy for its next episode.
        ended[e] = True
        for agent in self._playing[j] - self._finished[j]:
            group, i = self.slot[agent]
            nxt[group][keys.TRUNCATED][e, i] = True
        self.episodes[j] += 1
        self._reset_copy(j, current)

    def _finish(self, rows: slice, nxt: Arrays, current: Arrays, ended: np.ndarray) -> None:
        for group, arrays in nxt.items():
            if group != ROOT:
                np.logical_or(arrays[keys.TERMINATED][rows], arrays[keys.TRUNCATED][rows], out=arrays[keys.DONE][rows])


def _is_done(env: Any, agent: Hashable) -> bool:
    return bool(env.terminations.get(agent, False) or env.truncations.get(agent, False))


def _info_mask(env: Any, agent: Hashable) -> Any:
    info = env.infos.get(agent) if isinstance(getattr(env, "infos", None), dict) else None
    return info.get("action_mask") if isinstance(info, dict) else None


def aec_env_spec(env: Any, name: str, state: bool = False, seed: int = 0) -> EnvSpec:
    """The [`EnvSpec`][lightmarl.envs.spec.EnvSpec] of an AEC env, after checking it keeps the AEC API.

    Groups and spaces as for parallel envs ([`env_spec_of`][lightmarl.envs.pettingzoo.spec.env_spec_of]); a
    group whose observations are plain arrays but whose agents find an ``action_mask`` in their
    ``infos`` gets ``has_action_mask``. Resets ``env`` with ``seed`` and plays one turn
    (`check_aec_env`): a broken env fails here, before training, with an error naming it.
    """
    spec = env_spec_of(env, name=name, state=state)
    where = f"env {name!r} (API check with seed {seed})"
    call_checked(where, "reset()", lambda: env.reset(seed=seed))
    groups = dict(spec.groups)
    for group in spec.groups.values():
        if group.has_action_mask or group.action_kind != "discrete":
            continue
        infos = getattr(env, "infos", None) or {}
        masks = [_info_mask(env, a) for a in group.env_agents if a in infos]
        if any(m is not None for m in masks):
            groups[group.name] = replace(group, has_action_mask=True)
    spec = replace(spec, groups=groups, turn_based=True)
    check_aec_env(env, spec, seed=seed)
    return spec


def check_aec_env(env: Any, spec: EnvSpec, seed: int = 0) -> None:
    """Reset ``env`` with ``seed`` and play one turn with the first legal action, checking the AEC API.

    Checks what `AECSlice` relies on: after ``reset`` the selected agent is one of
    ``env.agents`` (all known agents), each agent's ``observe()`` has the declared shape (and the
    acting agent an action mask where its group has one), ``rewards`` / ``terminations`` /
    ``truncations`` are dicts keyed by known agents, before and after the turn. Leaves ``env``
    mid-episode.

    Raises:
        EnvContractError: naming the env, the call and the agent.
    """
    where = f"env {spec.name!r} (API check with seed {seed})"
    call_checked(where, "reset()", lambda: env.reset(seed=seed))

    def check_state(after: str) -> Any:
        agents = list(getattr(env, "agents", None) or [])
        unknown = [a for a in agents if a not in spec.env_agents]
        if unknown:
            raise EnvContractError(
                f"{where}: env.agents after {after} names unknown agent {unknown[0]!r}; "
                f"possible_agents are {list(spec.env_agents)}"
            )
        for what in ("rewards", "terminations", "truncations"):
            values = getattr(env, what, None)
            if not isinstance(values, dict) or any(a not in spec.env_agents for a in values):
                raise EnvContractError(
                    f"{where}: env.{what} after {after} must be a dict keyed by agents of possible_agents; got {values!r}"
                )
        selected = getattr(env, "agent_selection", None)
        if agents and selected not in agents:
            raise EnvContractError(f"{where}: agent_selection after {after} is {selected!r}, not one of {agents}")
        for agent in agents:
            obs = call_checked(where, f"observe({agent!r}) after {after}", partial(env.observe, agent))
            group = spec.group_of(agent)
            mask: Any = obs.get("action_mask") if isinstance(obs, dict) else _info_mask(env, agent)
            array: Any = obs.get("observation") if isinstance(obs, dict) else obs
            if np.shape(array) != group.observation_shape:
                raise EnvContractError(
                    f"{where}: observe({agent!r}) after {after} has shape {np.shape(array)}, but its "
                    f"observation_space says {group.observation_shape}"
                )
            if agent == selected and group.has_action_mask and np.shape(mask) != (group.num_actions,):
                raise EnvContractError(
                    f"{where}: the acting agent {agent!r} needs an action_mask of shape ({group.num_actions},) "
                    f"after {after}; got " + ("none" if mask is None else f"shape {np.shape(mask)}")
                )
        return selected

    selected = check_state("reset()")
    if not env.agents:
        raise EnvContractError(f"{where}: env.agents is empty after reset(); no agent would act")
    group = spec.group_of(selected)
    obs = env.observe(selected)
    action = first_legal_action(group, obs.get("action_mask") if isinstance(obs, dict) else _info_mask(env, selected))
    call_checked(where, f"step({action!r}) of agent {selected!r}", lambda: env.step(action))
    check_state("one step()")
