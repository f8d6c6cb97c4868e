"""Shared modules as plain data: which bindings share which module, under which argument, with which optimizer.

A recipe's ``shared_modules``: one network object used by several bindings' policies.

A recipe names each shared module once::

    shared_modules:
      encoder:
        class_path: lightmarl.policies.encoders.MLPEncoder
        init_args: {out_features: 64}
        shared_between: {ppo_policy: encoder, dqn_policy: encoder}   # binding -> constructor argument
        lr: 0.001

[`shared_module_specs`][lightmarl.population.shared.shared_module_specs] checks each entry against the bindings and resolves it into a
[`SharedModuleSpec`][lightmarl.population.shared.SharedModuleSpec]; [`lightmarl.policies.shared_modules.SharedModules`][lightmarl.policies.shared_modules.SharedModules] builds the
module once from it (its class gets the bindings' agent group as ``group=`` when its
constructor takes one) and passes it to each listed binding's policy constructor under that
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
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

from lightmarl._imports import import_object
from lightmarl.population.bindings import BindingTable

ALL_BINDINGS = "__all__"


class SharedModuleConfig(TypedDict):
    """One entry of a recipe's ``shared_modules``."""

    class_path: str
    init_args: NotRequired[dict[str, Any]]
    shared_between: NotRequired[dict[str, str]]
    lr: NotRequired[float]
    optimizer: NotRequired[Literal["adam", "sgd"]]
    max_grad_norm: NotRequired[float | None]


@dataclass(frozen=True)
class SharedModuleSpec:
    """One shared module, checked against the population: what builds it and who uses it.

    Attributes:
        name: the module's name in the recipe.
        class_path: import path of its ``nn.Module`` class.
        init_args: its constructor's keyword arguments.
        users: binding id -> the policy constructor argument that receives the module (bindings
            that act in this env only).
        group: the agent group of its users when they all act in one (passed as ``group=`` to a
            class that takes one), else ``None``.
        trainable: some trainable binding uses it (otherwise it is frozen).
        optimizer: ``"adam"`` or ``"sgd"``.
        lr: learning rate of its optimizer.
        max_grad_norm: gradient clipping of its step (``None``: none).
    """

    name: str
    class_path: str
    init_args: dict[str, Any] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)
    group: str | None = None
    trainable: bool = True
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 1e-3
    max_grad_norm: float | None = None

    def describe(self) -> dict[str, Any]:
        """What rebuilds the module (for checkpoints and saved policy dicts)."""
        return {"class_path": self.class_path, "init_args": dict(self.init_args), "shared_between": dict(self.users)}


def shared_module_specs(
    configs: Mapping[str, SharedModuleConfig] | None, table: BindingTable
) -> dict[str, SharedModuleSpec]:
    """Check a recipe's ``shared_modules`` against the population and resolve each entry.

    Args:
        configs: module name -> [`SharedModuleConfig`][lightmarl.population.shared.SharedModuleConfig].
        table: the population's bindings.

    Returns:
        module name -> [`SharedModuleSpec`][lightmarl.population.shared.SharedModuleSpec], in the recipe's order.

    Raises:
        ValueError: naming the module and binding for an unknown binding, a binding loaded
            from a file (its constructor cannot take a module), bindings of different groups
            sharing a module whose class takes a group, bindings on different devices, an
            argument the policy class does not accept or that the binding's ``policy_kwargs``
            already set, or bad optimizer settings.
    """
    specs: dict[str, SharedModuleSpec] = {}
    for name, entry in (configs or {}).items():
        config: dict[str, Any] = dict(entry)
        field_name = f"shared_modules.{name}"
        _check_settings(field_name, config)
        users = _resolve_users(name, config, table)
        groups = {table.group_of_binding[b] for b in users}
        devices = {table.binding(b).device for b in users}
        if len(devices) > 1:
            raise ValueError(
                f"{field_name}: its bindings ask for different devices "
                f"({ {b: table.binding(b).device for b in users} }); one module lives on one device"
            )
        if len(groups) > 1 and _takes(config["class_path"], "group", field_name):
            raise ValueError(
                f"{field_name}: its class takes an agent group, but its bindings act in groups {sorted(groups)}; "
                "share it between bindings of one group"
            )
        specs[name] = SharedModuleSpec(
            name=name,
            class_path=config["class_path"],
            init_args=dict(config.get("init_args") or {}),
            users=users,
            group=next(iter(groups)) if len(groups) == 1 else None,
            trainable=any(table.binding(b).trainable for b in users),
            optimizer=config.get("optimizer", "adam"),
            lr=float(config.get("lr", 1e-3)),
            max_grad_norm=config.get("max_grad_norm"),
        )
    return specs


def _check_settings(field_name: str, config: dict[str, Any]) -> None:
    unknown = set(config) - set(SharedModuleConfig.__annotations__)
    if unknown:
        raise ValueError(
            f"{field_name}: unknown keys {sorted(unknown)}; allowed {sorted(SharedModuleConfig.__annotations__)}"
        )
    lr = config.get("lr", 1e-3)
    if not isinstance(lr, (int, float)) or lr <= 0:
        raise ValueError(f"{field_name}.lr: expected a positive number, got {lr!r}")
    max_grad_norm = config.get("max_grad_norm")
    if max_grad_norm is not None and (not isinstance(max_grad_norm, (int, float)) or max_grad_norm <= 0):
        raise ValueError(f"{field_name}.max_grad_norm: expected a positive number or null, got {max_grad_norm!r}")
    if config.get("optimizer", "adam") not in ("adam", "sgd"):
        raise ValueError(f"{field_name}.optimizer: expected 'adam' or 'sgd', got {config.get('optimizer')!r}")


def _resolve_users(name: str, config: dict[str, Any], table: BindingTable) -> dict[str, str]:
    path = f"shared_modules.{name}.shared_between"
    shared_between = dict(config.get("shared_between") or {ALL_BINDINGS: name})
    users: dict[str, str] = {}
    if ALL_BINDINGS in shared_between:
        argument = shared_between.pop(ALL_BINDINGS)
        users = {b: argument for b in table.active_ids if table.binding(b).class_path is not None}
    for binding_id, argument in shared_between.items():
        if binding_id not in table.index:
            raise ValueError(f"{path}: unknown binding {binding_id!r}; bindings are {table.ids}")
        users[binding_id] = argument
    for binding_id in [b for b in users if b not in table.group_of_binding]:
        del users[binding_id]  # controls no agent in this env: no policy is built
    if not users:
        raise ValueError(f"{path}: no binding that acts in this env uses the module")
    for binding_id, argument in users.items():
        binding = table.binding(binding_id)
        where = f"{path}.{binding_id}"
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


def _takes(class_path: str, argument: str, field: str) -> bool:
    cls = import_object(class_path, field=f"{field}.class_path")
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return True  # cannot tell: let the constructor decide
    return argument in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
