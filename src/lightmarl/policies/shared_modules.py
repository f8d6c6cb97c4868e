"""Shared modules built: one ``nn.Module`` object handed to several bindings' policies.

The recipe's ``shared_modules`` are checked and resolved as plain data by
[`lightmarl.population.shared.shared_module_specs`][lightmarl.population.shared.shared_module_specs] (who shares what, under which argument,
with which optimizer); [`SharedModules`][lightmarl.policies.shared_modules.SharedModules] builds each module once and says which policy
constructor argument of which binding receives it.

Stepping rule (exactly once): the UnitTrainers of the bindings never step a shared module's
parameters. Every loss that reaches it adds to its gradient during an iteration, and the
MARLTrainer steps it once per iteration, with one optimizer of its own, on that summed
gradient (averaged across DDP ranks like every other gradient). A shared module used only by
frozen bindings is frozen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from lightmarl._imports import instantiate
from lightmarl.envs.spec import EnvSpec
from lightmarl.population.bindings import BindingTable
from lightmarl.population.shared import SharedModuleConfig, SharedModuleSpec, shared_module_specs


class SharedModules:
    """The shared modules of a population, built from their checked specs.

    Args:
        configs: the recipe's ``shared_modules`` (module name -> [`SharedModuleConfig`][lightmarl.population.shared.SharedModuleConfig]).
        table: the population's bindings.
        env_spec: the env (for each module's agent group).

    Raises:
        ValueError: what [`shared_module_specs`][lightmarl.population.shared.shared_module_specs] raises, and
            naming the module when its class does not build an ``nn.Module``.
    """

    def __init__(
        self, configs: Mapping[str, SharedModuleConfig] | None, table: BindingTable, env_spec: EnvSpec
    ) -> None:
        self.specs: dict[str, SharedModuleSpec] = shared_module_specs(configs, table)
        self.modules: dict[str, nn.Module] = {}
        for name, spec in self.specs.items():
            field = f"shared_modules.{name}"
            context: dict[str, Any] = {} if spec.group is None else {"group": env_spec.groups[spec.group]}
            module = instantiate(
                {"class_path": spec.class_path, "init_args": spec.init_args}, field=field, base=nn.Module, **context
            )
            if not isinstance(module, nn.Module):
                raise ValueError(f"{field}.class_path: {spec.class_path!r} did not build an nn.Module")
            self.modules[name] = module
        self.restore_trainability()

    def restore_trainability(self) -> None:
        """Freeze the modules only frozen bindings use; let the others learn.

        Call it after freezing frozen bindings' policies, which freezes the shared modules inside them too.
        """
        for name, module in self.modules.items():
            module.requires_grad_(self.specs[name].trainable)

    def __bool__(self) -> bool:
        return bool(self.modules)

    def injected(self, binding_id: str) -> dict[str, tuple[str, nn.Module]]:
        """Constructor argument -> ``(module name, module)`` for one binding's policy."""
        return {
            spec.users[binding_id]: (name, self.modules[name])
            for name, spec in self.specs.items()
            if binding_id in spec.users
        }

    def trainable(self) -> dict[str, nn.Module]:
        """Shared modules some trainable binding learns through (the others are frozen)."""
        return {name: self.modules[name] for name, spec in self.specs.items() if spec.trainable}

    def describe(self) -> dict[str, dict[str, Any]]:
        """What rebuilds the modules (for checkpoints and saved policy dicts)."""
        return {name: spec.describe() for name, spec in self.specs.items()}

    def optimizer_settings(self, name: str) -> tuple[str, float, float | None]:
        """``(optimizer, lr, max_grad_norm)`` of one module."""
        spec = self.specs[name]
        return spec.optimizer, spec.lr, spec.max_grad_norm
