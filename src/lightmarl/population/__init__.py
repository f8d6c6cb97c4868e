"""Who acts, as plain data: bindings, the agent -> binding map, loss profiles and shared-module specs."""

from lightmarl.population.bindings import (
    DEFAULT_BINDING_ID,
    AgentBindingMap,
    BindingTable,
    GroupBindingIndex,
    PaddedRows,
    PerEnvAgentBindingMap,
    PolicyBinding,
    PolicyBindingConfig,
    as_binding,
    default_bindings,
    resolve_policy_mapping_fn,
)
from lightmarl.population.shared import SharedModuleConfig, SharedModuleSpec, shared_module_specs

__all__ = [
    "DEFAULT_BINDING_ID",
    "AgentBindingMap",
    "BindingTable",
    "GroupBindingIndex",
    "PaddedRows",
    "PerEnvAgentBindingMap",
    "PolicyBinding",
    "PolicyBindingConfig",
    "SharedModuleConfig",
    "SharedModuleSpec",
    "as_binding",
    "default_bindings",
    "resolve_policy_mapping_fn",
    "shared_module_specs",
]
