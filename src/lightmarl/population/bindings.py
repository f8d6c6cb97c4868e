"""Policy bindings: which policy controls which agent, and which losses may use its rows.

Plain, validated data plus the index tensors derived from it; no networks live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import torch

from lightmarl.envs.spec import EnvSpec

DEFAULT_BINDING_ID = "main"
DEFAULT_POLICY_CLASS = "lightmarl.policies.MLPActorCritic"
DEFAULT_LOSS_PROFILE = "default"


@dataclass
class PolicyBinding:
    """One policy instance of the population.

    Attributes:
        id: unique name; appears in metrics (``train/<id>/...``) and checkpoints.
        class_path: import path of a policy class (neural or scripted), built with
            ``class(group_spec, **policy_kwargs)``. Exactly one of ``class_path`` / ``policy_uri``.
        policy_uri: a saved policy to load (e.g. ``path/to/last.ckpt#binding``).
        policy_kwargs: keyword arguments for the policy class.
        trainable: whether this binding learns; frozen bindings act but get no gradients.
        loss_profile: name of the loss profile its rows carry (``loss_profiles`` key).
        device: device for this binding's policy at collection time (default: the module's).
    """

    id: str
    class_path: str | None = None
    policy_uri: str | None = None
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    trainable: bool = True
    loss_profile: str = DEFAULT_LOSS_PROFILE
    device: str | None = None


class PolicyBindingConfig(TypedDict):
    """A :class:`PolicyBinding` as written in a recipe (same fields; only ``id`` is required)."""

    id: str
    class_path: NotRequired[str | None]
    policy_uri: NotRequired[str | None]
    policy_kwargs: NotRequired[dict[str, Any]]
    trainable: NotRequired[bool]
    loss_profile: NotRequired[str]
    device: NotRequired[str | None]


def as_binding(spec: PolicyBinding | PolicyBindingConfig | dict[str, Any]) -> PolicyBinding:
    """Accept a :class:`PolicyBinding` or its recipe form."""
    if isinstance(spec, PolicyBinding):
        return spec
    try:
        return PolicyBinding(**spec)
    except TypeError as err:
        raise ValueError(f"policy_bindings: invalid binding {spec!r}: {err}") from None


def default_bindings() -> list[PolicyBinding]:
    """The single binding a recipe without ``policy_bindings`` gets."""
    return [PolicyBinding(id=DEFAULT_BINDING_ID, class_path=DEFAULT_POLICY_CLASS)]


@dataclass(frozen=True)
class GroupBindingIndex:
    """Cached row grouping of one agent group.

    Attributes:
        binding_of_agent: ``[agents_in_group]`` binding index of each agent of the group.
        agents_of_binding: binding index -> positions (within the group) of its agents.
        covers_group: binding index -> True when that binding controls the whole group
            (its forward can skip the gather/scatter).
    """

    binding_of_agent: torch.Tensor
    agents_of_binding: dict[int, torch.Tensor]
    covers_group: dict[int, bool]


class BindingTable:
    """The validated population: bindings, agent -> binding map, loss profiles.

    Args:
        bindings: the bindings; ``None`` synthesizes one trainable binding ``main``.
        env_spec: the env the population plays in.
        agent_binding_map: one binding id per agent of ``env_spec.possible_agents``;
            ``None`` maps every agent to the first binding.
        loss_profiles: profile name -> loss names that may run on rows with that profile;
            ``None`` gives a single profile ``default`` under which every loss runs.

    Raises:
        ValueError: for any inconsistency, naming the field and the bad value.
    """

    def __init__(
        self,
        bindings: list[PolicyBinding] | list[PolicyBindingConfig] | None,
        env_spec: EnvSpec,
        agent_binding_map: list[str] | None = None,
        loss_profiles: dict[str, list[str]] | None = None,
    ) -> None:
        self.bindings = [as_binding(b) for b in bindings] if bindings else default_bindings()
        self.env_spec = env_spec
        self.loss_profiles: dict[str, list[str] | None] = (
            {DEFAULT_LOSS_PROFILE: None} if loss_profiles is None else {k: list(v) for k, v in loss_profiles.items()}
        )
        self._validate_bindings()
        self.ids = [b.id for b in self.bindings]
        self.index = {b.id: i for i, b in enumerate(self.bindings)}
        self.profile_names = list(self.loss_profiles)
        self.agent_binding_map = self._resolve_map(agent_binding_map)
        self.group_of_binding = self._group_of_bindings()
        self.groups = {name: self._group_index(name) for name in env_spec.groups}
        self.trainable = torch.tensor([b.trainable for b in self.bindings], dtype=torch.bool)
        self.profile_of_binding = torch.tensor(
            [self.profile_names.index(b.loss_profile) for b in self.bindings], dtype=torch.int64
        )

    # -- validation ---------------------------------------------------------------------
    def _validate_bindings(self) -> None:
        seen: set[str] = set()
        for i, b in enumerate(self.bindings):
            where = f"policy_bindings[{i}]"
            if not isinstance(b.id, str) or not b.id:
                raise ValueError(f"{where}.id: expected a non-empty string, got {b.id!r}")
            if b.id in seen:
                raise ValueError(f"{where}.id: duplicate binding id {b.id!r}; ids must be unique")
            seen.add(b.id)
            if (b.class_path is None) == (b.policy_uri is None):
                raise ValueError(
                    f"{where} ({b.id!r}): set exactly one of class_path / policy_uri "
                    f"(got class_path={b.class_path!r}, policy_uri={b.policy_uri!r})"
                )
            if b.loss_profile not in self.loss_profiles:
                raise ValueError(
                    f"{where}.loss_profile: {b.loss_profile!r} is not a loss profile; "
                    f"defined profiles are {sorted(self.loss_profiles)}"
                )

    def _resolve_map(self, agent_binding_map: list[str] | None) -> list[str]:
        agents = self.env_spec.possible_agents
        if agent_binding_map is None:
            return [self.bindings[0].id] * len(agents)
        if len(agent_binding_map) != len(agents):
            raise ValueError(
                f"agent_binding_map: expected one binding id per agent ({len(agents)} agents: {list(agents)}), "
                f"got {len(agent_binding_map)} entries {list(agent_binding_map)}"
            )
        for agent, binding_id in zip(agents, agent_binding_map):
            if binding_id not in self.index:
                raise ValueError(
                    f"agent_binding_map: agent {agent!r} is mapped to unknown binding {binding_id!r}; "
                    f"bindings are {self.ids}"
                )
        return list(agent_binding_map)

    def _group_of_bindings(self) -> dict[str, str]:
        group_of: dict[str, str] = {}
        for agent, binding_id in zip(self.env_spec.possible_agents, self.agent_binding_map):
            group = self.env_spec.group_of(agent).name
            if group_of.setdefault(binding_id, group) != group:
                raise ValueError(
                    f"agent_binding_map: binding {binding_id!r} controls agents of groups "
                    f"{group_of[binding_id]!r} and {group!r}; a binding controls agents of one group "
                    "(agents with the same spaces): use one binding per group"
                )
        return group_of

    def _group_index(self, group_name: str) -> GroupBindingIndex:
        group = self.env_spec.groups[group_name]
        of_agent = torch.tensor(
            [self.index[self.agent_binding_map[agent_id]] for agent_id in group.agent_ids], dtype=torch.int64
        )
        agents_of = {
            int(b): torch.nonzero(of_agent == b).flatten() for b in torch.unique(of_agent, sorted=True).tolist()
        }
        covers = {b: len(idx) == group.num_agents for b, idx in agents_of.items()}
        return GroupBindingIndex(binding_of_agent=of_agent, agents_of_binding=agents_of, covers_group=covers)

    # -- queries --------------------------------------------------------------------------
    def binding(self, binding_id: str) -> PolicyBinding:
        return self.bindings[self.index[binding_id]]

    @property
    def trainable_ids(self) -> list[str]:
        return [b.id for b in self.bindings if b.trainable]

    @property
    def active_ids(self) -> list[str]:
        """Bindings that control at least one agent."""
        return [b for b in self.ids if b in self.group_of_binding]

    def require_trainable(self) -> None:
        """Training needs at least one trainable binding that controls an agent."""
        if not any(b in self.group_of_binding for b in self.trainable_ids):
            raise ValueError(
                "policy_bindings: training needs at least one binding with trainable: true that controls an agent "
                f"(bindings: {[(b.id, b.trainable) for b in self.bindings]}, map: {self.agent_binding_map})"
            )

    def profile_allows(self, binding_id: str, loss_name: str) -> bool:
        allowed = self.loss_profiles[self.binding(binding_id).loss_profile]
        return allowed is None or loss_name in allowed
