"""A trained population, ready to act in PettingZoo's own loop: [`load_population`][lightmarl.inference.population.load_population].

>>> population = load_population("runs/quickstart")            # doctest: +SKIP
>>> observations, infos = env.reset(seed=0)                     # doctest: +SKIP
>>> while env.agents:                                           # doctest: +SKIP
...     observations, *_ = env.step(population.act(observations))

``act`` takes and returns PettingZoo dicts (agent -> observation, agent -> action) of a
parallel env; ``act_turn(agent, observation)`` acts for the agent whose turn it is in an AEC
env (its ``action_mask`` respected). Everything a policy needs to see its inputs as in training
happens inside: the env transforms (normalization statistics, frame stacks, image ops), the
agent -> binding map, action masks, each agent's recurrent state (reset by [`Population.reset`][lightmarl.inference.population.Population.reset]).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec
from lightmarl.inference.observations import ObservationPipeline, group_of_agents
from lightmarl.policies.artifact import SavedPopulation, Snapshot, read_artifact
from lightmarl.policies.base import Policy
from lightmarl.policies.registry import build_policies


def load_population(
    path: str | Path, *, allow: Collection[str] = (), trust_code: bool = False, device: str | torch.device = "cpu"
) -> Population:
    """Load a trained population to act: from a run directory, a checkpoint, an export or a league snapshot.

    Files are read weights-only; the classes they name are built only if they are lightmarl's
    own (policies, encoders, env transforms) or listed in ``allow``, or with ``trust_code``
    (the loading rule of [`lightmarl.trust`][lightmarl.trust]).

    Args:
        path: a run directory (``runs/<name>``: its newest checkpoint), a training checkpoint, an
            export directory (``lightmarl export``, `PolicyDict.export`) or a league snapshot file.
        allow: class paths outside lightmarl (e.g. a game's policy in ``examples/``) to trust.
        trust_code: build whatever classes the file names (you trust its author).
        device: where the policies run.

    Raises:
        ValueError: naming the path when it is none of those, cannot be read, or names a class
            that is not allowed.
    """
    return Population(read_artifact(path), allow=allow, trust_code=trust_code, device=device)


class Population:
    """The policies of a saved population, its env transforms and agent -> binding map (see [`population`][lightmarl.inference.population]).

    Args:
        artifact: what [`read_artifact`][lightmarl.policies.artifact.read_artifact] read.
        allow: class paths outside lightmarl to trust.
        trust_code: build whatever classes the artifact names.
        device: where the policies run.

    Attributes:
        bindings: binding id -> policy (a ``torch.nn.Module`` in eval mode).
        agent_map: agent -> the binding that acts for it (the run's default map).
        agent_map_per_env: env copy -> {agent -> binding} where the run seated copies differently (a league).
        groups: group name -> [`GroupSpec`][lightmarl.envs.spec.GroupSpec] (the spaces the policies read).
        env: the env's description as the run recorded it (``env_fn``, ``env_kwargs``, ``possible_agents``, ...).
        frames: env steps the run trained for (0 for sources without counters).
        iterations: training iterations of the run.
        mixtures: league mixtures: name -> {member (binding or snapshot id) -> weight}.
        transforms: the env transforms applied inside [`act`][lightmarl.inference.population.Population.act] (settings and frozen statistics).
    """

    def __init__(
        self,
        artifact: SavedPopulation,
        *,
        allow: Collection[str] = (),
        trust_code: bool = False,
        device: str | torch.device = "cpu",
    ) -> None:
        artifact.check_classes(allow, trust_code=trust_code)
        self.artifact = artifact
        self.allow = tuple(allow)
        self.device = torch.device(device)
        self.groups = {name: artifact.group_spec(name) for name in artifact.groups}
        self.pipeline = ObservationPipeline(artifact, self.allow, trust_code=trust_code)
        self.transforms = self.pipeline.transforms
        self.bindings: dict[str, Policy] = build_policies(artifact, groups=self.groups, host_transforms=self.transforms)
        for policy in self.bindings.values():
            policy.to(self.device).eval().requires_grad_(False)
        self.agent_map: dict[str, str] = dict(artifact.agent_binding_map.get("default", {}))
        self.agent_map_per_env: dict[int, dict[str, str]] = {
            int(k): dict(v) for k, v in artifact.agent_binding_map.get("per_env", {}).items()
        }
        self.env = dict(artifact.env)
        self.frames = int(artifact.counters.get("frames", 0))
        self.iterations = int(artifact.counters.get("iterations", 0))
        self.mixtures = {name: dict(members) for name, members in artifact.mixtures.items()}
        self._where = group_of_agents(self.groups)
        self._states: dict[str, torch.Tensor] = {}  # recurrent binding -> [1, agents, *state_shape]
        self._is_init = True
        for agent, binding in self.agent_map.items():
            if binding not in self.bindings:
                raise ValueError(f"{artifact.source!r}: agent {agent!r} is mapped to unknown binding {binding!r}")

    # -- metadata -------------------------------------------------------------------------
    def __repr__(self) -> str:
        snapshots = [s.id for s in self.artifact.snapshots]
        shown = snapshots if len(snapshots) <= 6 else [*snapshots[:3], "...", *snapshots[-2:]]
        return (
            f"Population({self.artifact.source!r}: bindings {sorted(self.bindings)}, agents {self.agent_map}, "
            f"{len(snapshots)} league snapshots {shown}, mixtures {sorted(self.mixtures)}, frames {self.frames:,})"
        )

    def snapshots(self) -> list[Snapshot]:
        """The league's snapshots (id, parent player, how to build it, where its weights are)."""
        return list(self.artifact.snapshots)

    def snapshot_policy(self, snapshot_id: str) -> Policy:
        """The policy of league snapshot ``snapshot_id``, built and loaded (eval mode)."""
        saved = self.artifact.snapshot_population(snapshot_id)
        (policy,) = build_policies(saved, groups=self.groups, field=f"snapshot {snapshot_id!r}").values()
        return policy.to(self.device).eval().requires_grad_(False)

    def seat(self, agent_map: Mapping[str, str]) -> None:
        """Change who acts for whom: ``{agent: binding or snapshot id}``; snapshots join as frozen bindings.

        Raises:
            ValueError: for an unknown agent or binding, or a binding of another agent group.
        """
        snapshot_ids = {s.id for s in self.artifact.snapshots}
        for agent, binding in agent_map.items():
            if agent not in self._where:
                raise ValueError(f"seat: no agent {agent!r}; the agents are {list(self.agent_map)}")
            if binding not in self.bindings:
                if binding not in snapshot_ids:
                    raise ValueError(
                        f"seat: no binding or snapshot {binding!r}; bindings {sorted(self.bindings)}, "
                        f"snapshots {sorted(snapshot_ids)}"
                    )
                self.bindings[binding] = self.snapshot_policy(binding)
            group = self._where[agent][0]
            if self.bindings[binding].group.name != group:
                raise ValueError(
                    f"seat: binding {binding!r} acts for group {self.bindings[binding].group.name!r}, agent {agent!r} "
                    f"is in group {group!r}"
                )
            self.agent_map[self._name(agent)] = binding
        self.reset()

    def reset(self) -> None:
        """A new episode: recurrent states and frame stacks start afresh."""
        self._states = {}
        self._is_init = True
        self.pipeline.reset()

    # -- acting ---------------------------------------------------------------------------
    def act(self, observations: Mapping[Any, Any], *, greedy: bool = True) -> dict[Any, Any]:
        """Actions of every agent in ``observations`` (a PettingZoo parallel env's dict).

        Args:
            observations: agent -> its observation (an array, or PettingZoo's dict with
                ``observation`` and ``action_mask``), as ``env.reset()`` / ``env.step()`` return them.
            greedy: the most likely action (``True``), or a sample of the policy's distribution.

        Returns:
            agent -> action (an ``int`` for discrete actions, a NumPy array otherwise), keyed as given.

        Raises:
            ValueError: naming the agent and its binding, for an agent the population does not know,
                a masked binding's agent whose observation has no ``action_mask`` or whose mask allows
                no action, and an observation that is not numbers, has another shape than its group's
                or holds NaN or infinite values.
        """
        return self._act(observations, greedy=greedy, advance=None)

    def act_turn(self, agent: Any, observation: Any, *, greedy: bool = True) -> Any:
        """The action of ``agent`` whose turn it is in an AEC env (``env.last()``'s observation).

        Only that agent's recurrent state advances. A masked group's observation must carry its
        ``action_mask``; the action is always a legal one under it.
        """
        return self._act({agent: observation}, greedy=greedy, advance=agent)[agent]

    def _name(self, agent: Any) -> str:
        group, i = self._where[agent]
        return self.groups[group].agents[i]

    def _act(self, observations: Mapping[Any, Any], *, greedy: bool, advance: Any) -> dict[Any, Any]:
        rows: dict[str, torch.Tensor] = {g: self.pipeline.empty(g) for g in self.groups}
        valid = {g: torch.zeros(1, spec.num_agents, dtype=torch.bool) for g, spec in self.groups.items()}
        masks: dict[str, torch.Tensor] = {
            g: torch.ones(1, spec.num_agents, spec.num_actions, dtype=torch.bool)
            for g, spec in self.groups.items()
            if spec.has_action_mask
        }
        placed: list[tuple[Any, str, int]] = []
        for agent, observation in observations.items():
            if agent not in self._where:
                raise ValueError(f"act: unknown agent {agent!r}; the population's agents are {list(self.agent_map)}")
            group, i = self._where[agent]
            binding = self.agent_map.get(self.groups[group].agents[i])
            if binding is None:
                raise ValueError(
                    f"act: no binding acts for agent {agent!r} (the population has {sorted(self.bindings)})"
                )
            if isinstance(observation, Mapping):
                if group in masks:
                    if keys.ACTION_MASK not in observation:
                        raise ValueError(self._mask_message(agent, binding, group))
                    masks[group][0, i] = self._mask_row(
                        agent, binding, observation[keys.ACTION_MASK], masks[group][0, i]
                    )
                if keys.OBSERVATION not in observation:
                    raise ValueError(
                        f"act: agent {agent!r} (binding {binding!r}): the dict has no {keys.OBSERVATION!r}"
                    )
                observation = observation[keys.OBSERVATION]
            elif group in masks:
                raise ValueError(self._mask_message(agent, binding, group))
            rows[group][0, i] = self._observation_row(agent, binding, group, observation, rows[group][0, i])
            valid[group][0, i] = True
            placed.append((agent, group, i))
        transformed = self.pipeline(rows, valid)
        outputs: dict[tuple[str, str], torch.Tensor] = {}
        exploration = ExplorationType.DETERMINISTIC if greedy else ExplorationType.RANDOM
        with torch.no_grad(), set_exploration_type(exploration):
            for group, spec in self.groups.items():
                used = {self.agent_map[self.groups[group].agents[i]] for (_, g, i) in placed if g == group}
                for binding in sorted(used):
                    outputs[(group, binding)] = self._forward(
                        binding, spec, transformed[group], masks.get(group), valid[group], advance
                    )
        self._is_init = False
        actions = {}
        for agent, group, i in placed:
            action = outputs[(group, self.agent_map[self.groups[group].agents[i]])][0, i].cpu()
            actions[agent] = int(action) if self.groups[group].action_kind == "discrete" else action.numpy()
        return actions

    def _forward(
        self,
        binding: str,
        spec: GroupSpec,
        observation: torch.Tensor,
        mask: torch.Tensor | None,
        valid: torch.Tensor,
        advance: Any,
    ) -> torch.Tensor:
        policy = self.bindings[binding]
        entries: dict[str, torch.Tensor] = {
            keys.OBSERVATION: observation.to(self.device),
            keys.AGENT_ID: torch.tensor([spec.agent_ids], device=self.device),
        }
        if mask is not None:
            entries[keys.ACTION_MASK] = mask.to(self.device)
        recurrent = getattr(policy, "is_recurrent", False)
        if recurrent:
            state = self._states.get(binding)
            if state is None:
                shape: tuple[int, ...] = tuple(getattr(policy, "state_shape", ()))
                state = torch.zeros(1, spec.num_agents, *shape, device=self.device)
            entries[keys.RECURRENT_STATE] = state
            entries[keys.IS_INIT] = torch.full((1, spec.num_agents), self._is_init, device=self.device)
        td = TensorDict({spec.name: TensorDict(entries, batch_size=[1, spec.num_agents])}, batch_size=[1])
        result = policy(td).get(spec.name)
        if recurrent:
            new = result.get(keys.NEXT_RECURRENT_STATE)
            if advance is not None:  # a turn: only the acting agent's memory moves on
                keep = torch.zeros(1, spec.num_agents, dtype=torch.bool, device=self.device)
                keep[0, self._where[advance][1]] = True
                new = torch.where(keep.view(1, -1, *([1] * (new.dim() - 2))), new, entries[keys.RECURRENT_STATE])
            self._states[binding] = new
        return result.get(keys.ACTION)

    def _observation_row(
        self, agent: Any, binding: str, group: str, observation: Any, row: torch.Tensor
    ) -> torch.Tensor:
        """One agent's observation as its group's row; a non-numeric, misshapen or non-finite one is refused:
        a policy would act on it without a word (NaN observations give every agent action 0)."""
        where = f"act: agent {agent!r} (binding {binding!r})"
        try:
            frame = np.asarray(self.pipeline.frame(group, observation))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: the observation is not an array of numbers ({err})") from None
        if frame.dtype.kind not in "biuf":
            raise ValueError(f"{where}: the observation holds {frame.dtype} values; expected numbers")
        if tuple(frame.shape) != tuple(row.shape):
            raise ValueError(
                f"{where}: the observation has shape {list(frame.shape)}; group {group!r} observes {list(row.shape)}"
            )
        values = torch.as_tensor(frame)
        if values.is_floating_point() and not bool(torch.isfinite(values).all()):
            bad = int((~torch.isfinite(values)).sum())
            raise ValueError(
                f"{where}: the observation holds {bad} non-finite (NaN or infinite) of {values.numel()} values"
            )
        return values.to(row.dtype)

    @staticmethod
    def _mask_row(agent: Any, binding: str, mask: Any, row: torch.Tensor) -> torch.Tensor:
        """An agent's action mask; one that allows no action is refused (the action would not be legal)."""
        where = f"act: agent {agent!r} (binding {binding!r})"
        try:
            values = torch.as_tensor(np.asarray(mask).astype(bool))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: the action_mask is not an array of booleans ({err})") from None
        if tuple(values.shape) != tuple(row.shape):
            raise ValueError(f"{where}: the action_mask has shape {list(values.shape)}; expected {list(row.shape)}")
        if not bool(values.any()):
            raise ValueError(f"{where}: the action_mask allows no action; there is no legal action to return")
        return values

    def _mask_message(self, agent: Any, binding: str, group: str) -> str:
        return (
            f"act: binding {binding!r} (group {group!r}) acts under an action mask, but agent {agent!r}'s observation "
            f"has no {keys.ACTION_MASK!r}: pass PettingZoo's dict observation {{'observation': ..., "
            f"'{keys.ACTION_MASK}': ...}} (env.last() / env.observe(agent) of an AEC env)"
        )
