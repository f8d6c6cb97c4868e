"""Who acts: bindings, the agent -> binding map and loss profiles."""

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

__all__ = [
    "DEFAULT_BINDING_ID",
    "AgentBindingMap",
    "BindingTable",
    "GroupBindingIndex",
    "PaddedRows",
    "PerEnvAgentBindingMap",
    "PolicyBinding",
    "PolicyBindingConfig",
    "as_binding",
    "default_bindings",
    "resolve_policy_mapping_fn",
]
