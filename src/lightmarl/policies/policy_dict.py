"""The population's policies as one saveable dict for inference: binding id -> policy, like RLlib's ``MultiRLModule`` (formerly ``MultiAgentRLModule``).

>>> policies = PolicyDict.from_module(marl_module)      # doctest: +SKIP
>>> policies.save("population.pt")                      # doctest: +SKIP
>>> policies = PolicyDict.load("population.pt")         # or a checkpoint "runs/x/last.ckpt", or an export dir
>>> policies["A"].encoder is policies["B"].encoder      # shared modules are still shared
True

The file describes itself: each binding's policy class, its keyword arguments, its agent
group's spaces, the shared modules it was built with and every weight. Loading rebuilds
each shared module once and hands the same object to every policy that used it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy
from lightmarl.policies.exported import write_export
from lightmarl.policies.registry import POLICY_DICT_FORMAT, build_policy, read_population, rebuild_shared_modules
from lightmarl.trust import loading_file


class PolicyDict(nn.ModuleDict):
    """Binding id -> policy, with shared modules shared; saved and loaded without the training run.

    Args:
        policies: binding id -> policy (built by the registry: each has an ``origin``).
        groups: binding id -> the agent group its policy acts for.
        shared_modules: the shared modules' saved specs (name -> ``{class_path, init_args, ...}``).
    """

    def __init__(
        self,
        policies: Mapping[str, Policy],
        groups: Mapping[str, GroupSpec] | None = None,
        shared_modules: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(dict(policies))
        self.groups = {b: groups[b] if groups else p.group for b, p in policies.items()}
        self.shared_specs = {name: dict(spec) for name, spec in (shared_modules or {}).items()}

    @classmethod
    def from_module(cls, module: Any) -> PolicyDict:
        """The live policies of a [`MARLModule`][lightmarl.training.module.MARLModule] (same objects, not copies)."""
        policies = {b: p for b, p in module.policies.items()}
        return cls(policies, {b: p.group for b, p in policies.items()}, module.shared.describe())

    def describe(self) -> dict[str, Any]:
        """Every binding's class, keyword arguments, group and shared modules, as plain data."""
        missing = [b for b, p in self.items() if not getattr(p, "origin", None)]
        if missing:
            raise ValueError(f"PolicyDict: bindings {missing} were not built from a class path (no `origin`)")
        return {
            "bindings": {b: {**cast(Policy, p).origin, "group": self.groups[b].name} for b, p in self.items()},
            "groups": {g.name: dataclasses.asdict(g) for g in self.groups.values()},
            "shared_modules": self.shared_specs,
        }

    def save(self, path: str | Path) -> None:
        """One torch file (weights-only loadable) holding the description and every weight."""
        state = {k: v.detach().cpu() for k, v in self.state_dict().items()}
        torch.save({"format": POLICY_DICT_FORMAT, **self.describe(), "state_dict": state}, Path(path))

    def export(self, directory: str | Path) -> Path:
        """The export format (`lightmarl.policies.exported`): ``population.json`` + safetensors weights."""
        return write_export(directory, self.describe(), self.state_dict())

    def select(self, binding_ids: list[str]) -> PolicyDict:
        """The policies of ``binding_ids`` only (same objects), e.g. to export part of a population."""
        unknown = sorted(set(binding_ids) - set(self.keys()))
        if unknown:
            raise ValueError(f"PolicyDict: no bindings {unknown}; it has {sorted(self.keys())}")
        used = {name for b in binding_ids for name in cast(Policy, self[b]).origin.get("shared_modules", {}).values()}
        shared = {name: spec for name, spec in self.shared_specs.items() if name in used}
        return PolicyDict(
            {b: cast(Policy, self[b]) for b in binding_ids}, {b: self.groups[b] for b in binding_ids}, shared
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        map_location: str | torch.device = "cpu",
        trust_pickle: bool = False,
        trust_code: bool = False,
        allowed_classes: Sequence[str] = (),
    ) -> PolicyDict:
        """Rebuild a saved policy dict, an exported population, or every policy of a training checkpoint.

        Files are data ([`lightmarl.trust`][lightmarl.trust]): they are read weights-only (tensors and plain
        data), and the classes they name are built only when they are ``lightmarl.policies``
        classes or listed in ``allowed_classes``. ``trust_pickle`` allows pickled Python objects
        and ``trust_code`` any class the file names, for files from an author you trust.

        Raises:
            ValueError: when the file is none of those, holds pickled objects without
                ``trust_pickle``, names a class it may not, or describes a policy it cannot rebuild.
        """
        path = Path(path)
        field = "PolicyDict.load"
        with loading_file(path, field=field, allowed=allowed_classes, trust_code=trust_code):
            description, state = read_population(
                path, field=field, trust_pickle=trust_pickle, map_location=map_location
            )
            if "groups" not in description:
                raise ValueError(
                    f"{field}: {str(path)!r} holds no group specs (a checkpoint from before they were saved); "
                    "load its bindings with policy_uri in a recipe, whose env gives the groups"
                )
            groups = {
                name: _group_from_dict(d, f"{field}: {str(path)!r} group {name!r}")
                for name, d in description["groups"].items()
            }
            built: dict[str, nn.Module] = {}
            policies: dict[str, Policy] = {}
            for binding_id, entry in description["bindings"].items():
                binding_field = f"{str(path)!r} binding {binding_id!r}"
                if entry.get("group") not in groups:
                    raise ValueError(
                        f"{binding_field}: group {entry.get('group')!r} is not among the file's groups {sorted(groups)}"
                    )
                group = groups[entry["group"]]
                injected = rebuild_shared_modules(
                    entry.get("shared_modules", {}),
                    description.get("shared_modules", {}),
                    group,
                    field=binding_field,
                    built=built,
                )
                policies[binding_id] = build_policy(
                    entry["class_path"],
                    dict(entry.get("policy_kwargs", {})),
                    group,
                    field=binding_field,
                    injected=injected,
                )
        out = cls(
            policies,
            {b: groups[e["group"]] for b, e in description["bindings"].items()},
            description.get("shared_modules"),
        )
        try:
            out.load_state_dict({k: v.to(map_location) for k, v in state.items()})
        except (RuntimeError, ValueError) as err:
            detail = " ".join(str(err).split())[:300]
            raise ValueError(
                f"{field}: the weights in {str(path)!r} do not fit the policies it describes ({detail})"
            ) from None
        return out


def _group_from_dict(values: Mapping[str, Any], field: str) -> GroupSpec:
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return GroupSpec(**fields)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{field}: not a group spec ({err})") from None
