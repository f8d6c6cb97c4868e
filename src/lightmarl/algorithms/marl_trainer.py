"""The MARLTrainer: one UnitTrainer per trainable binding, fed by one rollout stream."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import nn

from lightmarl.algorithms.base import Algorithm, GradientStepper, UnitTrainer, unique_parameters
from lightmarl.policies.base import Policy
from lightmarl.policies.shared_modules import SharedModules
from lightmarl.population import BindingTable

#: metrics key of the shared modules' step (logged as ``train/_shared/<module>_grad_norm``).
SHARED_METRICS = "_shared"


class IndependentMARLTrainer:
    """Routes each trainable binding's rows to its own UnitTrainer (independent learning).

    Frozen bindings have no UnitTrainer: they act, their rows are annotated
    ``is_trainable_agent=False``, and nothing steps their parameters.

    Shared modules (:mod:`lightmarl.population.shared`) are stepped exactly once per
    iteration: no UnitTrainer steps them; every loss that reaches them adds to their
    gradient, and after the UnitTrainers have learnt, one optimizer of the MARLTrainer's
    (the last of :meth:`make_optimizers`) steps them on the summed gradient.

    Args:
        table: the population.
        policies: binding id -> policy, for every binding that plays (teachers included).
        algorithms: binding id -> algorithm, for every trainable binding that controls an agent.
        shared: the population's shared modules, if any.
    """

    def __init__(
        self,
        table: BindingTable,
        policies: dict[str, Policy],
        algorithms: dict[str, Algorithm],
        shared: SharedModules | None = None,
    ) -> None:
        self.table = table
        self.shared_modules: dict[str, nn.Module] = shared.trainable() if shared else {}
        self._shared = shared
        shared_ids = frozenset(id(p) for p in unique_parameters(self.shared_modules.values()))
        self.unit_trainers: dict[str, UnitTrainer] = {}
        for binding_id in table.trainable_ids:
            if binding_id not in table.group_of_binding:
                continue  # maps to no agent in this env: nothing to learn from
            unit = algorithms[binding_id].make_unit_trainer(
                binding_id, policies[binding_id], table, population=policies
            )
            unit.shared_parameter_ids = shared_ids
            self.unit_trainers[binding_id] = unit

    def make_optimizers(self) -> list[torch.optim.Optimizer]:
        """One optimizer per UnitTrainer, in :attr:`unit_trainers` order, then the shared modules' one (if any)."""
        optimizers = [unit.make_optimizer() for unit in self.unit_trainers.values()]
        if self.shared_modules:
            optimizers.append(self._make_shared_optimizer())
        return optimizers

    def _make_shared_optimizer(self) -> torch.optim.Optimizer:
        assert self._shared is not None
        groups: dict[str, list[dict]] = {"adam": [], "sgd": []}
        for name, module in self.shared_modules.items():
            kind, lr, _ = self._shared.optimizer_settings(name)
            groups[kind].append({"params": unique_parameters([module]), "lr": lr, "name": name})
        if groups["adam"] and groups["sgd"]:
            raise ValueError("shared_modules: use one optimizer kind ('adam' or 'sgd') for every shared module")
        if groups["sgd"]:
            return torch.optim.SGD(groups["sgd"])
        return torch.optim.Adam(groups["adam"])

    def shared_parameters(self) -> list[nn.Parameter]:
        return unique_parameters(self.shared_modules.values())

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
        to a slower-moving partner. Then the shared modules take their one step.
        """
        metrics = {
            binding_id: unit.update(experience, optimizer, stepper)
            for (binding_id, unit), optimizer in zip(self.unit_trainers.items(), optimizers)
            if iteration % unit.update_every == 0
        }
        if self.shared_modules:
            metrics[SHARED_METRICS] = self._step_shared(optimizers[len(self.unit_trainers)], stepper)
        return metrics

    def _step_shared(self, optimizer: torch.optim.Optimizer, stepper: GradientStepper) -> dict[str, float]:
        """One step of every shared module on the gradient its users' losses summed this iteration."""
        assert self._shared is not None
        params = self.shared_parameters()
        # Every rank takes this step (with zeros where no loss reached a module), so DDP all-reduces line up.
        norms = {}
        for name, module in self.shared_modules.items():
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            norms[f"{name}_grad_norm"] = (
                float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0
            )
        clip = [self._shared.optimizer_settings(n)[2] for n in self.shared_modules]
        max_grad_norm = min((c for c in clip if c is not None), default=None)
        stepper.step(optimizer, params, max_grad_norm)
        return norms

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
