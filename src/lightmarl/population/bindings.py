"""Policy bindings: which policy controls which agent, and which losses may use its rows.

Plain, validated data plus the index tensors derived from it; no networks live here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NotRequired, TypedDict, cast

import torch

from lightmarl._imports import import_object, plain_data
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
        trust_pickle: let ``policy_uri`` load a file holding pickled Python objects. Unpickling can
            run code, so by default only tensors and plain data are read (every file lightmarl
            writes is such a file); set it only for files from an author you trust.
        trust_code: let ``policy_uri`` build classes the file names that are neither
            ``lightmarl.policies`` classes nor named by the recipe ([`lightmarl.trust`][lightmarl.trust]). Importing
            and building them runs their code; set it only for files from an author you trust.
    """

    id: str
    class_path: str | None = None
    policy_uri: str | None = None
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    trainable: bool = True
    loss_profile: str = DEFAULT_LOSS_PROFILE
    device: str | None = None
    trust_pickle: bool = False
    trust_code: bool = False

    def __post_init__(self) -> None:
        self.policy_kwargs = plain_data(self.policy_kwargs)


class PolicyBindingConfig(TypedDict):
    """A [`PolicyBinding`][lightmarl.population.bindings.PolicyBinding] as written in a recipe (same fields; only ``id`` is required)."""

    id: str
    class_path: NotRequired[str | None]
    policy_uri: NotRequired[str | None]
    policy_kwargs: NotRequired[dict[str, Any]]
    trainable: NotRequired[bool]
    loss_profile: NotRequired[str]
    device: NotRequired[str | None]
    trust_pickle: NotRequired[bool]
    trust_code: NotRequired[bool]


def as_binding(spec: PolicyBinding | PolicyBindingConfig | dict[str, Any]) -> PolicyBinding:
    """Accept a [`PolicyBinding`][lightmarl.population.bindings.PolicyBinding] or its recipe form."""
    if isinstance(spec, PolicyBinding):
        return spec
    try:
        return PolicyBinding(**spec)
    except TypeError as err:
        raise ValueError(f"policy_bindings: invalid binding {spec!r}: {err}") from None


def default_bindings() -> list[PolicyBinding]:
    """The single binding a recipe without ``policy_bindings`` gets."""
    return [PolicyBinding(id=DEFAULT_BINDING_ID, class_path=DEFAULT_POLICY_CLASS)]


class PerEnvAgentBindingMap(TypedDict):
    """An ``agent_binding_map`` that differs between env copies, as written in a recipe.

    Example (3 agents, 4 env copies; copies 1 and 2 play the default map)::

        agent_binding_map:
          default: [a, b, a]
          per_env:
            0: [b, b, b]
            3: [a, a, b]

    Attributes:
        default: one binding id per agent for env copies without an override (omitted: every
            agent -> the first binding).
        per_env: env copy index (``0 .. num_envs - 1`` of one process) -> one binding id per agent.
    """

    default: NotRequired[list[str] | None]
    per_env: dict[int, list[str]]


#: What ``agent_binding_map`` accepts: one binding id per agent, or a per-env override.
AgentBindingMap = list[str] | PerEnvAgentBindingMap


def resolve_policy_mapping_fn(fn: str | Callable[[str], str]) -> Callable[[str], str]:
    """Import ``policy_mapping_fn`` (``package.module.function``) unless it already is a callable.

    Raises:
        ValueError: when the path does not import or does not name a callable.
    """
    if callable(fn):
        return fn
    if not isinstance(fn, str) or "." not in fn:
        raise ValueError(
            f"policy_mapping_fn: expected an import path such as 'my_pkg.mapping.assign' "
            f"(a function agent_name -> binding id), got {fn!r}"
        )
    obj = import_object(fn, field="policy_mapping_fn")
    if not callable(obj):
        raise ValueError(f"policy_mapping_fn: {fn!r} is a {type(obj).__name__}, not a callable agent_name -> id")
    return cast(Callable[[str], str], obj)


@dataclass(frozen=True)
class PaddedRows:
    """A group's rows, binding by binding, padded to equal length.

    Attributes:
        bindings: binding indices, in the order of the first dim of ``gather``.
        gather: ``[bindings, max_rows]`` row positions to read (padded with each binding's first row).
        slots: positions of the real (unpadded) entries in ``gather.flatten()``; ``None`` when no
            binding needed padding.
        scatter: the row position of each real entry, in the order of ``slots``.
    """

    bindings: tuple[int, ...]
    gather: torch.Tensor
    slots: torch.Tensor | None
    scatter: torch.Tensor


@dataclass(frozen=True)
class GroupBindingIndex:
    """Cached row grouping of one agent group, as `MultiAgentPolicy` and the collector use it.

    When every env copy plays the same map the grouping is along the agent dim; with a
    per-env map it is over flat positions of the group's rows ``[*batch, agents]``
    (``batch[0]`` being the env copies).

    Attributes:
        binding_of_agent: binding index of each agent: ``[agents]`` (same map in every env copy)
            or ``[*batch, agents]`` (per-env map).
        agents_of_binding: binding index -> positions of its rows, ascending: agent positions
            within the group, or flat positions over ``[*batch, agents]`` when ``flat``.
        covers_group: binding index -> True when that binding controls every row of the group
            (its forward can skip the gather/scatter).
        flat: positions are flat row positions (per-env map) rather than agent positions.
    """

    binding_of_agent: torch.Tensor
    agents_of_binding: dict[int, torch.Tensor]
    covers_group: dict[int, bool]
    flat: bool = False
    # Copies of this index on other devices ([`to`][lightmarl.population.bindings.GroupBindingIndex.to]), built once each.
    _on_device: dict[torch.device, GroupBindingIndex] = field(default_factory=dict, compare=False, repr=False)

    def to(self, device: torch.device | str) -> GroupBindingIndex:
        """This index with its position tensors on ``device`` (cached: the collector asks every step).

        The table builds indices on the CPU; rows on a GPU must be indexed by positions there.
        """
        device = torch.device(device)
        if device == self.binding_of_agent.device:
            return self
        moved = self._on_device.get(device)
        if moved is None:
            moved = GroupBindingIndex(
                binding_of_agent=self.binding_of_agent.to(device),
                agents_of_binding={b: rows.to(device) for b, rows in self.agents_of_binding.items()},
                covers_group=self.covers_group,
                flat=self.flat,
            )
            self._on_device[device] = moved
        return moved

    @cached_property
    def padded(self) -> PaddedRows:
        """The rows laid out ``[bindings, max_rows]`` for a stacked forward of same-shaped policies."""
        positions = list(self.agents_of_binding.values())
        width = max(len(p) for p in positions)
        # Pads repeat the binding's first row: valid input, and the results are dropped.
        gather = torch.stack([torch.cat([p, p[:1].expand(width - len(p))]) for p in positions])
        slots = None
        if any(len(p) != width for p in positions):
            slots = torch.cat([torch.arange(len(p), device=p.device) + i * width for i, p in enumerate(positions)])
        return PaddedRows(
            bindings=tuple(self.agents_of_binding), gather=gather, slots=slots, scatter=torch.cat(positions)
        )

    @classmethod
    def build(cls, binding_of_agent: torch.Tensor, flat: bool) -> GroupBindingIndex:
        positions = binding_of_agent.reshape(-1) if flat else binding_of_agent
        rows_of = {
            int(b): torch.nonzero(positions == b).flatten() for b in torch.unique(positions, sorted=True).tolist()
        }
        covers = {b: len(idx) == positions.numel() for b, idx in rows_of.items()}
        return cls(binding_of_agent=binding_of_agent, agents_of_binding=rows_of, covers_group=covers, flat=flat)


class BindingTable:
    """The validated population: bindings, agent -> binding map, loss profiles.

    The map is either one binding id per agent (every env copy), the same plus per-env
    overrides ([`PerEnvAgentBindingMap`][lightmarl.population.bindings.PerEnvAgentBindingMap]), or ``policy_mapping_fn``, a function
    ``agent_name -> binding_id`` given by import path. The row grouping derived from it is
    cached ([`row_index`][lightmarl.population.bindings.BindingTable.row_index]) and rebuilt only by [`set_agent_binding_map`][lightmarl.population.bindings.BindingTable.set_agent_binding_map], which a
    league can call between episodes.

    Args:
        bindings: the bindings; ``None`` synthesizes one trainable binding ``main``.
        env_spec: the env the population plays in.
        agent_binding_map: one binding id per agent of ``env_spec.possible_agents``, or
            ``{default: [...], per_env: {env_index: [...]}}``; ``None`` maps every agent to the
            first binding (unless ``policy_mapping_fn`` is set).
        loss_profiles: profile name -> loss names that may run on rows with that profile;
            ``None`` gives a single profile ``default`` under which every loss runs.
        policy_mapping_fn: import path (or callable) of ``fn(agent_name) -> binding_id``; an
            alternative to ``agent_binding_map``.
        num_envs: env copies of one process, to check ``per_env`` indices now; without it they
            are checked by [`check_num_envs`][lightmarl.population.bindings.BindingTable.check_num_envs] (the collector calls it before its first step).

    Raises:
        ValueError: for any inconsistency, naming the field and the bad value.
    """

    def __init__(
        self,
        bindings: list[PolicyBinding] | list[PolicyBindingConfig] | None,
        env_spec: EnvSpec,
        agent_binding_map: AgentBindingMap | None = None,
        loss_profiles: dict[str, list[str]] | None = None,
        policy_mapping_fn: str | Callable[[str], str] | None = None,
        num_envs: int | None = None,
    ) -> None:
        if bindings is not None and len(bindings) == 0:
            # An empty list would quietly become the default binding: say so instead.
            raise ValueError(
                "model.policy_bindings: the list is empty; list at least one binding, or leave policy_bindings "
                "unset for the default (one trainable 'main' binding of lightmarl.policies.MLPActorCritic)"
            )
        self.bindings = [as_binding(b) for b in bindings] if bindings else default_bindings()
        self.env_spec = env_spec
        self.loss_profiles: dict[str, list[str] | None] = (
            {DEFAULT_LOSS_PROFILE: None} if loss_profiles is None else {k: list(v) for k, v in loss_profiles.items()}
        )
        self._validate_bindings()
        self.ids = [b.id for b in self.bindings]
        self.index = {b.id: i for i, b in enumerate(self.bindings)}
        self.profile_names = list(self.loss_profiles)
        self.trainable = torch.tensor([b.trainable for b in self.bindings], dtype=torch.bool)
        self.profile_of_binding = torch.tensor(
            [self.profile_names.index(b.loss_profile) for b in self.bindings], dtype=torch.int64
        )
        self.num_envs = num_envs
        #: bumped by every map change; holders of derived state compare it to know when to refresh.
        self.version = 0
        #: bindings that act in a group without controlling an agent now ([`reserve`][lightmarl.population.bindings.BindingTable.reserve]).
        self.reserved: dict[str, str] = {}
        self.set_agent_binding_map(agent_binding_map, policy_mapping_fn)

    # -- the map --------------------------------------------------------------------------
    def set_agent_binding_map(
        self,
        agent_binding_map: AgentBindingMap | None = None,
        policy_mapping_fn: str | Callable[[str], str] | None = None,
    ) -> None:
        """Validate and install a new map (same forms as the constructor) and rebuild the row index cache.

        Nothing changes when validation fails. Call it between rollouts: experience already
        collected keeps the annotations of the map it was collected with.
        """
        default, per_env = self._resolve_map(agent_binding_map, policy_mapping_fn)
        group_of = self._group_of_bindings([default, *per_env.values()], per_env)
        if self.num_envs is not None:
            self._check_env_indices(per_env, self.num_envs)
        self.agent_binding_map = default
        self.per_env_maps = per_env
        self.policy_mapping_fn = policy_mapping_fn
        self.group_of_binding = group_of
        self.groups = {name: self._group_index(name) for name in self.env_spec.groups}
        self._row_index_cache: dict[tuple[str, tuple[int, ...], int], GroupBindingIndex] = {}
        self._env_map_cache: dict[tuple[str, int], torch.Tensor] = {}
        self.version += 1

    @property
    def varies_per_env(self) -> bool:
        """Some env copy plays a map other than the default one."""
        return bool(self.per_env_maps)

    def check_num_envs(self, num_envs: int) -> None:
        """Fix the number of env copies of this process and check the ``per_env`` indices against it."""
        self._check_env_indices(self.per_env_maps, num_envs)
        self.num_envs = num_envs

    def map_of_env(self, env_index: int) -> list[str]:
        """Binding id per agent in env copy ``env_index``."""
        return self.per_env_maps.get(env_index, self.agent_binding_map)

    def bindings_of_envs(self, group_name: str, num_envs: int) -> torch.Tensor:
        """``[num_envs, agents_in_group]`` binding index of every agent of ``group_name`` in each env copy (cached)."""
        key = (group_name, num_envs)
        cached = self._env_map_cache.get(key)
        if cached is None:
            default = self.groups[group_name].binding_of_agent
            cached = default.expand(num_envs, -1).clone()
            agent_ids = self.env_spec.groups[group_name].agent_ids
            for env_index, ids in self.per_env_maps.items():
                if env_index < num_envs:
                    cached[env_index] = torch.tensor([self.index[ids[a]] for a in agent_ids], dtype=torch.int64)
            self._env_map_cache[key] = cached
        return cached

    def row_index(
        self,
        group_name: str,
        batch_shape: tuple[int, ...],
        flat: bool = False,
        env_start: int = 0,
        device: torch.device | str | None = None,
    ) -> GroupBindingIndex:
        """The row grouping of ``group_name`` for rows ``[*batch_shape, agents]`` (cached per shape).

        With the same map in every env copy and ``flat=False`` this is ``groups[group_name]``
        (positions along the agent dim) whatever the shape. With a per-env map, or when
        ``flat`` asks for it, positions are flat over ``[*batch_shape, agents]``; a per-env map
        needs ``batch_shape[0]`` to be the env copies, copies ``env_start ..`` of the vector.
        ``device``: where the positions must live (the rows' device; default the CPU).
        """
        index = self._row_index(group_name, batch_shape, flat, env_start)
        return index if device is None else index.to(device)

    def _row_index(
        self, group_name: str, batch_shape: tuple[int, ...], flat: bool, env_start: int
    ) -> GroupBindingIndex:
        if not self.per_env_maps and not flat:
            return self.groups[group_name]
        env_start = env_start if self.per_env_maps else 0
        key = (group_name, tuple(batch_shape), env_start)
        cached = self._row_index_cache.get(key)
        if cached is None:
            if self.per_env_maps:
                if not batch_shape:
                    raise ValueError(
                        "agent_binding_map has per_env overrides, so the policy needs rows with a leading "
                        f"env-copy dim ([num_envs, ..., agents]); group {group_name!r} rows have no batch dim"
                    )
                of_env = self.bindings_of_envs(group_name, env_start + batch_shape[0])[env_start:]
                view = (batch_shape[0],) + (1,) * (len(batch_shape) - 1) + (of_env.shape[-1],)
                of_row = of_env.view(view).expand(*batch_shape, of_env.shape[-1])
            else:
                of_agent = self.groups[group_name].binding_of_agent
                of_row = of_agent.expand(*batch_shape, of_agent.shape[-1])
            cached = GroupBindingIndex.build(of_row, flat=True)
            self._row_index_cache[key] = cached
        return cached

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
            if b.device is not None:
                try:
                    torch.device(b.device)
                except (RuntimeError, TypeError):
                    raise ValueError(
                        f"{where}.device: {b.device!r} is not a torch device (e.g. 'cpu', 'cuda', 'cuda:1')"
                    ) from None
            if b.loss_profile not in self.loss_profiles:
                raise ValueError(
                    f"{where}.loss_profile: {b.loss_profile!r} is not a loss profile; "
                    f"defined profiles are {sorted(self.loss_profiles)}"
                )

    def _resolve_map(
        self, agent_binding_map: AgentBindingMap | None, policy_mapping_fn: str | Callable[[str], str] | None
    ) -> tuple[list[str], dict[int, list[str]]]:
        agents = self.env_spec.possible_agents
        if agent_binding_map is not None and policy_mapping_fn is not None:
            raise ValueError(
                "agent_binding_map and policy_mapping_fn are alternatives; set one of them "
                f"(got agent_binding_map={agent_binding_map!r} and policy_mapping_fn={policy_mapping_fn!r})"
            )
        if policy_mapping_fn is not None:
            fn = resolve_policy_mapping_fn(policy_mapping_fn)
            default = []
            for agent in agents:
                binding_id = fn(agent)
                if binding_id not in self.index:
                    raise ValueError(
                        f"policy_mapping_fn: {policy_mapping_fn!r} mapped agent {agent!r} to unknown binding "
                        f"{binding_id!r}; bindings are {self.ids}"
                    )
                default.append(binding_id)
            return default, {}
        if agent_binding_map is None:
            return [self.bindings[0].id] * len(agents), {}
        if not isinstance(agent_binding_map, Mapping):
            return self._check_agent_list("agent_binding_map", agent_binding_map), {}
        unknown = sorted(set(agent_binding_map) - {"default", "per_env"})
        if unknown or "per_env" not in agent_binding_map:
            raise ValueError(
                "agent_binding_map: a per-env map has keys 'default' (optional, one binding id per agent) "
                f"and 'per_env' (env index -> one binding id per agent); got keys {sorted(agent_binding_map)}"
            )
        given_default = agent_binding_map.get("default")
        default = (
            [self.bindings[0].id] * len(agents)
            if given_default is None
            else self._check_agent_list("agent_binding_map.default", given_default)
        )
        per_env_spec = agent_binding_map["per_env"]
        if not isinstance(per_env_spec, Mapping):
            raise ValueError(
                f"agent_binding_map.per_env: expected a mapping env index -> binding ids, got {per_env_spec!r}"
            )
        per_env: dict[int, list[str]] = {}
        for key, ids in per_env_spec.items():
            env_index = _env_index(key)
            if env_index in per_env:
                raise ValueError(f"agent_binding_map.per_env: env index {env_index} is given twice")
            per_env[env_index] = self._check_agent_list(f"agent_binding_map.per_env[{env_index}]", ids)
        return default, dict(sorted(per_env.items()))

    def _check_agent_list(self, where: str, ids: Any) -> list[str]:
        agents = self.env_spec.possible_agents
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValueError(f"{where}: expected a list of binding ids, one per agent {list(agents)}; got {ids!r}")
        if len(ids) != len(agents):
            raise ValueError(
                f"{where}: expected one binding id per agent ({len(agents)} agents: {list(agents)}), "
                f"got {len(ids)} entries {list(ids)}"
            )
        for agent, binding_id in zip(agents, ids):
            if binding_id not in self.index:
                raise ValueError(
                    f"{where}: agent {agent!r} is mapped to unknown binding {binding_id!r}; bindings are {self.ids}"
                )
        return list(ids)

    @staticmethod
    def _check_env_indices(per_env: dict[int, list[str]], num_envs: int) -> None:
        bad = [i for i in per_env if i >= num_envs]
        if bad:
            raise ValueError(
                f"agent_binding_map.per_env: env index {bad[0]} is out of range; each process steps "
                f"{num_envs} env copies (valid indices 0..{num_envs - 1})"
            )

    def reserve(self, groups: dict[str, str]) -> None:
        """Count bindings as acting in a group before any map uses them (binding id -> group name).

        A league swaps opponents into env copies during training: its bindings need a policy
        built for their group from the start, although the first map may not use them.

        Raises:
            ValueError: for an unknown binding or group, or a group other than the one the map gives.
        """
        for binding_id, group in groups.items():
            if binding_id not in self.index:
                raise ValueError(f"reserve: no binding {binding_id!r}; bindings are {self.ids}")
            if group not in self.env_spec.groups:
                raise ValueError(f"reserve: no agent group {group!r}; groups are {list(self.env_spec.groups)}")
        self.reserved = {**self.reserved, **groups}
        mapping_fn = self.policy_mapping_fn
        self.set_agent_binding_map({"default": self.agent_binding_map, "per_env": self.per_env_maps})
        self.policy_mapping_fn = mapping_fn

    def _group_of_bindings(self, maps: list[list[str]], per_env: dict[int, list[str]]) -> dict[str, str]:
        group_of: dict[str, str] = dict(self.reserved)
        for agent_map in maps:
            for agent, binding_id in zip(self.env_spec.possible_agents, agent_map):
                group = self.env_spec.group_of(agent).name
                if group_of.setdefault(binding_id, group) != group:
                    raise ValueError(
                        f"agent_binding_map: binding {binding_id!r} controls agents of groups "
                        f"{group_of[binding_id]!r} and {group!r}"
                        + (" (over the default and per_env maps together)" if per_env else "")
                        + "; a binding controls agents of one group (agents with the same spaces): "
                        "use one binding per group"
                    )
        return group_of

    def _group_index(self, group_name: str) -> GroupBindingIndex:
        group = self.env_spec.groups[group_name]
        of_agent = torch.tensor(
            [self.index[self.agent_binding_map[agent_id]] for agent_id in group.agent_ids], dtype=torch.int64
        )
        return GroupBindingIndex.build(of_agent, flat=False)

    # -- queries --------------------------------------------------------------------------
    def binding(self, binding_id: str) -> PolicyBinding:
        return self.bindings[self.index[binding_id]]

    @property
    def trainable_ids(self) -> list[str]:
        return [b.id for b in self.bindings if b.trainable]

    @property
    def active_ids(self) -> list[str]:
        """Bindings that control at least one agent (in the default map or any per-env override)."""
        return [b for b in self.ids if b in self.group_of_binding]

    def check_trainable(self, binding_ids: Iterable[str], *, field: str) -> None:
        """Refuse ids that name no trainable binding (e.g. the keys of ``model.algorithms``)."""
        for binding_id in binding_ids:
            if binding_id not in self.index or not self.binding(binding_id).trainable:
                raise ValueError(
                    f"{field}: {binding_id!r} is not a trainable binding; trainable bindings are {self.trainable_ids}"
                )

    def require_trainable(self) -> None:
        """Training needs at least one trainable binding that controls an agent."""
        if not any(b in self.group_of_binding for b in self.trainable_ids):
            raise ValueError(
                "policy_bindings: training needs at least one binding with trainable: true that controls an agent "
                f"(bindings: {[(b.id, b.trainable) for b in self.bindings]}, map: {self.agent_binding_map}"
                + (f", per_env: {self.per_env_maps}" if self.per_env_maps else "")
                + ")"
            )

    def profile_allows(self, binding_id: str, loss_name: str) -> bool:
        allowed = self.loss_profiles[self.binding(binding_id).loss_profile]
        return allowed is None or loss_name in allowed


def _env_index(key: Any) -> int:
    # YAML gives int keys; JSON (and some CLI paths) give their string form.
    if isinstance(key, str) and key.strip().isdigit():
        key = int(key)
    if isinstance(key, bool) or not isinstance(key, int) or key < 0:
        raise ValueError(f"agent_binding_map.per_env: keys are env copy indices (0, 1, ...), got {key!r}")
    return key
