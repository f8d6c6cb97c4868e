"""Who acts: bindings, the agent -> binding map and loss profiles."""

from lightmarl.population.bindings import (
    DEFAULT_BINDING_ID,
    BindingTable,
    GroupBindingIndex,
    PolicyBinding,
    PolicyBindingConfig,
    as_binding,
    default_bindings,
)

__all__ = [
    "DEFAULT_BINDING_ID",
    "BindingTable",
    "GroupBindingIndex",
    "PolicyBinding",
    "PolicyBindingConfig",
    "as_binding",
    "default_bindings",
]
