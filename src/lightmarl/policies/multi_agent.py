"""Acting for the whole population: one forward per binding over its rows."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from lightmarl.data import schema
from lightmarl.envs.spec import EnvSpec
from lightmarl.policies.base import Policy
from lightmarl.population import BindingTable


class MultiAgentPolicy(nn.Module):
    """Runs every binding's policy once on the rows of the agents it controls.

    Rows are grouped with the index tensors cached in the :class:`BindingTable` (no
    per-agent Python loop): for each group, each binding gathers its agents' rows,
    runs one forward, and its actions / log-probs are scattered back in place. A
    binding that controls a whole group skips the gather and scatter.

    Args:
        policies: binding id -> policy.
        table: the population's binding table.
    """

    #: entries copied back from each binding's forward into the group's rows.
    OUTPUT_KEYS = (schema.ACTION, schema.ACTION_LOG_PROB)

    def __init__(self, policies: dict[str, Policy], table: BindingTable) -> None:
        super().__init__()
        missing = [b for b in table.active_ids if b not in policies]
        if missing:
            raise ValueError(f"no policy was built for bindings {missing}")
        self.policies = nn.ModuleDict(policies)
        self.table = table

    @property
    def env_spec(self) -> EnvSpec:
        return self.table.env_spec

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """``tensordict``: root batch ``[*batch]``, group entries ``[*batch, agents_in_group]``."""
        for group_name, index in self.table.groups.items():
            group = self.env_spec.groups[group_name]
            if len(index.agents_of_binding) == 1:
                (binding,) = index.agents_of_binding
                self.policies[self.table.ids[binding]](tensordict)
                continue
            rows = tensordict.get(group_name)
            batch = rows.batch_size
            out = {
                schema.ACTION: torch.zeros(*batch, *group.action_shape, dtype=group.action_dtype),
                schema.ACTION_LOG_PROB: torch.zeros(batch),
            }
            for binding, agents in index.agents_of_binding.items():
                sub = TensorDict({group_name: rows[..., agents]}, batch_size=tensordict.batch_size)
                result = self.policies[self.table.ids[binding]](sub).get(group_name)
                for key in self.OUTPUT_KEYS:
                    out[key][..., agents] = result.get(key).to(out[key].dtype)
            for key, value in out.items():
                rows.set(key, value)
        return tensordict
