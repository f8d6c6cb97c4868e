"""The MARLTrainer: one UnitTrainer per trainable binding, fed by one rollout stream."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from lightmarl.algorithms.base import Algorithm, GradientStepper, UnitTrainer
from lightmarl.policies.base import Policy
from lightmarl.population import BindingTable


class IndependentMARLTrainer:
    """Routes each trainable binding's rows to its own UnitTrainer (independent learning).

    Frozen bindings have no UnitTrainer: they act, their rows are annotated
    ``is_trainable_agent=False``, and nothing steps their parameters.

    Args:
        table: the population.
        policies: binding id -> policy, for every binding that plays (teachers included).
        algorithms: binding id -> algorithm, for every trainable binding that controls an agent.
    """

    def __init__(self, table: BindingTable, policies: dict[str, Policy], algorithms: dict[str, Algorithm]) -> None:
        self.table = table
        self.unit_trainers: dict[str, UnitTrainer] = {}
        for binding_id in table.trainable_ids:
            if binding_id not in table.group_of_binding:
                continue  # maps to no agent in this env: nothing to learn from
            self.unit_trainers[binding_id] = algorithms[binding_id].make_unit_trainer(
                binding_id, policies[binding_id], table, population=policies
            )

    def make_optimizers(self) -> list[torch.optim.Optimizer]:
        """One optimizer per UnitTrainer, in :attr:`unit_trainers` order."""
        return [unit.make_optimizer() for unit in self.unit_trainers.values()]

    def update(
        self,
        experience: TensorDictBase,
        optimizers: list[torch.optim.Optimizer],
        stepper: GradientStepper,
        iteration: int = 0,
    ) -> dict[str, dict[str, float]]:
        """One learning step of every UnitTrainer due at ``iteration`` on its rows of ``experience``.

        A UnitTrainer with ``update_every = k`` learns on iterations 0, k, 2k, ... and skips
        the others (its rows are simply not used), e.g. to let one co-trained binding adapt
        to a slower-moving partner.
        """
        return {
            binding_id: unit.update(experience, optimizer, stepper)
            for (binding_id, unit), optimizer in zip(self.unit_trainers.items(), optimizers)
            if iteration % unit.update_every == 0
        }

    def to(self, device: torch.device) -> IndependentMARLTrainer:
        for unit in self.unit_trainers.values():
            unit.to(device)
        return self

    def state_dict(self) -> dict:
        return {b: unit.state_dict() for b, unit in self.unit_trainers.items()}

    def load_state_dict(self, state: dict) -> None:
        for b, unit in self.unit_trainers.items():
            if b in state:
                unit.load_state_dict(state[b])
