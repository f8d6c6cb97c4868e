"""VMAS scenarios as a torch-native vector: all env copies simulated in one batched call.

VMAS (Bettini et al. 2022, "VMAS: A Vectorized Multi-Agent Simulator for Collective Robot
Learning") simulates ``num_envs`` copies of a 2-D multi-robot scenario as batched torch tensors,
on CPU or GPU; one ``step`` advances every copy. [`VmasVecEnv`][lightmarl.envs.vmas.VmasVecEnv] drives a VMAS
``Environment`` directly (not through TorchRL's ``VmasEnv``: the collector wants lightmarl's
``[num_envs, agents, ...]`` group tensors, and skipping TensorDict round-trips keeps the per-step
overhead flat) and implements the [`VecEnv`][lightmarl.envs.base.VecEnv] protocol, so the
collector, evaluation and transforms treat it like a PettingZoo vector.

Install the extra: ``pip install 'lightmarl[vmas]'``. Select it in a recipe with
``class_path: lightmarl.envs.VmasEnvConfig`` (see ``docs/vmas.md``).

What differs from PettingZoo vectors:

* VMAS ends episodes per env copy, for the whole team: its ``terminated`` (the scenario's end)
  and ``truncated`` (``max_steps`` reached) flags are broadcast to every agent.
* Agents never leave: ``valid`` is always True.
* One seed drives the whole batch: ``reset()`` reseeds the batch with ``seeds[0]``; copy ``i``
  is not seeded with ``seeds[i]`` on its own. Same seed and actions, same trajectories.
* Ended copies are reset in one batched call (`reset_copies`), not one ``reset_at`` call
  per copy; stepping has no per-copy loop either.
* The training vector's outputs stay on ``device`` (on a GPU the rollout never copies a step's
  results to the host); evaluation vectors, and vectors followed by transforms, hand out CPU
  tensors.
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict

from lightmarl import keys
from lightmarl._imports import import_object
from lightmarl.envs.base import VecEnv, observation_td
from lightmarl.envs.checks import check_vec_env
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.spec import EnvSpec, GroupSpec, default_group_name
from lightmarl.envs.transforms import VecTransform

HAS_VMAS = importlib.util.find_spec("vmas") is not None
INSTALL_HINT = "VMAS envs need the vmas package: pip install 'lightmarl[vmas]'"


def vmas_scenario_names() -> list[str]:
    """The scenario names VMAS ships: its own, its debug ones and its MPE ports."""
    import vmas

    return sorted({*vmas.scenarios, *vmas.debug_scenarios, *vmas.mpe_scenarios})


@dataclass
class VmasEnvConfig(EnvConfig):
    """A VMAS scenario and how many copies of it to simulate at once.

    Examples:
        In a recipe::

            env:
              class_path: lightmarl.envs.vmas.VmasEnvConfig
              init_args:
                scenario: balance
                scenario_kwargs: {n_agents: 3}
                num_envs: 512
                max_steps: 100

    Attributes:
        scenario: a VMAS scenario name (``balance``, ``navigation``, ``transport``, ...) or the
            import path of your own ``vmas.simulator.scenario.BaseScenario`` subclass.
        scenario_kwargs: keyword arguments of the scenario (e.g. ``{n_agents: 4}``).
        num_envs: env copies simulated together by each training process.
        max_steps: episode horizon (copies reaching it are truncated); ``None``: episodes end
            only when the scenario says so.
        continuous_actions: ``Box`` actions (VMAS's force per axis) instead of ``Discrete``.
        device: where VMAS simulates (``cpu``, ``cuda``, ``cuda:1``).
        transforms: optional `transforms` applied, in order, to the
            vector's outputs.
        batched_reset: reset the copies that ended in one call (`reset_copies`); ``false``:
            one VMAS ``reset_at`` call per ended copy, for a scenario of your own that keeps
            per-copy state outside tensors (which the batched reset cannot put back).
        info_fields: fields of the scenario's per-agent ``info()`` (one number per env copy,
            e.g. navigation's ``final_rew``) that evaluation reports per binding (see
            [`EnvConfig`][lightmarl.envs.config.EnvConfig]).
    """

    scenario: str = "balance"
    scenario_kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 256
    max_steps: int | None = 200
    continuous_actions: bool = False
    device: str = "cpu"
    transforms: list[VecTransform] = field(default_factory=list)
    info_fields: list[str] = field(default_factory=list)
    batched_reset: bool = True

    def __post_init__(self) -> None:
        if not HAS_VMAS:
            raise ImportError(INSTALL_HINT)
        self.check_transforms()
        self.check_info_fields()
        if isinstance(self.num_envs, bool) or not isinstance(self.num_envs, int) or self.num_envs < 1:
            raise ValueError(f"env.num_envs: expected a positive integer, got {self.num_envs!r}")
        if self.max_steps is not None and (
            isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1
        ):
            raise ValueError(f"env.max_steps: expected a positive integer or null, got {self.max_steps!r}")
        if not isinstance(self.batched_reset, bool):
            raise TypeError(f"env.batched_reset: expected true or false, got {self.batched_reset!r}")
        if not isinstance(self.scenario, str) or not self.scenario:
            raise ValueError(f"env.scenario: expected a VMAS scenario name or import path, got {self.scenario!r}")
        try:
            torch.device(self.device)
        except RuntimeError as err:
            raise ValueError(f"env.device: {self.device!r} is not a torch device: {err}") from None

    @property
    def name(self) -> str:
        return self.scenario.rsplit(".", 1)[-1]

    def describe(self) -> dict[str, Any]:
        return {
            "vmas_scenario": self.scenario,
            "scenario_kwargs": dict(self.scenario_kwargs),
            "max_steps": self.max_steps,
            "continuous_actions": self.continuous_actions,
        }

    def _scenario(self) -> Any:
        """A VMAS scenario name, or an instance of the user's ``BaseScenario`` subclass."""
        if "." not in self.scenario:
            if self.scenario not in vmas_scenario_names():
                raise ValueError(
                    f"env.scenario: VMAS has no scenario {self.scenario!r}; it has {vmas_scenario_names()} "
                    "(or give the import path of a BaseScenario subclass)"
                )
            return self.scenario
        from vmas.simulator.scenario import BaseScenario

        scenario = import_object(self.scenario, field="env.scenario")
        if isinstance(scenario, type) and issubclass(scenario, BaseScenario):
            return scenario()
        raise ValueError(f"env.scenario: {self.scenario!r} is not a vmas BaseScenario subclass")

    def _make(self, num_envs: int, seed: int, info_fields: bool = True, on_device: bool = False) -> VmasVecEnv:
        import vmas

        scenario = self._scenario()
        random_state = VmasRandomState()
        try:
            with random_state.active(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                env = vmas.make_env(
                    scenario,
                    num_envs=num_envs,
                    device=self.device,
                    continuous_actions=self.continuous_actions,
                    max_steps=self.max_steps,
                    seed=seed,
                    terminated_truncated=True,
                    **self.scenario_kwargs,
                )
        except Exception as err:
            raise ValueError(
                f"env: VMAS scenario {self.scenario!r} with scenario_kwargs {self.scenario_kwargs!r} failed to build: "
                f"{type(err).__name__}: {err}"
            ) from err
        for warning in caught:
            # VMAS only warns about kwargs its scenario ignores (a typo would silently train another task).
            if "passed but not used by the scenario" in str(warning.message):
                raise ValueError(f"env.scenario_kwargs: VMAS scenario {self.scenario!r}: {warning.message}")
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        spec = vmas_spec_of(env, self.name)
        return VmasVecEnv(
            env,
            self.with_info_fields(spec) if info_fields else spec,
            seed,
            random_state,
            output_device=self.device if on_device else "cpu",
            batched_reset=self.batched_reset,
        )

    def base_spec(self) -> EnvSpec:
        """The scenario's groups and spaces, after a reset and two random steps of two copies
        ([`check_vec_env`][lightmarl.envs.checks.check_vec_env]): a broken scenario fails here. The check
        runs on the scenario's own layout; the ``info_fields`` are added to the spec after it."""
        vector = self._make(2, seed=0, info_fields=False)
        try:
            check_vec_env(vector, num_steps=2)
            return self.with_info_fields(vector.spec)
        finally:
            vector.close()

    def make_base_vector(self, seed: int, num_envs: int, evaluation: bool = False) -> VecEnv:
        """The training vector keeps its outputs on ``device`` (the collector's rollout stays there)
        unless transforms, which work on CPU tensors, follow it; evaluation vectors hand out CPU tensors."""
        return self._make(num_envs, seed, on_device=not evaluation and not self.vector_transforms())

    def make_base_recording_vector(self, seed: int, record: Callable[[Any, Callable[[Any], Any]], Any]) -> VecEnv:
        """One simulated copy; VMAS's ``Environment`` is what ``record`` wraps (its ``step``,
        ``reset`` and auto-reset ``reset_at``)."""
        vector = self._make(1, seed)
        vector._env = record(vector._env, lambda env: render_rgb(env, 0, self.name))
        return vector


def render_rgb(env: Any, index: int, name: str) -> Any:
    """Copy ``index`` of a VMAS ``Environment`` drawn as an RGB array; a clear error where VMAS cannot draw."""
    try:
        return env.render(mode="rgb_array", env_index=index)
    except Exception as err:
        raise RuntimeError(
            f"env {name!r}: VMAS cannot render RGB frames here ({type(err).__name__}: {err}); it needs "
            "pyglet and either libEGL (off-screen) or a display (DISPLAY, e.g. xvfb-run)"
        ) from err


def vmas_spec_of(env: Any, name: str) -> EnvSpec:
    """Group a VMAS ``Environment``'s agents by name prefix (``agent_0`` -> ``agent``) and read their spaces."""
    agents = tuple(agent.name for agent in env.agents)
    members: dict[str, list[int]] = {}
    for i, agent in enumerate(agents):
        members.setdefault(default_group_name(agent), []).append(i)
    groups = {}
    for group_name, indices in members.items():
        signatures = {agents[i]: _signature(env, i, name) for i in indices}
        if len(set(signatures.values())) != 1:
            raise ValueError(
                f"env {name!r}: agents of group {group_name!r} have different spaces ({signatures}); lightmarl "
                "batches a group's rows together"
            )
        groups[group_name] = GroupSpec(
            name=group_name,
            agents=tuple(agents[i] for i in indices),
            agent_ids=tuple(indices),
            **dict(signatures[agents[indices[0]]]),
        )
    return EnvSpec(name=name, possible_agents=agents, groups=groups)


def _signature(env: Any, index: int, name: str) -> tuple[tuple[str, Any], ...]:
    """GroupSpec fields of agent ``index`` from VMAS's (gym) spaces."""
    agent = env.agents[index].name
    observation = env.observation_space[index]
    action = env.action_space[index]
    shape = getattr(observation, "shape", None)
    if not isinstance(shape, tuple) or not hasattr(observation, "low"):
        raise ValueError(
            f"env {name!r}, agent {agent!r}: unsupported observation space {observation!r} (expected a Box)"
        )
    fields: dict[str, Any] = {"observation_shape": tuple(shape)}
    if hasattr(action, "n"):
        fields.update(action_kind="discrete", num_actions=int(action.n))
    elif hasattr(action, "low") and hasattr(action, "high"):
        fields.update(
            action_kind="continuous",
            action_shape=tuple(action.shape),
            action_low=tuple(float(x) for x in action.low.ravel()),
            action_high=tuple(float(x) for x in action.high.ravel()),
        )
    else:
        raise ValueError(f"env {name!r}, agent {agent!r}: unsupported action space {action!r}")
    return tuple(sorted(fields.items()))


class VmasRandomState:
    """One vector's own copy of VMAS's random state.

    VMAS keeps a single process-wide random state (torch, NumPy and Python generators) that
    every ``Environment``'s ``reset`` / ``step`` swaps in and out. Each vector swaps its own copy
    in around its calls, so vectors do not draw from one another's stream: an evaluation
    vector built mid-training leaves the training vector's episode starts as they would be.
    (The CUDA generator is not part of VMAS's state.)
    """

    def __init__(self) -> None:
        from vmas.simulator.environment.environment import Environment

        self.shared: list[Any] = Environment.vmas_random_state  # the list VMAS's @local_seed reads and writes
        self.own = list(self.shared)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        others = list(self.shared)
        self.shared[:] = self.own
        try:
            yield
        finally:
            self.own = list(self.shared)
            self.shared[:] = others


_SKIPPED_ATTRIBUTES = frozenset({"viewer", "_viewer", "render_geoms", "_render_geoms", "_render"})


def _per_copy_tensors(root: Any, num_envs: int) -> dict[tuple[Any, ...], torch.Tensor]:
    """Every tensor reachable from ``root`` (attributes, lists, tuples, dicts) whose first dim is ``num_envs``,
    by its path of attribute names / keys: a VMAS scenario's per-copy state (its world's entities'
    states and actions, the scenario's own tensors such as navigation's ``pos_shaping``)."""
    found: dict[tuple[Any, ...], torch.Tensor] = {}
    seen: set[int] = set()

    def walk(obj: Any, path: tuple[Any, ...]) -> None:
        if isinstance(obj, torch.Tensor):
            if obj.dim() >= 1 and obj.shape[0] == num_envs:
                found[path] = obj
            return
        if id(obj) in seen or len(path) > 10:
            return
        seen.add(id(obj))
        if isinstance(obj, (list, tuple)):
            for i, item in enumerate(obj):
                walk(item, (*path, i))
        elif isinstance(obj, dict):
            for key, item in obj.items():
                walk(item, (*path, key))
        elif not isinstance(obj, type) and hasattr(obj, "__dict__") and type(obj).__module__ != "builtins":
            for name, item in vars(obj).items():
                if name not in _SKIPPED_ATTRIBUTES and (isinstance(item, torch.Tensor) or not callable(item)):
                    walk(item, (*path, name))

    walk(root, ())
    return found


def reset_copies(env: Any, ended: torch.Tensor) -> int:
    """Reset the copies of a VMAS ``Environment`` where ``ended`` (``[num_envs]`` bool) holds, in one call.

    VMAS resets either one copy (``reset_at(i)``: the whole scenario code runs once per copy) or
    all of them (``reset()``). With many ended copies the loop of ``reset_at`` calls costs more
    than the step itself, so this resets every copy with the scenario's batched reset and puts
    the copies that did not end back: every per-copy tensor reachable from the scenario (entity
    states, actions, the scenario's own tensors) keeps its old rows where ``ended`` is False.
    Copies that ended get a fresh start drawn by the scenario's own reset code (not the same
    draws as ``reset_at`` would give, the same distribution). The caller runs it in the env's
    random state (`VmasRandomState`), like VMAS's ``reset``.

    One host synchronisation: the number of ended copies (none: nothing to do; all: the batched
    reset alone, nothing to put back).

    Returns:
        The number of copies reset.
    """
    count = int(ended.sum())  # the one host synchronisation
    if count == 0:
        return 0
    if count == 1:  # one copy: VMAS's own per-copy reset (which a recording wrapper also sees)
        env.reset_at(int(ended.to(torch.int8).argmax()), return_observations=False)
        return count
    from vmas.simulator.environment.environment import local_seed

    scenario = env.scenario
    # VMAS's own reset/step draw from its random state (swapped in by local_seed): so does this reset.
    with local_seed(env.vmas_random_state):
        if count == env.num_envs:
            scenario.env_reset_world_at(env_index=None)
            env.steps.zero_()
            return count
        before = {path: tensor.clone() for path, tensor in _per_copy_tensors(scenario, env.num_envs).items()}
        scenario.env_reset_world_at(env_index=None)
    keep = ~ended
    for path, tensor in _per_copy_tensors(scenario, env.num_envs).items():
        old = before.get(path)
        if old is not None and old.shape == tensor.shape and old.dtype == tensor.dtype:
            rows = keep.view(-1, *([1] * (tensor.dim() - 1)))
            # In place: the scenario's tensors stay the objects it holds (other attributes may alias them).
            tensor.copy_(torch.where(rows, old, tensor))
    env.steps.masked_fill_(ended, 0)
    return count


class VmasVecEnv:
    """A VMAS ``Environment`` as a `VecEnv`, with auto-reset.

    ``reset()`` and ``step()`` return, per group, tensors ``[num_envs, agents_in_group, ...]`` on
    `device` (``observation``, ``valid``; after a step ``reward``, ``terminated``,
    ``truncated``, ``done``); copies whose episode ended are reset inside ``step``, all in one
    call (`reset_copies`; the step reports the final observation, `current` holds the
    reset one).

    Args:
        env: the VMAS environment (built with ``terminated_truncated=True``).
        spec: its [`EnvSpec`][lightmarl.envs.spec.EnvSpec] (`vmas_spec_of`).
        seed: the batch's reset seed.
        random_state: the vector's own VMAS random state (`VmasRandomState`).
        output_device: where the outputs live (and actions are expected): ``cpu`` (the default,
            whatever device VMAS simulates on), or VMAS's own device, so that a rollout on that
            device never copies a step's results to the host.
        batched_reset: ended copies reset in one call (`reset_copies`), or one
            ``reset_at`` call each.
    """

    def __init__(
        self,
        env: Any,
        spec: EnvSpec,
        seed: int,
        random_state: VmasRandomState,
        output_device: str | torch.device = "cpu",
        batched_reset: bool = True,
    ) -> None:
        if not getattr(env, "terminated_truncated", False):
            raise ValueError("VmasVecEnv needs a VMAS env built with terminated_truncated=True")
        self._env = env
        self._random_state = random_state
        self.spec = spec
        self.num_envs = int(env.num_envs)
        self.seed = seed
        self.seeds = [seed + i for i in range(self.num_envs)]
        #: where the outputs live and where actions are expected (the collector sends them there).
        self.device = torch.device(output_device)
        self.current: dict[str, dict[str, torch.Tensor]] = {}
        # Built once on the output device: a per-step copy from the host would synchronise a GPU.
        self._agent_ids: dict[str, torch.Tensor] = {
            g.name: torch.tensor(g.agent_ids, dtype=torch.int64, device=self.device) for g in spec.groups.values()
        }
        self._batched_reset = batched_reset
        self._discrete = {g.name: g.action_kind == "discrete" for g in spec.groups.values()}

    def _by_group(self, per_agent: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """VMAS's per-agent list -> group name -> ``[num_envs, agents_in_group, ...]`` on `device`."""
        return {
            g.name: torch.stack([per_agent[i] for i in g.agent_ids], dim=1).to(self.device, torch.float32)
            for g in self.spec.groups.values()
        }

    def _valid(self, group: GroupSpec) -> torch.Tensor:
        return torch.ones(self.num_envs, group.num_agents, dtype=torch.bool, device=self.device)

    def reset(self) -> dict[str, dict[str, torch.Tensor]]:
        with self._random_state.active():
            observations = self._env.reset(seed=self.seed)
        obs = self._by_group(observations)
        self.current = {
            g.name: {keys.OBSERVATION: obs[g.name], keys.VALID: self._valid(g)} for g in self.spec.groups.values()
        }
        return self.current

    def step(self, actions: dict[str, torch.Tensor]) -> tuple[dict[str, dict[str, torch.Tensor]], torch.Tensor]:
        """Step every copy; arguments and results as in [`step`][lightmarl.envs.base.VecEnv.step].

        With outputs on VMAS's device, the only host synchronisation this adds to VMAS's own
        step is `reset_copies`' count of ended copies.
        """
        device = self._env.device
        per_agent: list[Any] = [None] * len(self.spec.possible_agents)
        for g in self.spec.groups.values():
            try:
                group_actions = actions[g.name].to(device)
            except KeyError:
                raise KeyError(f"actions: no entry for group {g.name!r}") from None
            for j, i in enumerate(g.agent_ids):
                # VMAS wants [num_envs, 1] discrete actions and [num_envs, size] forces.
                per_agent[i] = group_actions[:, j].unsqueeze(-1) if self._discrete[g.name] else group_actions[:, j]
        with self._random_state.active():
            observations, rewards, terminated, truncated, infos = self._env.step(per_agent)
            ended_on_device = terminated | truncated
            reset_observations = None
            if self._batched_reset:
                any_reset = reset_copies(self._env, ended_on_device) > 0
            else:
                indices = ended_on_device.nonzero().flatten().tolist()
                for index in indices:
                    self._env.reset_at(index, return_observations=False)
                any_reset = bool(indices)
            if any_reset:
                reset_observations = self._env.get_from_scenario(
                    get_observations=True, get_rewards=False, get_infos=False, get_dones=False
                )[0]
        ended = ended_on_device.to(self.device, torch.bool)
        final = self._by_group(observations)
        reward = self._by_group(rewards)
        restarted = self._by_group(reset_observations) if reset_observations is not None else None
        terminated_out = terminated.to(self.device, torch.bool).view(-1, 1)
        truncated_out = truncated.to(self.device, torch.bool).view(-1, 1)
        nxt, current = {}, {}
        for g in self.spec.groups.values():
            rows = (self.num_envs, g.num_agents)
            # VMAS ends episodes for the whole team: every agent of the copy shares its flags.
            team_terminated = terminated_out.expand(rows).clone()
            team_truncated = truncated_out.expand(rows).clone()
            nxt[g.name] = {
                keys.OBSERVATION: final[g.name],
                keys.REWARD: reward[g.name],
                keys.TERMINATED: team_terminated,
                keys.TRUNCATED: team_truncated,
                keys.DONE: team_terminated | team_truncated,
                **self._info_fields(g, infos),
            }
            observation = final[g.name]
            if restarted is not None:
                # torch.where, not a masked assignment: boolean indexing would synchronise a GPU.
                shape = (self.num_envs, *([1] * (observation.dim() - 1)))
                observation = torch.where(ended.view(shape), restarted[g.name], observation)
            else:
                observation = observation.clone()
            current[g.name] = {keys.OBSERVATION: observation, keys.VALID: self._valid(g)}
        self.current = current
        return nxt, ended

    def _info_fields(self, group: GroupSpec, infos: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """``info/<field>`` ``[num_envs, agents_in_group]`` of the spec's info fields (NaN where an agent's info lacks one)."""
        out = {}
        for name in self.spec.info_fields:
            values = torch.full((self.num_envs, group.num_agents), float("nan"), device=self.device)
            for j, i in enumerate(group.agent_ids):
                value = infos[i].get(name)
                if value is None:
                    continue
                value = torch.as_tensor(value).to(self.device, torch.float32)
                if value.numel() not in (1, self.num_envs):
                    raise RuntimeError(
                        f"VMAS scenario {self.spec.name!r}: info field {name!r} of agent "
                        f"{self.spec.possible_agents[i]!r} has shape {tuple(value.shape)}, not one number per env "
                        "copy; env info_fields must name numeric per-copy fields"
                    )
                values[:, j] = value.reshape(-1)
            out[keys.info_key(name)] = values
        return out

    def observation_td(self) -> TensorDict:
        """As `observation_td`: per group ``observation``, ``valid``, ``agent_id``."""
        return observation_td(self.spec, self.current, self.num_envs, self._agent_ids)

    def render(self, index: int = 0) -> Any:
        """An RGB frame ``[height, width, 3]`` (uint8) of copy ``index``.

        VMAS draws with pyglet's OpenGL: off-screen through EGL where ``libEGL`` finds a device
        (Mesa's software one counts, so no display is needed), otherwise in a window, which needs
        a display (``DISPLAY``, e.g. Xvfb).

        Raises:
            IndexError: ``index`` is not a copy of this vector.
            RuntimeError: naming the scenario when VMAS cannot draw here.
        """
        if not 0 <= index < self.num_envs:
            raise IndexError(f"render: env copy {index} out of range for {self.num_envs} copies")
        with self._random_state.active():
            return render_rgb(self._env, index, self.spec.name)

    def close(self) -> None:
        viewer = getattr(self._env, "viewer", None)
        if viewer is not None:
            viewer.close()
            self._env.viewer = None
