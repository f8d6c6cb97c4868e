"""Turning a [`PolicyBinding`][lightmarl.population.bindings.PolicyBinding] into a policy module: by class path or from saved weights."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import torch
from torch import nn

from lightmarl._imports import import_object, instantiate
from lightmarl.envs.spec import GroupSpec
from lightmarl.envs.transforms import VecTransform
from lightmarl.keys import SNAPSHOT_FORMAT
from lightmarl.policies.artifact import SavedPopulation, read_artifact, saved_population
from lightmarl.policies.base import Policy
from lightmarl.policies.exported import is_export
from lightmarl.policies.input_transforms import ORIGIN_KEY as INPUT_TRANSFORMS
from lightmarl.policies.input_transforms import attach_input_transforms, host_normalization, input_transforms_of
from lightmarl.policies.loading import load_torch_file, resolve_class
from lightmarl.population import PolicyBinding
from lightmarl.trust import loading_file, recipe_class_paths

__all__ = ["PolicyRegistry", "build_policies", "build_policy", "load_policy_from_uri"]


class PolicyRegistry:
    """Builds (and caches) the policy of each binding.

    ``class_path`` bindings are built as ``cls(group, **policy_kwargs)``. ``policy_uri``
    bindings load saved weights; two forms:

    * ``path/to/run.ckpt#binding``: a lightmarl (Lightning) checkpoint and one of its
      bindings (without ``#binding``: the binding with the same id). The policy is rebuilt
      from the class and kwargs stored in the checkpoint.
      An export directory, a league snapshot file, or a run directory (``runs/x#binding``: the
      run's newest checkpoint by its counters, `lightmarl.policies.run_checkpoints`) too.
    * ``path/to/weights.pt?class_path=package.PolicyClass``: a plain ``state_dict`` file
      (``torch.save(policy.state_dict(), path)``); the class comes from the URI and its
      kwargs from the binding's ``policy_kwargs``.

    Every policy is then checked against the env with ``initialize_to_environment``, and
    remembers where it came from in ``policy.origin`` (class path and kwargs), so that a
    checkpoint of a run that loaded it can be loaded again.

    A file is data ([`lightmarl.trust`][lightmarl.trust]): the classes a saved file names are built only when
    they are lightmarl's own (policies, env transforms), are in ``allowed`` or the binding sets
    ``trust_code``. Every saved form (checkpoint, export, league snapshot) is read by
    [`lightmarl.policies.artifact`][lightmarl.policies.artifact] and built by `build_policies`.

    Args:
        env_transforms: the recipe's env transforms: a policy from a run that recorded its own
            transforms undoes their normalization of its group and applies its run's
            (`lightmarl.policies.input_transforms`).
        allowed: class paths the recipe names ([`lightmarl.trust.recipe_class_paths`][lightmarl.trust.recipe_class_paths]).
    """

    def __init__(self, env_transforms: Sequence[VecTransform] = (), allowed: Iterable[str] = ()) -> None:
        self.env_transforms = list(env_transforms)
        self._cache: dict[tuple, Policy] = {}
        self.allowed = frozenset(allowed)

    def get(
        self,
        binding: PolicyBinding,
        group: GroupSpec,
        device: torch.device | str = "cpu",
        injected: Mapping[str, tuple[str, nn.Module]] | None = None,
    ) -> Policy:
        """The policy of ``binding``; ``injected`` (argument -> (shared module name, module)) is
        passed to its constructor on top of ``policy_kwargs`` (see `lightmarl.policies.shared_modules`)."""
        # Fresh weights per binding, except frozen checkpoints, which can be shared safely.
        owner = None if (binding.policy_uri and not binding.trainable) else binding.id
        descriptor = (owner, binding.class_path, binding.policy_uri, repr(sorted(binding.policy_kwargs.items())), group)
        if descriptor not in self._cache:
            policy = self._build(binding, group, injected or {})
            policy.initialize_to_environment(group)
            self._cache[descriptor] = policy
        return self._cache[descriptor].to(device)

    def _build(self, binding: PolicyBinding, group: GroupSpec, injected: Mapping[str, tuple[str, nn.Module]]) -> Policy:
        if binding.class_path is not None:
            return build_policy(
                binding.class_path, binding.policy_kwargs, group, field=f"binding {binding.id!r}", injected=injected
            )
        return load_policy_from_uri(
            str(binding.policy_uri),
            binding.id,
            group,
            binding.policy_kwargs,
            trust_pickle=binding.trust_pickle,
            env_transforms=self.env_transforms,
            trust_code=binding.trust_code,
            allowed=self.allowed | recipe_class_paths(binding.policy_kwargs),
        )


def build_policy(
    class_path: str,
    kwargs: dict[str, Any],
    group: GroupSpec,
    *,
    field: str,
    injected: Mapping[str, tuple[str, nn.Module]] | None = None,
) -> Policy:
    """``class_path(group, **kwargs, **shared modules)``; ``policy.origin`` records how to rebuild it."""
    injected = dict(injected or {})
    cls = import_object(class_path, field=f"{field}.class_path")
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ValueError(f"{field}.class_path: {class_path!r} is not a lightmarl.policies.Policy subclass")
    try:
        policy = cls(group, **kwargs, **{argument: module for argument, (_, module) in injected.items()})
    except TypeError as err:
        raise ValueError(f"{field}.policy_kwargs: {cls.__name__}{tuple(kwargs)} rejected the arguments: {err}") from err
    except ValueError as err:  # e.g. spaces the policy cannot handle: say which binding
        raise ValueError(f"{field}: {err}") from err
    policy.origin = {"class_path": class_path, "policy_kwargs": dict(kwargs)}
    if injected:
        policy.origin["shared_modules"] = {argument: name for argument, (name, _) in injected.items()}
    return policy


def load_policy_from_uri(
    uri: str,
    binding_id: str,
    group: GroupSpec,
    policy_kwargs: dict[str, Any],
    *,
    trust_pickle: bool = False,
    env_transforms: Sequence[VecTransform] = (),
    trust_code: bool = False,
    allowed: Iterable[str] = (),
) -> Policy:
    """The policy saved at ``uri`` (see [`PolicyRegistry`][lightmarl.policies.registry.PolicyRegistry]), read weights-only unless ``trust_pickle``.

    ``group`` is the recipe's: the file's own env is never built. Classes the file names are
    built only as [`lightmarl.trust`][lightmarl.trust] allows (``allowed``: the recipe's class paths;
    ``trust_code``: the user trusts the file's author).

    A policy from a file that records its run's env transforms (a checkpoint, an export, a league
    snapshot) sees its observations as in that run: ``env_transforms`` (the recipe's) normalization
    of its group is undone and its own run's applied (`lightmarl.policies.input_transforms`).
    """
    field = f"binding {binding_id!r}.policy_uri"
    location, _, fragment = uri.partition("#")
    path_text, _, query = location.partition("?")
    path = Path(path_text)
    class_path = parse_qs(query).get("class_path", [None])[0]  # named by the recipe's URI: allowed
    allowed = frozenset(allowed) | ({class_path} if class_path else set())
    with loading_file(path, field=field, allowed=allowed, trust_code=trust_code):
        # An export or a run directory (its latest checkpoint, lightmarl.policies.run_checkpoints): read_artifact.
        population: SavedPopulation | None
        if is_export(path) or path.is_dir():
            saved: Any = None
            population = read_artifact(path, field=field)
        else:
            saved = load_torch_file(path, field=field, trust_pickle=trust_pickle)
            population = saved_population(saved, path, field)
        if population is not None:
            source_id = fragment or binding_id
            if isinstance(saved, dict) and saved.get("format") == SNAPSHOT_FORMAT:
                (source_id,) = population.bindings  # a snapshot holds one player's policy
                if fragment and fragment != source_id:
                    raise ValueError(
                        f"{field}: {str(path)!r} is the snapshot of player {source_id!r}, not {fragment!r}"
                    )
            return _policy_of_population(population, path, source_id, group, env_transforms, field)
        if isinstance(saved, dict) and saved and all(isinstance(v, torch.Tensor) for v in saved.values()):
            if class_path is None:
                raise ValueError(
                    f"{field}: {str(path)!r} is a plain state_dict; name its policy class in the URI, "
                    f"e.g. '{path_text}?class_path=lightmarl.policies.MLPActorCritic'"
                )
            policy = build_policy(class_path, policy_kwargs, group, field=field)
            _load_weights(policy, saved, field, f"{class_path}{policy_kwargs}")
            return policy
    raise ValueError(
        f"{field}: {str(path)!r} is neither a lightmarl checkpoint, an exported population, a league snapshot "
        "nor a state_dict of tensors"
    )


def _policy_of_population(
    population: SavedPopulation,
    path: Path,
    source_id: str,
    group: GroupSpec,
    env_transforms: Sequence[VecTransform],
    field: str,
) -> Policy:
    """One binding of a saved population, for a run whose env is the recipe's (``group``): it sees its
    observations as in its own run (`lightmarl.policies.input_transforms`)."""
    if source_id not in population.bindings:
        raise ValueError(f"{field}: {str(path)!r} has no binding {source_id!r}; it has {sorted(population.bindings)}")
    entry = population.bindings[source_id]
    try:
        host = host_normalization(env_transforms, group.name)
        norms = (
            entry[INPUT_TRANSFORMS]
            if INPUT_TRANSFORMS in entry
            else input_transforms_of(population.transforms, entry["group"])
        )
    except ValueError as err:
        raise ValueError(f"{field}: {err}") from None
    (policy,) = build_policies(population, only=[source_id], groups={entry["group"]: group}, field=field).values()
    return attach_input_transforms(policy, norms, host)


def build_policies(
    population: SavedPopulation,
    *,
    only: Sequence[str] | None = None,
    groups: Mapping[str, GroupSpec] | None = None,
    host_transforms: Sequence[VecTransform] | None = None,
    field: str = "",
) -> dict[str, Policy]:
    """The policies of a saved population: each built from its class and kwargs, with its shared
    modules rebuilt once and handed to every user, and its weights loaded.

    The one builder of every loader: ``policy_uri`` (`load_policy_from_uri`), `load_population`,
    the ONNX export and league snapshots' policies. The caller has checked the population's class
    paths ([`SavedPopulation.check_classes`][lightmarl.policies.artifact.SavedPopulation.check_classes]), or reads it
    inside `lightmarl.trust.loading_file`.

    Args:
        population: what [`read_artifact`][lightmarl.policies.artifact.read_artifact] read.
        only: the bindings to build (default: all, in the population's order).
        groups: group name -> the [`GroupSpec`][lightmarl.envs.spec.GroupSpec] to build for (default: the
            population's own groups; a recipe passes its env's).
        host_transforms: the transforms of the env the policies act in when it is the population's own
            (`load_population`): a binding its run loaded from yet another run (an NPC) keeps that run's
            input normalization, with these undone first. ``None``: no input transforms attached.
        field: what asked, leading every error message (default: the population's source).

    Raises:
        ValueError: for an unknown binding, a shared module it does not describe, or weights that do not fit.
    """
    field = field or repr(population.source)
    built: dict[str, nn.Module] = {}
    policies: dict[str, Policy] = {}
    for binding_id in population.bindings if only is None else only:
        if binding_id not in population.bindings:
            raise ValueError(f"{field}: no binding {binding_id!r}; it has {sorted(population.bindings)}")
        entry = population.bindings[binding_id]
        binding_field = f"{field} ({binding_id})"
        group = (groups or {}).get(entry["group"]) or population.group_spec(entry["group"])
        injected = rebuild_shared_modules(
            entry.get("shared_modules", {}), population.shared_modules, group, field=binding_field, built=built
        )
        policy = build_policy(
            entry["class_path"], dict(entry.get("policy_kwargs", {})), group, field=binding_field, injected=injected
        )
        prefix = f"{binding_id}."
        weights = {k[len(prefix) :]: v for k, v in population.state.items() if k.startswith(prefix)}
        _load_weights(policy, weights, field, f"binding {binding_id!r} of {population.source!r}")
        norms = entry.get(INPUT_TRANSFORMS)
        if host_transforms is not None and norms:
            policy = attach_input_transforms(policy, norms, host_normalization(host_transforms, group.name))
        policies[binding_id] = policy
    return policies


def rebuild_shared_modules(
    arguments: Mapping[str, str],
    specs: Mapping[str, Mapping[str, Any]],
    group: GroupSpec,
    *,
    field: str,
    built: dict[str, nn.Module] | None = None,
) -> dict[str, tuple[str, nn.Module]]:
    """The shared modules a saved policy was built with (argument -> (name, module)), rebuilt from
    their saved specs; ``built`` (name -> module) reuses modules already rebuilt for other policies."""
    injected = {}
    for argument, name in arguments.items():
        if name not in specs:
            raise ValueError(f"{field}: the saved policy uses shared module {name!r}, which the file does not describe")
        if built is None or name not in built:
            spec = specs[name]
            module_field = f"{field} (shared module {name!r})"
            # Checked before it is built: a shared module must be an nn.Module class (lightmarl.trust).
            resolve_class(str(spec["class_path"]), field=f"{module_field}.class_path", source=field)
            module = instantiate(
                {"class_path": spec["class_path"], "init_args": spec.get("init_args") or {}},
                field=module_field,
                group=group,
            )
            if built is not None:
                built[name] = module
        else:
            module = built[name]
        injected[argument] = (name, module)
    return injected


def _load_weights(policy: Policy, state: dict[str, torch.Tensor], field: str, source: str) -> None:
    try:
        missing, unexpected = policy.load_state_dict(state, strict=False)
    except (RuntimeError, ValueError) as err:  # shape mismatches (TensorDictParams raise ValueError)
        raise ValueError(
            f"{field}: the weights of {source} do not fit group {policy.group.name!r} "
            f"(shapes differ: {str(err).splitlines()[0][:200]})"
        ) from None
    if missing or unexpected:
        raise ValueError(
            f"{field}: the weights of {source} do not fit {type(policy).__name__} "
            f"(missing {missing}, unexpected {unexpected})"
        )
