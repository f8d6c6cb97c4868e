"""Turning a :class:`PolicyBinding` into a policy module: by class path or from a saved run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lightmarl._imports import import_object
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy
from lightmarl.population import PolicyBinding

#: key under which a lightmarl checkpoint describes its bindings (see ``MARLModule.on_save_checkpoint``).
CHECKPOINT_KEY = "lightmarl"


class PolicyRegistry:
    """Builds (and caches) the policy of each binding.

    ``class_path`` bindings are built as ``cls(group, **policy_kwargs)``. ``policy_uri``
    bindings name a lightmarl checkpoint and one of its bindings, ``path/to/run.ckpt#binding``
    (without ``#binding``: the binding with the same id); the policy is rebuilt from the
    class and kwargs stored in the checkpoint and its weights are loaded.
    Every policy is then checked against the env with ``initialize_to_environment``.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple, Policy] = {}

    def get(self, binding: PolicyBinding, group: GroupSpec, device: torch.device | str = "cpu") -> Policy:
        # Fresh weights per binding, except frozen checkpoints, which can be shared safely.
        owner = None if (binding.policy_uri and not binding.trainable) else binding.id
        descriptor = (owner, binding.class_path, binding.policy_uri, repr(sorted(binding.policy_kwargs.items())), group)
        if descriptor not in self._cache:
            policy = self._build(binding, group)
            policy.initialize_to_environment(group)
            self._cache[descriptor] = policy
        return self._cache[descriptor].to(device)

    def _build(self, binding: PolicyBinding, group: GroupSpec) -> Policy:
        if binding.class_path is not None:
            return build_policy(binding.class_path, binding.policy_kwargs, group, field=f"binding {binding.id!r}")
        return load_policy_from_uri(str(binding.policy_uri), binding.id, group)


def build_policy(class_path: str, kwargs: dict[str, Any], group: GroupSpec, *, field: str) -> Policy:
    cls = import_object(class_path, field=f"{field}.class_path")
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ValueError(f"{field}.class_path: {class_path!r} is not a lightmarl.policies.Policy subclass")
    try:
        return cls(group, **kwargs)
    except TypeError as err:
        raise ValueError(f"{field}.policy_kwargs: {cls.__name__}{tuple(kwargs)} rejected the arguments: {err}") from err


def load_policy_from_uri(uri: str, binding_id: str, group: GroupSpec) -> Policy:
    path_text, _, source_id = uri.partition("#")
    source_id = source_id or binding_id
    path = Path(path_text)
    field = f"binding {binding_id!r}.policy_uri"
    if not path.is_file():
        raise ValueError(f"{field}: no checkpoint file at {str(path)!r}")
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    described = checkpoint.get(CHECKPOINT_KEY, {}).get("bindings", {}) if isinstance(checkpoint, dict) else {}
    if source_id not in described:
        raise ValueError(
            f"{field}: checkpoint {str(path)!r} has no binding {source_id!r}"
            + (f"; it has {sorted(described)}" if described else " (not a lightmarl checkpoint)")
        )
    entry = described[source_id]
    policy = build_policy(entry["class_path"], entry["policy_kwargs"], group, field=f"{field} ({source_id})")
    prefix = f"policies.{source_id}."
    state = {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    missing, unexpected = policy.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{field}: weights of {source_id!r} do not fit {entry['class_path']} for group {group.name!r} "
            f"(missing {missing}, unexpected {unexpected})"
        )
    return policy
