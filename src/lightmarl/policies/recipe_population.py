"""A recipe's bindings built into the policies that act: the shared modules, each active binding's policy, their forward.

Saved populations (checkpoints, exports, league snapshots) are rebuilt by
[`build_policies`][lightmarl.policies.registry.build_policies]; a recipe's bindings name a class or a
``policy_uri`` and get the recipe's live shared modules injected, which is what this builds.
"""

from __future__ import annotations

from collections.abc import Sequence

from lightmarl.envs.spec import EnvSpec
from lightmarl.envs.transforms import VecTransform
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.policies.shared_modules import SharedModules
from lightmarl.population import BindingTable
from lightmarl.population.shared import SharedModuleConfig
from lightmarl.trust import recipe_class_paths


def build_recipe_population(
    table: BindingTable,
    env_spec: EnvSpec,
    env_transforms: Sequence[VecTransform],
    shared_modules: dict[str, SharedModuleConfig] | None,
) -> tuple[SharedModules, MultiAgentPolicy]:
    """The shared modules and the population of a recipe's active bindings.

    Frozen bindings' policies take no gradient, except through a shared module a trainable
    binding also uses (that one keeps learning).

    Args:
        table: the recipe's validated bindings.
        env_spec: the env the bindings act in, after its transforms.
        env_transforms: the recipe's env transforms: a loaded policy sees inputs as in its own run.
        shared_modules: the recipe's ``model.shared_modules``.
    """
    shared = SharedModules(shared_modules, table, env_spec)
    # A policy_uri file may name the classes this recipe names, and lightmarl's own (lightmarl.trust).
    registry = PolicyRegistry(env_transforms, allowed=recipe_class_paths(table.bindings, shared_modules))
    policies = {
        b: registry.get(table.binding(b), env_spec.groups[table.group_of_binding[b]], injected=shared.injected(b))
        for b in table.active_ids
    }
    for binding in table.bindings:
        if not binding.trainable and binding.id in policies:
            policies[binding.id].requires_grad_(False)
    shared.restore_trainability()
    return shared, MultiAgentPolicy(policies, table)
