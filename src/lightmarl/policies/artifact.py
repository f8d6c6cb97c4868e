"""The saved population: one description, written by every saver and read by one reader.

A trained population is saved in three containers: a Lightning checkpoint (``lightmarl fit``),
a league snapshot file (one player's frozen policy) and an export directory (``lightmarl export``,
[`PolicyDict.export`][lightmarl.policies.policy_dict.PolicyDict.export]). Each holds the same
[`SavedPopulation`][lightmarl.policies.artifact.SavedPopulation] description
(``SavedPopulation.to_dict()``, versioned by ``POPULATION_FORMAT``)
beside its weights: the bindings (class, kwargs, group, shared modules), the agent groups' spaces,
the shared modules' specs, the env transforms with their statistics, the env, the agent -> binding
map, the run's counters and the league's snapshots and mixtures.

[`read_artifact`][lightmarl.policies.artifact.read_artifact] reads any of them (or a run directory:
its newest checkpoint) into a `SavedPopulation`; [`write_artifact`][lightmarl.policies.artifact.write_artifact]
writes one as an export; `lightmarl.policies.registry.build_policies` builds its policies.

Files are read weights-only (torch files) or as JSON + safetensors (exports): no code runs.
Class paths found in them are checked by `resolve_class` (the loading rule of
[`lightmarl.trust`][lightmarl.trust]) before anything is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lightmarl.envs.spec import GroupSpec
from lightmarl.envs.transforms import VecTransform
from lightmarl.keys import SNAPSHOT_FORMAT
from lightmarl.policies.exported import (
    DESCRIPTION_FILE,
    SNAPSHOT_DIR,
    TRANSFORMS_FILE,
    is_export,
    join_tensors,
    read_export,
    read_tensors,
    split_tensors,
    write_export,
)
from lightmarl.policies.loading import load_torch_file, resolve_class
from lightmarl.policies.run_checkpoints import COUNTERS_KEY, latest_checkpoint, run_checkpoint_files

#: the version of `SavedPopulation.to_dict`'s layout; every container of a description carries it.
POPULATION_FORMAT = "lightmarl.population/1"
#: the Lightning checkpoint entry of the run (``{"population": description, "iteration_shape", "trainers"}``).
CHECKPOINT_KEY = COUNTERS_KEY
#: the entry of `CHECKPOINT_KEY` that holds the description.
POPULATION_KEY = "population"
#: the weights of a checkpoint's policies are the LightningModule's ``population.policies.<binding>.*``.
CHECKPOINT_PREFIX = "population.policies."

#: the description's fields, in `to_dict`'s order (`from_dict` requires every one).
FIELDS = (
    "bindings",
    "groups",
    "shared_modules",
    "transforms",
    "env",
    "agent_binding_map",
    "counters",
    "snapshots",
    "mixtures",
)


@dataclass
class Snapshot:
    """One league snapshot: a frozen copy of a player's policy.

    Attributes:
        id: the historical player's id (e.g. ``main_3``).
        parent: the active player it was copied from.
        binding: how to build its policy (class path, kwargs, group, shared modules).
        path: where its weights are (a snapshot file, or a file of an export).
        weights: its state dict, or ``None`` until [`SavedPopulation.snapshot_weights`][lightmarl.policies.artifact.SavedPopulation.snapshot_weights] reads it.
    """

    id: str
    parent: str
    binding: dict[str, Any]
    path: str
    weights: dict[str, torch.Tensor] | None = None


@dataclass
class SavedPopulation:
    """A saved population's description and weights, whatever container holds it (see [`artifact`][lightmarl.policies.artifact]).

    Attributes:
        bindings: binding id -> ``{class_path, policy_kwargs, group, shared_modules?, trainable?,
            input_transforms?}`` (``input_transforms``: an NPC's own run's normalization).
        groups: group name -> [`GroupSpec`][lightmarl.envs.spec.GroupSpec] fields.
        shared_modules: the shared modules' specs (name -> ``{class_path, init_args, ...}``).
        transforms: the env transforms, in order: ``{class_path, init_args, state}`` (state with tensors).
        env: the env's description (``env_fn`` / ``vmas_scenario`` ...) with its ``possible_agents``,
            ``turn_based`` and ``base_groups`` (the groups before the transforms) where known.
        agent_binding_map: ``{"default": {agent: binding}, "per_env": {copy: {agent: binding}}}``.
        counters: ``{"frames", "iterations"}`` of the run (0 where it did not train).
        snapshots: the league's snapshots.
        mixtures: name -> {member (binding or snapshot id) -> weight}, weights summing to 1.
        state: ``<binding>.<parameter>`` -> tensor (kept beside the description, not in `to_dict`).
        source: the path it was read from (not in `to_dict`).
    """

    bindings: dict[str, dict[str, Any]]
    groups: dict[str, dict[str, Any]]
    shared_modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    transforms: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    agent_binding_map: dict[str, Any] = field(default_factory=lambda: {"default": {}, "per_env": {}})
    counters: dict[str, int] = field(default_factory=lambda: {"frames": 0, "iterations": 0})
    snapshots: list[Snapshot] = field(default_factory=list)
    mixtures: dict[str, dict[str, float]] = field(default_factory=dict)
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    source: str = ""

    # -- the one layout ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The description as plain data (transform statistics stay tensors): what every container stores."""
        return {
            "format": POPULATION_FORMAT,
            "bindings": {b: dict(e) for b, e in self.bindings.items()},
            "groups": {g: dict(v) for g, v in self.groups.items()},
            "shared_modules": {n: dict(s) for n, s in self.shared_modules.items()},
            "transforms": [dict(t) for t in self.transforms],
            "env": dict(self.env),
            "agent_binding_map": {
                "default": dict(self.agent_binding_map.get("default", {})),
                "per_env": {str(k): dict(v) for k, v in self.agent_binding_map.get("per_env", {}).items()},
            },
            "counters": {"frames": int(self.counters["frames"]), "iterations": int(self.counters["iterations"])},
            "snapshots": [
                {"id": s.id, "parent": s.parent, "binding": dict(s.binding), "path": s.path} for s in self.snapshots
            ],
            "mixtures": {n: dict(m) for n, m in self.mixtures.items()},
        }

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        state: Any = None,
        source: str = "",
        field: str = "load_population",
    ) -> SavedPopulation:
        """The inverse of `to_dict`, checked: every field present and of the plain types lightmarl writes.

        Args:
            data: what `to_dict` returned (read back from a checkpoint, a snapshot file or ``population.json``).
            state: ``<binding>.<parameter>`` -> tensor (``None``: no weights, e.g. a resumed run's own
                description, whose weights Lightning loads).
            source: where it was read from, for messages.
            field: what asked, leading every error message.

        Raises:
            ValueError: naming ``field`` and ``source`` for another format, a missing field or a field
                that is not what lightmarl writes (one line).
        """
        where = f"{field}: {source!r}" if source else field
        if not isinstance(data, Mapping) or data.get("format") != POPULATION_FORMAT:
            found = data.get("format") if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(
                f"{where} does not describe a lightmarl population of format {POPULATION_FORMAT!r} (found {found!r})"
            )
        missing = [name for name in FIELDS if name not in data]
        if missing:
            raise ValueError(f"{where} does not describe a lightmarl population (no {missing})")
        problem = _problem(data, {} if state is None else state)
        if problem is not None:
            raise ValueError(f"{where} does not describe a lightmarl population ({problem})")
        agent_map = data["agent_binding_map"]
        return cls(
            bindings={str(b): dict(e) for b, e in data["bindings"].items()},
            groups={str(g): dict(v) for g, v in data["groups"].items()},
            shared_modules={str(n): dict(s) for n, s in data["shared_modules"].items()},
            transforms=[dict(t) for t in data["transforms"]],
            env=dict(data["env"]),
            agent_binding_map={
                "default": dict(agent_map.get("default", {})),
                "per_env": {int(k): dict(v) for k, v in agent_map.get("per_env", {}).items()},
            },
            counters={"frames": int(data["counters"]["frames"]), "iterations": int(data["counters"]["iterations"])},
            snapshots=[
                Snapshot(str(s["id"]), str(s.get("parent", "")), dict(s["binding"]), str(s["path"]))
                for s in data["snapshots"]
            ],
            mixtures={str(n): {str(m): float(w) for m, w in ms.items()} for n, ms in data["mixtures"].items()},
            state=dict(state or {}),
            source=source,
        )

    # -- reading it -------------------------------------------------------------------------
    def group_spec(self, name: str) -> GroupSpec:
        """The [`GroupSpec`][lightmarl.envs.spec.GroupSpec] of group ``name``."""
        return group_from_dict(self.groups[name])

    def snapshot_weights(self, snapshot: Snapshot) -> dict[str, torch.Tensor]:
        """The weights of ``snapshot`` (read from disk on first use)."""
        if snapshot.weights is None:
            snapshot.weights = _read_snapshot_weights(snapshot.path, field=f"snapshot {snapshot.id!r}")
        return snapshot.weights

    def snapshot_population(self, snapshot_id: str) -> SavedPopulation:
        """League snapshot ``snapshot_id`` as a population of one binding (named by the snapshot's id)."""
        found = {s.id: s for s in self.snapshots}
        if snapshot_id not in found:
            raise ValueError(f"no league snapshot {snapshot_id!r}; the population has {sorted(found)}")
        snapshot = found[snapshot_id]
        weights = self.snapshot_weights(snapshot)
        return dataclasses.replace(
            self,
            bindings={snapshot_id: dict(snapshot.binding)},
            state={f"{snapshot_id}.{k}": v for k, v in weights.items()},
            agent_binding_map={"default": {}, "per_env": {}},
            snapshots=[],
            mixtures={},
            source=snapshot.path,
        )

    def select(self, binding_ids: list[str]) -> SavedPopulation:
        """The same population with only ``binding_ids`` (the map keeps the agents they control)."""
        unknown = sorted(set(binding_ids) - set(self.bindings))
        if unknown:
            raise ValueError(f"--bindings: no bindings {unknown}; the population has {sorted(self.bindings)}")
        bindings = {b: self.bindings[b] for b in binding_ids}
        used = {n for b in bindings.values() for n in b.get("shared_modules", {}).values()}

        def keep(mapping: Mapping[str, str]) -> dict[str, str]:
            return {a: b for a, b in mapping.items() if b in bindings}

        agent_map = {
            "default": keep(self.agent_binding_map.get("default", {})),
            "per_env": {k: keep(m) for k, m in self.agent_binding_map.get("per_env", {}).items()},
        }
        return dataclasses.replace(
            self,
            bindings=bindings,
            state={k: v for k, v in self.state.items() if k.split(".", 1)[0] in bindings},
            shared_modules={n: s for n, s in self.shared_modules.items() if n in used},
            agent_binding_map=agent_map,
        )

    def check_classes(self, allow: Collection[str] = (), *, trust_code: bool = False) -> None:
        """Every class the population names is one the loading rule lets a file name ([`lightmarl.trust`][lightmarl.trust]).

        Resolved with `resolve_class` before anything is built:
        lightmarl's policy classes and env transforms, the class paths in ``allow``, or anything
        with ``trust_code``.
        """
        check: dict[str, Any] = {"allowed": allow, "trust_code": trust_code, "source": self.source}
        for binding_id, entry in self.bindings.items():
            _check_class_paths(entry, field=f"binding {binding_id!r}", **check)
        _check_class_paths(self.shared_modules, field="shared_modules", **check)
        _check_class_paths(self.transforms, field="transforms", base=VecTransform, **check)
        for snapshot in self.snapshots:
            _check_class_paths(snapshot.binding, field=f"snapshot {snapshot.id!r}", **check)


def _problem(data: Mapping[str, Any], state: Any) -> str | None:
    """What is not the plain data lightmarl writes in a description (``None``: nothing)."""
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        return "its weights are not a table of tensors"
    tables = ("bindings", "groups", "shared_modules", "env", "agent_binding_map", "counters", "mixtures")
    for name in tables:
        if not isinstance(data[name], Mapping):
            return f"its {name} is not a table"
    for name in ("transforms", "snapshots"):
        if not isinstance(data[name], list | tuple) or not all(isinstance(t, Mapping) for t in data[name]):
            return f"its {name} is not a list of tables"
    for binding_id, entry in data["bindings"].items():
        if not (
            isinstance(entry, Mapping)
            and isinstance(entry.get("class_path"), str)
            and isinstance(entry.get("group"), str)
            and isinstance(entry.get("policy_kwargs", {}), Mapping)
            and isinstance(entry.get("shared_modules", {}), Mapping)
        ):
            return f"binding {binding_id!r} is not {{class_path, policy_kwargs, group}}"
        if entry["group"] not in data["groups"]:
            return f"binding {binding_id!r} acts for group {entry['group']!r}, which it does not describe"
    if not all(
        isinstance(s, Mapping) and isinstance(s.get("class_path"), str) for s in data["shared_modules"].values()
    ):
        return "its shared_modules are not {class_path, init_args} tables"
    if not all(isinstance(g, Mapping) for g in data["groups"].values()):
        return "its groups are not tables of fields"
    if not all(isinstance(t.get("class_path"), str) and "state" in t for t in data["transforms"]):
        return "its transforms are not {class_path, init_args, state} tables"
    for snapshot in data["snapshots"]:
        if not all(isinstance(snapshot.get(k), str) for k in ("id", "path")) or not isinstance(
            snapshot.get("binding"), Mapping
        ):
            return "its snapshots are not {id, parent, binding, path} tables"
    return None


def _check_class_paths(value: Any, *, field: str, base: type | None = None, **rule: Any) -> None:
    """Resolve every ``class_path`` entry anywhere in ``value`` (nested dicts and lists) with
    `resolve_class`, so that building from ``value`` imports nothing
    else; ``field`` grows with the path to each entry (``binding 'main'.policy_kwargs.encoder.class_path``)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "class_path" and isinstance(item, str):
                resolve_class(item, field=f"{field}.class_path", base=base, **rule)
            else:
                _check_class_paths(item, field=f"{field}.{key}", base=base, **rule)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_class_paths(item, field=f"{field}[{i}]", base=base, **rule)


def group_from_dict(values: Mapping[str, Any]) -> GroupSpec:
    """A [`GroupSpec`][lightmarl.envs.spec.GroupSpec] from its saved fields (JSON turns tuples into lists)."""

    def tupled(value: Any) -> Any:
        return tuple(tupled(v) for v in value) if isinstance(value, list | tuple) else value

    return GroupSpec(**{k: tupled(v) for k, v in values.items()})


# -- the one reader -----------------------------------------------------------------------------
def read_artifact(path: str | Path, *, field: str = "load_population", trust_pickle: bool = False) -> SavedPopulation:
    """The [`SavedPopulation`][lightmarl.policies.artifact.SavedPopulation] at ``path``: an export directory, a run
    directory (its latest checkpoint, `run_checkpoint`), a training checkpoint or a league snapshot file.

    Raises:
        ValueError: naming ``field`` and the path when it is none of those or cannot be read.
    """
    path = Path(path)
    if is_export(path):
        return _from_export(path, field)
    if path.is_dir():
        path = run_checkpoint(path, field=field)
    saved = load_torch_file(path, field=field, trust_pickle=trust_pickle)
    population = saved_population(saved, path, field)
    if (
        population is None
        and isinstance(saved, dict)
        and saved
        and all(isinstance(v, torch.Tensor) for v in saved.values())
    ):
        raise ValueError(
            f"{field}: {str(path)!r} is a plain state dict (tensors without a description of their policy); "
            "load it as a binding with policy_uri: PATH?class_path=<its policy class>"
        )
    if population is None:
        raise ValueError(
            f"{field}: {str(path)!r} is neither a lightmarl checkpoint, a run directory, an export nor a "
            "league snapshot file"
        )
    return population


def saved_population(saved: Any, path: str | Path, field: str) -> SavedPopulation | None:
    """The population a torch file already read (weights-only) holds: a checkpoint's or a league
    snapshot's; ``None`` for any other file (e.g. a plain state dict)."""
    if not isinstance(saved, dict):
        return None
    path = Path(path)
    if saved.get("format") == SNAPSHOT_FORMAT:
        return _from_snapshot(saved, path, field)
    run = saved.get(CHECKPOINT_KEY)
    if not isinstance(run, Mapping):
        return None
    weights = saved.get("state_dict")
    state = (
        {
            k[len(CHECKPOINT_PREFIX) :]: v
            for k, v in weights.items()
            if isinstance(k, str) and k.startswith(CHECKPOINT_PREFIX)
        }
        if isinstance(weights, Mapping)
        else None
    )
    population = SavedPopulation.from_dict(run.get(POPULATION_KEY), state=state, source=str(path), field=field)
    # The module's state holds every policy, a league's opponent slots too; the description names the user's.
    population.state = {k: v for k, v in population.state.items() if k.split(".", 1)[0] in population.bindings}
    for snapshot in population.snapshots:
        snapshot.path = _find_snapshot_file(snapshot.path, path)
    return population


def _from_snapshot(saved: Mapping[str, Any], path: Path, field: str) -> SavedPopulation:
    """A league snapshot file: one binding, renamed to the player's id."""
    population = SavedPopulation.from_dict(
        saved.get(POPULATION_KEY), state=saved.get("state_dict"), source=str(path), field=field
    )
    if len(population.bindings) != 1:
        raise ValueError(f"{field}: {str(path)!r} is a league snapshot of {len(population.bindings)} bindings, not one")
    ((_, entry),) = population.bindings.items()
    player = str(saved.get("player") or path.stem)
    population.bindings = {player: entry}
    population.state = {f"{player}.{k}": v for k, v in population.state.items()}
    population.agent_binding_map = {
        "default": {a: player for a in population.agent_binding_map["default"]},
        "per_env": {},
    }
    return population


def run_checkpoint(run_dir: Path, *, field: str) -> Path:
    """The checkpoint a run directory stands for: the newest by the run's own counters of the
    ``*.ckpt`` in its ``checkpoints/`` (else anywhere under it), `latest_checkpoint`."""
    found = latest_checkpoint(run_checkpoint_files(run_dir), field=field)
    if found is None:
        raise ValueError(
            f"{field}: {str(run_dir)!r} is neither an export (no {DESCRIPTION_FILE}) nor a run directory "
            "with a checkpoint (no *.ckpt in checkpoints/ or below)"
        )
    return found


def _from_export(path: Path, field: str) -> SavedPopulation:
    description, state = read_export(path, field=field)
    if (path / TRANSFORMS_FILE).is_file():
        tensors = read_tensors(path / TRANSFORMS_FILE, field=field)
        description = {**description, "transforms": join_tensors(description.get("transforms"), tensors, field=field)}
    population = SavedPopulation.from_dict(description, state=state, source=str(path), field=field)
    for snapshot in population.snapshots:
        snapshot.path = str(path / snapshot.path)  # an export's snapshot files are inside it
    return population


def _find_snapshot_file(recorded: str, checkpoint: Path) -> str:
    """A snapshot path as recorded (relative to where training ran), else beside the run: ``<run>/league/<file>``."""
    if Path(recorded).is_file():
        return recorded
    for folder in list(checkpoint.parents)[:3]:
        candidate = folder / "league" / Path(recorded).name
        if candidate.is_file():
            return str(candidate)
    return recorded


def _read_snapshot_weights(path: str, *, field: str) -> dict[str, torch.Tensor]:
    if path.endswith(".safetensors"):
        return read_tensors(path, field=field)
    saved = load_torch_file(path, field=field)
    state = saved.get("state_dict") if isinstance(saved, dict) and saved.get("format") == SNAPSHOT_FORMAT else saved
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{field}: {path!r} is not a snapshot of policy weights")
    return state


def parse_mixture(text: str, population: SavedPopulation) -> tuple[str, dict[str, float]]:
    """``NAME=MEMBER:WEIGHT,MEMBER:WEIGHT`` -> ``(NAME, {member: weight})``, weights normalized to sum 1.

    Raises:
        ValueError: naming the text for a malformed entry, an unknown member (neither a binding nor
            a snapshot of ``population``) or weights that are negative or sum to 0.
    """
    name, sep, body = text.partition("=")
    members = {*population.bindings, *(s.id for s in population.snapshots)}
    weights: dict[str, float] = {}
    try:
        for part in body.split(","):
            member, _, weight = part.rpartition(":")
            weights[member] = float(weight)
    except ValueError:
        weights = {}
    if not sep or not name or not weights or "" in weights:
        raise ValueError(f"--mixture {text!r}: expected NAME=MEMBER:WEIGHT,MEMBER:WEIGHT,...")
    unknown = sorted(set(weights) - members)
    if unknown:
        raise ValueError(f"--mixture {text!r}: no members {unknown}; bindings and snapshots are {sorted(members)}")
    total = sum(weights.values())
    if any(w < 0 for w in weights.values()) or not total > 0:
        raise ValueError(f"--mixture {text!r}: weights must be >= 0 and sum to more than 0")
    return name, {member: w / total for member, w in weights.items()}


# -- the export writer ---------------------------------------------------------------------------
def write_artifact(population: SavedPopulation, directory: str | Path, *, with_snapshots: bool = True) -> Path:
    """``population`` in the export format (``docs/export_format.md``), snapshots' weights included."""
    snapshot_files: dict[str, dict[str, torch.Tensor]] = {}
    snapshots = []
    for snapshot in population.snapshots if with_snapshots else []:
        name = snapshot.id.replace("/", "_")
        snapshot_files[name] = population.snapshot_weights(snapshot)
        snapshots.append(dataclasses.replace(snapshot, path=f"{SNAPSHOT_DIR}/{name}.safetensors", weights=None))
    description = dataclasses.replace(population, snapshots=snapshots).to_dict()
    description["transforms"], transform_tensors = split_tensors(description["transforms"], "transforms")
    return write_export(
        directory, description, population.state, transform_tensors=transform_tensors, snapshots=snapshot_files
    )
