"""Checks that a raw PettingZoo env keeps the API the env layer relies on, before any training.

`check_parallel_env`: one ``reset`` and one ``step`` of a ``ParallelEnv`` against its
[`EnvSpec`][lightmarl.envs.spec.EnvSpec] (observations only for known agents, of the declared
shapes), and a warning when no agent's image changed in that step (an env that draws its
frames only when it renders). [`base_spec`][lightmarl.envs.pettingzoo.config.PettingZooEnvConfig.base_spec]
runs it (and `check_aec_env` for turn-based envs), so a recipe whose
env breaks the PettingZoo API fails before training starts. Vectors of copies are checked by
`lightmarl.envs.checks`. Torch-free.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from lightmarl.envs.spec import EnvSpec, GroupSpec
from lightmarl.errors import EnvContractError


def check_parallel_env(env: Any, spec: EnvSpec, seed: int = 0) -> None:
    """Reset ``env`` with ``seed`` and step it once with a fixed legal action per agent.

    Checks the PettingZoo parallel API as the env layer uses it: ``reset`` returns
    ``(observations, infos)`` and ``step`` five dicts; every key is an agent of
    ``possible_agents``; observations (and action masks) have the shapes of the declared
    spaces. Leaves ``env`` mid-episode: close it or reset it afterwards. Warns (``UserWarning``)
    when the env has image observations and none of them changed in that step (see
    `warn_if_frames_frozen`).

    Raises:
        EnvContractError: naming the env, the call and the agent.
    """
    where = f"env {spec.name!r} (API check with seed {seed})"
    result = call_checked(where, "reset()", lambda: env.reset(seed=seed))
    if not (isinstance(result, tuple) and len(result) == 2):
        raise EnvContractError(
            f"{where}: reset() must return (observations, infos) as PettingZoo parallel envs do; "
            f"got {type(result).__name__}"
        )
    _check_observations(where, "reset()", result[0], spec)
    agents = list(env.agents)
    _check_known(where, "env.agents after reset()", agents, spec)
    if not agents:
        raise EnvContractError(f"{where}: env.agents is empty after reset(); no agent would act")
    missing = [a for a in agents if a not in result[0]]
    if missing:
        raise EnvContractError(f"{where}: reset() returned no observation for agents {missing} of env.agents")
    actions = {agent: _fixed_action(spec.group_of(agent), result[0][agent]) for agent in agents}
    first_images = _images(result[0], spec)
    result = call_checked(where, "step()", lambda: env.step(actions), detail=f" (actions {actions})")
    if not (isinstance(result, tuple) and len(result) == 5):
        raise EnvContractError(
            f"{where}: step() must return (observations, rewards, terminations, truncations, infos); "
            f"got {type(result).__name__} of length {len(result) if isinstance(result, tuple) else '-'}"
        )
    observations, rewards, terminations, truncations, _ = result
    _check_observations(where, "step()", observations, spec)
    warn_if_frames_frozen(spec.name, first_images, _images(observations, spec))
    for what, values in (("rewards", rewards), ("terminations", terminations), ("truncations", truncations)):
        _check_known(where, f"step() {what}", values, spec)
    _check_known(where, "env.agents after step()", list(env.agents), spec)


def warn_if_frames_frozen(name: str, before: Mapping[Any, np.ndarray], after: Mapping[Any, np.ndarray]) -> None:
    """Warn when agents had image observations (``before``: after ``reset``) and not one of them
    differs after a step (``after``).

    Some envs draw their frames only when they render: PettingZoo's butterfly pistonball and
    cooperative_pong built without a ``render_mode`` show every agent the same picture (the
    background, no ball) for the whole episode, and a policy trained on it can only learn a fixed
    action preference. A warning, not an error: an env whose picture really stays still for a
    step is possible."""
    common = [agent for agent in before if agent in after]
    if not common or any(not np.array_equal(before[agent], after[agent]) for agent in common):
        return
    warnings.warn(
        f"env {name!r}: no agent's image observation changed in the step after reset(); an env that draws "
        "its frames only when it renders shows the same picture all episode (PettingZoo's pistonball and "
        "cooperative_pong draw theirs only with a render mode: add `render_mode: rgb_array` to env.env_kwargs)",
        UserWarning,
        stacklevel=2,
    )


def _images(observations: Any, spec: EnvSpec) -> dict[Any, np.ndarray]:
    """Copies of the ``uint8`` ``[H, W, C]`` (image) observations among ``observations``, by agent."""
    images = {}
    for agent, obs in observations.items():
        group = spec.group_of(agent)
        if group.observation_dtype == "uint8" and len(group.observation_shape) == 3:
            images[agent] = np.array(obs["observation"] if isinstance(obs, dict) else obs)
    return images


def call_checked(where: str, call: str, fn: Callable[[], Any], detail: str = "") -> Any:
    """``fn()``, its exception turned into an [`EnvContractError`][lightmarl.errors.EnvContractError] naming
    ``where`` and ``call`` (and ending with ``detail``)."""
    try:
        return fn()
    except Exception as err:
        raise EnvContractError(f"{where}: {call} raised {type(err).__name__}: {err}{detail}") from err


def _check_known(where: str, what: str, agents: Any, spec: EnvSpec) -> None:
    if not isinstance(agents, (dict, list)):
        raise EnvContractError(f"{where}: {what} must be a dict keyed by agent name; got {type(agents).__name__}")
    unknown = [a for a in agents if a not in spec.env_agents]
    if unknown:
        raise EnvContractError(
            f"{where}: {what} names unknown agent {unknown[0]!r}; possible_agents are {list(spec.env_agents)}"
        )


def _check_observations(where: str, call: str, observations: Any, spec: EnvSpec) -> None:
    _check_known(where, f"{call} observations", observations, spec)
    for agent, obs in observations.items():
        group = spec.group_of(agent)
        mask = None
        if isinstance(obs, dict):
            if "observation" not in obs:
                raise EnvContractError(
                    f"{where}: {call} observation of agent {agent!r} is a dict without 'observation'"
                )
            mask = obs.get("action_mask")
            obs = obs["observation"]
        if np.shape(obs) != group.observation_shape:
            raise EnvContractError(
                f"{where}: {call} observation of agent {agent!r} has shape {np.shape(obs)}, but its "
                f"observation_space says {group.observation_shape}"
            )
        if group.has_action_mask and (mask is None or np.shape(mask) != (group.num_actions,)):
            raise EnvContractError(
                f"{where}: {call} observation of agent {agent!r} needs an 'action_mask' of shape "
                f"({group.num_actions},), as its observation_space says; got "
                + ("none" if mask is None else f"shape {np.shape(mask)}")
            )


def _fixed_action(group: GroupSpec, observation: Any) -> Any:
    """A legal action chosen without randomness (see `first_legal_action`)."""
    return first_legal_action(group, observation["action_mask"] if group.has_action_mask else None)


def first_legal_action(group: GroupSpec, mask: Any) -> Any:
    """The first legal choice of each sub-action under ``mask`` (``None``: all legal; 0 when none is),
    or for continuous actions the zero vector clipped into bounds."""
    if group.action_kind == "continuous":
        low = np.asarray(group.action_low, np.float32).reshape(group.action_shape)
        high = np.asarray(group.action_high, np.float32).reshape(group.action_shape)
        return np.clip(np.zeros(group.action_shape, np.float32), low, high)
    legal_all = None if mask is None else np.asarray(mask, bool)
    sizes = group.action_nvec or (group.num_actions,)
    choices, offset = [], 0
    for size in sizes:
        legal = np.ones(size, bool) if legal_all is None else legal_all[offset : offset + size]
        choices.append(int(np.argmax(legal)))
        offset += size
    return choices[0] if group.action_kind == "discrete" else np.asarray(choices, np.int64)
