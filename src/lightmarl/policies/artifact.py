"""Everything a trained population needs to act, read from a run directory, a checkpoint, an export or a snapshot.

[`read_artifact`][lightmarl.policies.artifact.read_artifact] turns any of those into one [`Artifact`][lightmarl.policies.artifact.Artifact]: the bindings (class, kwargs,
group, weights), the env transforms with their statistics, the agent -> binding map, the env's
agents, the run's counters and the league's snapshots and mixtures. [`write_artifact`][lightmarl.policies.artifact.write_artifact]
writes it in the export format (`lightmarl.policies.exported`), and
[`lightmarl.load_population`][lightmarl.inference.population.load_population] builds a [`Population`][lightmarl.inference.population.Population] from it. It lives
in ``policies`` (re-exported by [`lightmarl.inference`][lightmarl.inference]) because ``policy_uri`` reads the same files.

Files are read weights-only (torch files) or as JSON + safetensors (exports): no code runs.
Class paths found in them are checked by `resolve_class` (the
loading rule of [`lightmarl.trust`][lightmarl.trust]) before anything is built.
"""

from __future__ import annotations

import copy
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

#: key under which a lightmarl checkpoint describes its bindings (see ``MARLModule.on_save_checkpoint``).
CHECKPOINT_KEY = COUNTERS_KEY
#: the ``format`` entry of a `PolicyDict.save` file.
POLICY_DICT_FORMAT = "lightmarl.policy_dict/1"
#: the Lightning checkpoint entry of the league's state (``lightmarl.training.league.CHECKPOINT_KEY``).
LEAGUE_KEY = "lightmarl_league"


@dataclass
class Snapshot:
    """One league snapshot: a frozen copy of a player's policy.

    Attributes:
        id: the historical player's id (e.g. ``main_3``).
        parent: the active player it was copied from.
        binding: how to build its policy (class path, kwargs, group, shared modules).
        weights: its state dict, or ``None`` until [`Artifact.snapshot_weights`][lightmarl.policies.artifact.Artifact.snapshot_weights] reads it.
        path: where the weights are on disk (a snapshot file, or a file of an export).
    """

    id: str
    parent: str
    binding: dict[str, Any]
    path: str
    weights: dict[str, torch.Tensor] | None = None


@dataclass
class Artifact:
    """A population's description and tensors, whatever file it came from (see [`artifact`][lightmarl.policies.artifact]).

    Attributes:
        bindings: binding id -> ``{class_path, policy_kwargs, group, shared_modules?, trainable?}``.
        groups: group name -> [`GroupSpec`][lightmarl.envs.spec.GroupSpec] fields.
        shared_modules: the shared modules' specs.
        state: ``<binding>.<parameter>`` -> tensor.
        transforms: the env transforms, in order: ``{class_path, init_args, state}`` (state with tensors).
        env: the env's description (``env_fn`` / ``vmas_scenario`` ...) and its ``possible_agents``,
            ``turn_based``.
        agent_binding_map: ``{"default": {agent: binding}, "per_env": {copy: {agent: binding}}}``.
        counters: ``{"frames", "iterations"}`` of the run (0 where the source has none).
        snapshots: the league's snapshots.
        mixtures: name -> {member (binding or snapshot id) -> weight}, weights summing to 1.
        source: the path it was read from.
        transforms_recorded: whether the source records its run's transforms (``transforms`` empty
            then means none); ``False`` for ``PolicyDict.save`` files and version 1 exports.
    """

    bindings: dict[str, dict[str, Any]]
    groups: dict[str, dict[str, Any]]
    shared_modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    transforms: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    agent_binding_map: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=lambda: {"frames": 0, "iterations": 0})
    snapshots: list[Snapshot] = field(default_factory=list)
    mixtures: dict[str, dict[str, float]] = field(default_factory=dict)
    source: str = ""
    transforms_recorded: bool = True

    def group_spec(self, name: str) -> GroupSpec:
        """The [`GroupSpec`][lightmarl.envs.spec.GroupSpec] of group ``name``."""
        return group_from_dict(self.groups[name])

    def snapshot_weights(self, snapshot: Snapshot) -> dict[str, torch.Tensor]:
        """The weights of ``snapshot`` (read from disk on first use)."""
        if snapshot.weights is None:
            snapshot.weights = _read_snapshot_weights(snapshot.path, field=f"snapshot {snapshot.id!r}")
        return snapshot.weights

    def select(self, binding_ids: list[str]) -> Artifact:
        """The same artifact with only ``binding_ids`` (the map keeps the agents they control)."""
        unknown = sorted(set(binding_ids) - set(self.bindings))
        if unknown:
            raise ValueError(f"--bindings: no bindings {unknown}; the population has {sorted(self.bindings)}")
        bindings = {b: self.bindings[b] for b in binding_ids}
        state = {k: v for k, v in self.state.items() if k.split(".", 1)[0] in bindings}
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
            state=state,
            shared_modules={n: s for n, s in self.shared_modules.items() if n in used},
            agent_binding_map=agent_map,
        )

    def check_classes(self, allow: Collection[str] = (), *, trust_code: bool = False) -> None:
        """Every class the artifact names is one the loading rule lets a file name ([`lightmarl.trust`][lightmarl.trust]).

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


def read_artifact(path: str | Path, *, field: str = "load_population") -> Artifact:
    """The [`Artifact`][lightmarl.policies.artifact.Artifact] at ``path``: an export directory, a run directory (its
    latest checkpoint, `run_checkpoint`), a training checkpoint, a ``PolicyDict.save`` file or a league snapshot file.

    Raises:
        ValueError: naming ``field`` and the path when it is none of those or cannot be read.
    """
    path = Path(path)
    if is_export(path):
        return _from_export(path, field)
    if path.is_dir():
        checkpoint = run_checkpoint(path, field=field)
        return artifact_of_saved(load_torch_file(checkpoint, field=field), checkpoint, field)
    return artifact_of_saved(load_torch_file(path, field=field), path, field)


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


def _from_export(path: Path, field: str) -> Artifact:
    description, state = read_export(path, field=field)
    transforms = description.get("transforms", [])
    if (path / TRANSFORMS_FILE).is_file():
        transforms = join_tensors(transforms, read_tensors(path / TRANSFORMS_FILE, field=field), field=field)
    league = description.get("league", {})
    snapshots = [
        Snapshot(s["id"], s.get("parent", ""), s["binding"], str(path / SNAPSHOT_DIR / s["file"]))
        for s in league.get("snapshots", [])
    ]
    agent_map = description.get("agent_binding_map") or _default_map(description)
    return Artifact(
        bindings=description["bindings"],
        groups=description.get("groups", {}),
        shared_modules=description.get("shared_modules", {}),
        state=state,
        transforms=transforms,
        env=description.get("env", {}),
        agent_binding_map={
            "default": dict(agent_map.get("default", {})),
            "per_env": {int(k): dict(v) for k, v in agent_map.get("per_env", {}).items()},
        },
        counters={k: int(v) for k, v in description.get("counters", {"frames": 0, "iterations": 0}).items()},
        snapshots=snapshots,
        mixtures=league.get("mixtures", {}),
        source=str(path),
        transforms_recorded=description.get("format") != "lightmarl.export/1",
    )


def _default_map(description: Mapping[str, Any]) -> dict[str, Any]:
    """Sources without a saved map (version 1 exports, PolicyDict files): each agent -> the first
    binding of its group, in the bindings' order."""
    default: dict[str, str] = {}
    for binding_id, entry in description.get("bindings", {}).items():
        group = description.get("groups", {}).get(entry.get("group"), {})
        for agent in group.get("agents", []):
            default.setdefault(agent, binding_id)
    return {"default": default, "per_env": {}}


def _without_slots(agent_map: dict[str, Any], bindings: Mapping[str, Any], groups: Mapping[str, Any]) -> dict[str, Any]:
    """A league run's agent map with its opponent slots replaced: an agent a slot played at the
    checkpoint goes to its group's first binding (the per-env seatings of the league are dropped)."""
    first = _default_map({"bindings": bindings, "groups": groups})["default"]
    default = {agent: b if b in bindings else first.get(agent, b) for agent, b in agent_map["default"].items()}
    return {"default": default, "per_env": {}}


def artifact_of_saved(saved: Any, path: Path, field: str) -> Artifact:
    """The artifact of a torch file already read (weights-only): a checkpoint, a PolicyDict file or a snapshot."""
    if isinstance(saved, dict) and saved.get("format") == SNAPSHOT_FORMAT:
        return snapshot_artifact(saved, path, field)
    if not isinstance(saved, dict) or not (CHECKPOINT_KEY in saved or saved.get("format") == POLICY_DICT_FORMAT):
        raise ValueError(
            f"{field}: {str(path)!r} is neither a lightmarl checkpoint, a run directory, an export, a saved "
            "PolicyDict nor a self-describing league snapshot (snapshots written before lightmarl recorded their "
            "policy class are bare state dicts: load them with the checkpoint of their run)"
        )
    description, state = _population_of(saved, field)
    description.setdefault("groups", {})  # checkpoints before saved group specs: bindings still load by policy_uri
    if saved.get("format") == POLICY_DICT_FORMAT:
        return Artifact(
            bindings=description["bindings"],
            groups=description["groups"],
            shared_modules=description.get("shared_modules", {}),
            state=state,
            agent_binding_map=_default_map(description),
            source=str(path),
            transforms_recorded=False,
        )
    run = saved[CHECKPOINT_KEY]
    league = saved.get(LEAGUE_KEY) or {}
    # A league's opponent slots are no bindings of a user's: they hold whichever snapshot was last
    # loaded into them; the snapshots themselves are the artifact's `snapshots`.
    slots = set(league.get("slots", []))
    bindings = {b: e for b, e in description["bindings"].items() if e.get("group") is not None and b not in slots}
    saved_map = run.get("agent_binding_map")
    possible = list(run.get("possible_agents") or [a for g in description["groups"].values() for a in g["agents"]])
    if saved_map is not None:
        agent_map = {
            "default": dict(zip(possible, saved_map["default"])),
            "per_env": {int(k): dict(zip(possible, v)) for k, v in saved_map.get("per_env", {}).items()},
        }
    else:
        agent_map = _default_map({"bindings": bindings, "groups": description["groups"]})
    if slots:
        agent_map = _without_slots(agent_map, bindings, description["groups"])
    return Artifact(
        bindings=bindings,
        groups=description["groups"],
        shared_modules=description.get("shared_modules", {}),
        state={k: v for k, v in state.items() if k.split(".", 1)[0] in bindings},
        transforms=checkpoint_transforms(run, path, field),
        env={
            **run.get("env", {}),
            "possible_agents": possible,
            "turn_based": bool(run.get("turn_based", False)),
            **({"base_groups": run["base_groups"]} if run.get("base_groups") else {}),
        },
        agent_binding_map=agent_map,
        counters={"frames": int(run.get("frames", 0)), "iterations": int(run.get("iterations", 0))},
        snapshots=_league_snapshots(league, bindings, path),
        mixtures=_mixtures(league),
        source=str(path),
    )


def checkpoint_transforms(run: Mapping[str, Any], path: Path, field: str) -> list[dict[str, Any]]:
    """The env transforms of a checkpoint's run: ``{class_path, init_args, state}`` each, in order.

    Checkpoints record the transforms' settings (``env_transforms_config``) beside their
    statistics; for older ones the settings come from the run's ``config.yaml`` (the recipe
    LightningCLI saved next to the checkpoints).

    Raises:
        ValueError: when the run had transforms whose settings are found nowhere.
    """
    states = list(run.get("env_transforms") or [])
    configs = run.get("env_transforms_config")
    if configs is None:
        if not states:
            return []
        configs = _transforms_from_run_config(path)
        if configs is None:
            raise ValueError(
                f"{field}: {str(path)!r} was trained with env transforms {[s['transform'] for s in states]} but "
                "records neither their settings nor a config.yaml beside it; a policy loaded without them would "
                "see observations unlike those it learned from. Re-save the checkpoint with this lightmarl "
                "(`lightmarl fit ... --ckpt_path last` with the same max_frames)"
            )
    names = [str(c["class_path"]).rsplit(".", 1)[-1] for c in configs]
    if [s["transform"] for s in states] != names:
        raise ValueError(
            f"{field}: {str(path)!r} records transforms {names} but statistics of {[s['transform'] for s in states]}"
        )
    return [
        {"class_path": c["class_path"], "init_args": dict(c.get("init_args") or {}), "state": s["state"]}
        for c, s in zip(configs, states)
    ]


def _transforms_from_run_config(path: Path) -> list[dict[str, Any]] | None:
    import yaml

    for folder in list(path.parents)[:3]:
        config = folder / "config.yaml"
        if config.is_file():
            recipe = yaml.safe_load(config.read_text()) or {}
            env = (recipe.get("model") or {}).get("env") or {}
            env = env.get("init_args", env)
            transforms = env.get("transforms") or []
            return [
                {"class_path": t["class_path"], "init_args": dict(t.get("init_args") or {})}
                if isinstance(t, Mapping)
                else {"class_path": str(t), "init_args": {}}
                for t in transforms
            ]
    return None


def _league_snapshots(league: Mapping[str, Any], bindings: Mapping[str, Any], path: Path) -> list[Snapshot]:
    manager = (league.get("matchmaker") or {}).get("manager") or {}
    historical = manager.get("historical") or []
    if not historical:
        return []
    # Every player's binding has the same class and kwargs (the league checks it), as have its opponent
    # slots: the first trainable binding describes every snapshot.
    trainable = [b for b, entry in bindings.items() if entry.get("trainable", True)]
    template = copy.deepcopy(bindings[trainable[0] if trainable else next(iter(bindings))])
    template.pop("input_transforms", None)
    snapshots = []
    for entry in historical:
        binding = template
        snapshots.append(
            Snapshot(
                str(entry["player_id"]),
                str(entry.get("parent_id", "")),
                {**binding, "trainable": False},
                _find_snapshot_file(str(entry["checkpoint_path"]), path),
            )
        )
    return snapshots


def _find_snapshot_file(recorded: str, checkpoint: Path) -> str:
    """A snapshot path as recorded (relative to where training ran), else beside the run: ``<run>/league/<file>``."""
    if Path(recorded).is_file():
        return recorded
    for folder in list(checkpoint.parents)[:3]:
        candidate = folder / "league" / Path(recorded).name
        if candidate.is_file():
            return str(candidate)
    return recorded


def _mixtures(league: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    mixtures = league.get("mixtures") or {}
    return {str(n): {str(m): float(w) for m, w in members.items()} for n, members in mixtures.items()}


def snapshot_artifact(saved: Mapping[str, Any], path: Path, field: str) -> Artifact:
    """The artifact of a self-describing league snapshot file (already read): one binding, the player's id."""
    policy = dict(saved["policy"])
    binding_id = str(saved.get("player") or path.stem)
    group = policy.pop("group_spec")
    groups = {group["name"]: group}
    return Artifact(
        bindings={binding_id: {**policy, "group": group["name"]}},
        groups=groups,
        shared_modules=dict(saved.get("shared_modules") or {}),
        state={f"{binding_id}.{k}": v for k, v in saved["state_dict"].items()},
        transforms=list(saved.get("transforms") or []),
        env=dict(saved.get("env") or {}),
        agent_binding_map={"default": {a: binding_id for a in group["agents"]}, "per_env": {}},
        source=str(path),
    )


def _read_snapshot_weights(path: str, *, field: str) -> dict[str, torch.Tensor]:
    if path.endswith(".safetensors"):
        return read_tensors(path, field=field)
    saved = load_torch_file(path, field=field)
    state = saved.get("state_dict") if isinstance(saved, dict) and saved.get("format") == SNAPSHOT_FORMAT else saved
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{field}: {path!r} is not a snapshot of policy weights")
    return state


def parse_mixture(text: str, artifact: Artifact) -> tuple[str, dict[str, float]]:
    """``NAME=MEMBER:WEIGHT,MEMBER:WEIGHT`` -> ``(NAME, {member: weight})``, weights normalized to sum 1.

    Raises:
        ValueError: naming the text for a malformed entry, an unknown member (neither a binding nor
            a snapshot of ``artifact``) or weights that are negative or sum to 0.
    """
    name, sep, body = text.partition("=")
    members = {*artifact.bindings, *(s.id for s in artifact.snapshots)}
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


def write_artifact(artifact: Artifact, directory: str | Path, *, with_snapshots: bool = True) -> Path:
    """``artifact`` in the export format (``docs/export_format.md``), snapshots' weights included."""
    transforms, transform_tensors = split_tensors(artifact.transforms, "transforms")
    snapshot_files: dict[str, dict[str, torch.Tensor]] = {}
    entries = []
    for snapshot in artifact.snapshots if with_snapshots else []:
        name = snapshot.id.replace("/", "_")
        snapshot_files[name] = artifact.snapshot_weights(snapshot)
        entries.append(
            {"id": snapshot.id, "parent": snapshot.parent, "binding": snapshot.binding, "file": f"{name}.safetensors"}
        )
    description = {
        "bindings": artifact.bindings,
        "groups": artifact.groups,
        "shared_modules": artifact.shared_modules,
        "env": artifact.env,
        "transforms": transforms,
        "agent_binding_map": {
            "default": artifact.agent_binding_map.get("default", {}),
            "per_env": {str(k): v for k, v in artifact.agent_binding_map.get("per_env", {}).items()},
        },
        "counters": artifact.counters,
        "league": {"snapshots": entries, "mixtures": artifact.mixtures},
    }
    return write_export(
        directory, description, artifact.state, transform_tensors=transform_tensors, snapshots=snapshot_files
    )


def _is_population(saved: Any) -> bool:
    return isinstance(saved, dict) and (CHECKPOINT_KEY in saved or saved.get("format") == POLICY_DICT_FORMAT)


def _population_of(saved: dict, field: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    # The group specs are the file's data; an env the file names is never built (lightmarl.trust).
    if saved.get("format") == POLICY_DICT_FORMAT:
        description, state = saved, saved.get("state_dict")
    else:  # a training checkpoint: the policies live under the LightningModule's population
        prefix = "population.policies."
        state_dict = saved.get("state_dict")
        state = (
            {k[len(prefix) :]: v for k, v in state_dict.items() if isinstance(k, str) and k.startswith(prefix)}
            if isinstance(state_dict, Mapping)
            else None
        )
        description = saved[CHECKPOINT_KEY]
    _check_description(description, state, field)
    return dict(description), dict(state or {})


def _check_description(description: Any, state: Any, field: str) -> None:
    """A saved population's description is the plain data lightmarl writes (else a one-line error)."""
    problem = None
    if not isinstance(description, Mapping) or not isinstance(description.get("bindings"), Mapping):
        problem = "no 'bindings' table"
    elif not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        problem = "its weights are not a table of tensors"
    else:
        for binding_id, entry in description["bindings"].items():
            if not (
                isinstance(entry, Mapping)
                and isinstance(entry.get("class_path"), str)
                and isinstance(entry.get("policy_kwargs", {}), Mapping)
                and isinstance(entry.get("shared_modules", {}), Mapping)
            ):
                problem = f"binding {binding_id!r} is not {{class_path, policy_kwargs, group}}"
                break
        shared = description.get("shared_modules", {})
        if problem is None and not (
            isinstance(shared, Mapping)
            and all(isinstance(s, Mapping) and isinstance(s.get("class_path"), str) for s in shared.values())
        ):
            problem = "its shared_modules are not {class_path, init_args} tables"
        groups = description.get("groups", {})
        if problem is None and not (
            isinstance(groups, Mapping) and all(isinstance(g, Mapping) for g in groups.values())
        ):
            problem = "its groups are not tables of fields"
    if problem is not None:
        raise ValueError(f"{field}: the file does not describe a lightmarl population ({problem})")


def _exported(path: Path | str, field: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    description, state = read_export(path, field=field)
    _check_description(description, state, field)
    return description, state
