"""Policies held in Python, saved as a population: binding id -> policy, like RLlib's ``MultiRLModule``.

>>> policies = PolicyDict({"main": policy})             # doctest: +SKIP
>>> policies.export("exported")                         # the export format, as `lightmarl export` writes it
>>> population = lightmarl.load_population("exported")  # doctest: +SKIP

Its one job is the writing side for policies that are not (or not yet) in a run's checkpoint: a
policy built or trained by hand, part of a population
([`select`][lightmarl.policies.policy_dict.PolicyDict.select]), or a live
[`MARLModule`][lightmarl.training.module.MARLModule]'s policies
([`from_module`][lightmarl.policies.policy_dict.PolicyDict.from_module]). It describes them as a
[`SavedPopulation`][lightmarl.policies.artifact.SavedPopulation] (each binding's policy class, keyword
arguments, agent group's spaces and shared modules); reading goes through the one front door,
[`lightmarl.load_population`][lightmarl.inference.population.load_population] (or ``policy_uri`` in a recipe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from torch import nn

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.artifact import SavedPopulation, write_artifact
from lightmarl.policies.base import Policy


class PolicyDict(nn.ModuleDict):
    """Binding id -> policy, with shared modules shared; exported without a training run.

    Args:
        policies: binding id -> policy (built by the registry or `build_policy`: each has an ``origin``).
        groups: binding id -> the agent group its policy acts for (default: each policy's ``group``).
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

    def population(self) -> SavedPopulation:
        """The policies as a saved population: every binding's class, kwargs, group and weights; each
        agent of a group acts with the group's first binding; no env transforms, no counters.

        Raises:
            ValueError: for a policy not built from a class path (no ``origin``).
        """
        missing = [b for b, p in self.items() if not getattr(p, "origin", None)]
        if missing:
            raise ValueError(f"PolicyDict: bindings {missing} were not built from a class path (no `origin`)")
        default: dict[str, str] = {}
        for binding_id, group in self.groups.items():
            for agent in group.agents:
                default.setdefault(agent, binding_id)
        return SavedPopulation(
            bindings={b: {**cast(Policy, p).origin, "group": self.groups[b].name} for b, p in self.items()},
            groups={g.name: dataclasses.asdict(g) for g in self.groups.values()},
            shared_modules=self.shared_specs,
            agent_binding_map={"default": default, "per_env": {}},
            state={k: v.detach().cpu() for k, v in self.state_dict().items()},
            source="PolicyDict",
        )

    def export(self, directory: str | Path) -> Path:
        """The export format (`lightmarl.policies.exported`): ``population.json`` + safetensors weights."""
        return write_artifact(self.population(), directory)

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
