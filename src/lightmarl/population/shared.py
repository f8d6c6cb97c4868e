"""Shared modules: one network object used by several bindings' policies (seed 000's ``shared_modules``).

A recipe names each shared module once::

    shared_modules:
      encoder:
        class_path: lightmarl.policies.encoders.MLPEncoder
        init_args: {out_features: 64}
        shared_between: {ppo_policy: encoder, dqn_policy: encoder}   # binding -> constructor argument
        lr: 0.001

The module is built once (its class gets the bindings' agent group as ``group=`` when its
constructor takes one) and passed to each listed binding's policy constructor under that
binding's argument name, so every policy holds the *same* object. ``shared_between:
{__all__: name}`` (the default when ``shared_between`` is left out, with the module's own
name) lists every binding with a policy class.

Stepping rule (exactly once): the UnitTrainers of the bindings never step a shared module's
parameters. Every loss that reaches it adds to its gradient during an iteration, and the
MARLTrainer steps it once per iteration, with one optimizer of its own, on that summed
gradient (averaged across DDP ranks like every other gradient). A shared module used only by
frozen bindings is frozen.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

from torch import nn

from lightmarl._imports import import_object, instantiate
from lightmarl.envs.spec import EnvSpec
from lightmarl.population.bindings import BindingTable

ALL_BINDINGS = "__all__"


class SharedModuleConfig(TypedDict):
    """One entry of a recipe's ``shared_modules`` (see the module doc)."""

    class_path: str
    init_args: NotRequired[dict[str, Any]]
    shared_between: NotRequired[dict[str, str]]
    lr: NotRequired[float]
    optimizer: NotRequired[Literal["adam", "sgd"]]
    max_grad_norm: NotRequired[float | None]


class SharedModules:
    """The shared modules of a population, built and checked against its bindings.

    Args:
        configs: module name -> :class:`SharedModuleConfig`.
        table: the population's bindings.
        env_spec: the env (for each module's agent group).

    Raises:
        ValueError: naming the module and binding for an unknown binding, a binding loaded
            from a file (its constructor cannot take a module), bindings of different groups
            sharing a module whose class takes a group, an argument the policy class does not
            accept or that the binding's ``policy_kwargs`` already set, or bad optimizer settings.
    """

    def __init__(
        self, configs: Mapping[str, SharedModuleConfig] | None, table: BindingTable, env_spec: EnvSpec
    ) -> None:
        self.configs: dict[str, dict[str, Any]] = {name: dict(config) for name, config in (configs or {}).items()}
        self.modules: dict[str, nn.Module] = {}
        #: module name -> binding id -> constructor argument name (active bindings only).
        self.users: dict[str, dict[str, str]] = {}
        for name, config in self.configs.items():
            self._check_settings(name, config)
            users = self._resolve_users(name, config, table)
            groups = {table.group_of_binding[b] for b in users}
            devices = {table.binding(b).device for b in users}
            if len(devices) > 1:
                raise ValueError(
                    f"shared_modules.{name}: its bindings ask for different devices "
                    f"({ {b: table.binding(b).device for b in users} }); one module lives on one device"
                )
            field = f"shared_modules.{name}"
            context: dict[str, Any] = {}
            if len(groups) == 1:
                context["group"] = env_spec.groups[next(iter(groups))]
            elif _takes(config["class_path"], "group", field):
                raise ValueError(
                    f"{field}: its class takes an agent group, but its bindings act in groups {sorted(groups)}; "
                    "share it between bindings of one group"
                )
            module = instantiate(
                {"class_path": config["class_path"], "init_args": config.get("init_args", {})}, field=field, **context
            )
            if not isinstance(module, nn.Module):
                raise ValueError(f"{field}.class_path: {config['class_path']!r} did not build an nn.Module")
            self.modules[name] = module
            self.users[name] = users
        self._trainable = [n for n, users in self.users.items() if any(table.binding(b).trainable for b in users)]
        self.restore_trainability()

    def restore_trainability(self) -> None:
        """Freeze the modules only frozen bindings use; let the others learn.

        Call it after freezing frozen bindings' policies, which freezes the shared modules inside them too.
        """
        for name, module in self.modules.items():
            module.requires_grad_(name in self._trainable)

    @staticmethod
    def _check_settings(name: str, config: dict[str, Any]) -> None:
        field = f"shared_modules.{name}"
        unknown = set(config) - set(SharedModuleConfig.__annotations__)
        if unknown:
            raise ValueError(
                f"{field}: unknown keys {sorted(unknown)}; allowed {sorted(SharedModuleConfig.__annotations__)}"
            )
        lr = config.get("lr", 1e-3)
        if not isinstance(lr, (int, float)) or lr <= 0:
            raise ValueError(f"{field}.lr: expected a positive number, got {lr!r}")
        if config.get("optimizer", "adam") not in ("adam", "sgd"):
            raise ValueError(f"{field}.optimizer: expected 'adam' or 'sgd', got {config.get('optimizer')!r}")

    @staticmethod
    def _resolve_users(name: str, config: dict[str, Any], table: BindingTable) -> dict[str, str]:
        field = f"shared_modules.{name}.shared_between"
        shared_between = dict(config.get("shared_between") or {ALL_BINDINGS: name})
        users: dict[str, str] = {}
        if ALL_BINDINGS in shared_between:
            argument = shared_between.pop(ALL_BINDINGS)
            users = {b: argument for b in table.active_ids if table.binding(b).class_path is not None}
        for binding_id, argument in shared_between.items():
            if binding_id not in table.index:
                raise ValueError(f"{field}: unknown binding {binding_id!r}; bindings are {table.ids}")
            users[binding_id] = argument
        for binding_id in [b for b in users if b not in table.group_of_binding]:
            del users[binding_id]  # controls no agent in this env: no policy is built
        if not users:
            raise ValueError(f"{field}: no binding that acts in this env uses the module")
        for binding_id, argument in users.items():
            binding = table.binding(binding_id)
            where = f"{field}.{binding_id}"
            if binding.class_path is None:
                raise ValueError(
                    f"{where}: binding {binding_id!r} is loaded from {binding.policy_uri!r}; only bindings built "
                    "from a class_path can take a shared module"
                )
            if argument in binding.policy_kwargs:
                raise ValueError(f"{where}: binding {binding_id!r} already sets policy_kwargs.{argument}")
            if not _takes(binding.class_path, argument, where):
                raise ValueError(
                    f"{where}: {binding.class_path} has no constructor argument {argument!r} to receive the module"
                )
        return users

    def __bool__(self) -> bool:
        return bool(self.modules)

    def injected(self, binding_id: str) -> dict[str, tuple[str, nn.Module]]:
        """Constructor argument -> ``(module name, module)`` for one binding's policy."""
        return {
            users[binding_id]: (name, self.modules[name]) for name, users in self.users.items() if binding_id in users
        }

    def trainable(self) -> dict[str, nn.Module]:
        """Shared modules some trainable binding learns through (the others are frozen)."""
        return {n: self.modules[n] for n in self._trainable}

    def describe(self) -> dict[str, dict[str, Any]]:
        """What rebuilds the modules (for checkpoints and saved policy dicts)."""
        return {
            name: {
                "class_path": config["class_path"],
                "init_args": dict(config.get("init_args") or {}),
                "shared_between": dict(self.users[name]),
            }
            for name, config in self.configs.items()
        }

    def optimizer_settings(self, name: str) -> tuple[str, float, float | None]:
        """``(optimizer, lr, max_grad_norm)`` of one module."""
        config = self.configs[name]
        return config.get("optimizer", "adam"), float(config.get("lr", 1e-3)), config.get("max_grad_norm")


def _takes(class_path: str, argument: str, field: str) -> bool:
    cls = import_object(class_path, field=f"{field}.class_path")
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return True  # cannot tell: let the constructor decide
    return argument in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
