"""The MARLTrainer: coordinates one UnitTrainer per trainable binding, fed by one rollout stream.

[`MARLTrainer`][lightmarl.algorithms.marl_trainer.MARLTrainer] is the base a recipe can replace (``model.marl_trainer: {class_path:
my_package.MyMARLTrainer, init_args: {...}}``); [`IndependentMARLTrainer`][lightmarl.algorithms.marl_trainer.IndependentMARLTrainer] is the default.
The LightningModule builds it in ``setup`` with ``(table, policies, algorithms, shared)`` plus
the recipe's ``init_args``, creates its optimizers in ``configure_optimizers`` and matches them
to bindings by name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping

import torch
from tensordict import TensorDictBase
from torch import nn

from lightmarl.algorithms.base import Algorithm, GradientStepper, UnitTrainer, unique_parameters
from lightmarl.errors import ConfigError, TrainingFault
from lightmarl.policies.base import Policy
from lightmarl.policies.shared_modules import SharedModules
from lightmarl.population import BindingTable

log = logging.getLogger(__name__)

#: name of the shared modules' optimizer and metrics (logged as ``train/_shared/<module>_grad_norm``).
SHARED_METRICS = "_shared"


class MARLTrainer:
    """Owns the UnitTrainers of a population and runs one update per rollout.

    The constructor builds one UnitTrainer per trainable binding that controls an agent (its
    algorithm checks the binding's policy first). The base behaviour is independent learning
    ([`IndependentMARLTrainer`][lightmarl.algorithms.marl_trainer.IndependentMARLTrainer] names it for recipes): each trainable binding's rows go to its
    own UnitTrainer and optimizer. Frozen bindings have no UnitTrainer: they act, their rows are
    annotated ``is_trainable_agent=False``, and nothing steps their parameters.

    Shared modules (`lightmarl.policies.shared_modules`) are stepped exactly once per iteration:
    no UnitTrainer steps them; every loss that reaches them adds to their gradient, and after
    the UnitTrainers have learnt, the MARLTrainer's own optimizer (``_shared`` in
    [`make_optimizers`][lightmarl.algorithms.marl_trainer.MARLTrainer.make_optimizers]) steps them on the summed gradient.

    A subclass (e.g. a centralized learner) overrides [`make_optimizers`][lightmarl.algorithms.marl_trainer.MARLTrainer.make_optimizers] and
    [`update`][lightmarl.algorithms.marl_trainer.MARLTrainer.update]; its constructor takes ``(table, policies, algorithms, shared=None)`` first
    (the LightningModule passes them), then any keyword knobs a recipe sets in ``init_args``. Schedules
    (learning-rate annealing, loss weights) follow the ``fraction_done`` argument of
    [`update`][lightmarl.algorithms.marl_trainer.MARLTrainer.update]: the share of the training budget spent
    when the rollout was collected, passed on to each UnitTrainer's
    [`learn`][lightmarl.algorithms.base.UnitTrainer.learn].

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
        self.shared = shared
        self.shared_modules: dict[str, nn.Module] = shared.trainable() if shared else {}
        shared_ids = frozenset(id(p) for p in unique_parameters(self.shared_modules.values()))
        self.unit_trainers: dict[str, UnitTrainer] = {}
        for binding_id in table.trainable_ids:
            if binding_id not in table.group_of_binding:
                continue  # maps to no agent in this env: nothing to learn from
            self.unit_trainers[binding_id] = algorithms[binding_id].make_unit_trainer(
                binding_id, policies[binding_id], table, population=policies, shared_parameter_ids=shared_ids
            )

    def make_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """One optimizer per UnitTrainer (by binding id), then the shared modules' one (``_shared``), if any."""
        optimizers = {binding_id: unit.make_optimizer() for binding_id, unit in self.unit_trainers.items()}
        if self.shared_modules:
            optimizers[SHARED_METRICS] = self._make_shared_optimizer()
        return optimizers

    def _make_shared_optimizer(self) -> torch.optim.Optimizer:
        assert self.shared is not None
        groups: dict[str, list[dict]] = {"adam": [], "sgd": []}
        for name, module in self.shared_modules.items():
            kind, lr, _ = self.shared.optimizer_settings(name)
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
        optimizers: Mapping[str, torch.optim.Optimizer],
        stepper: GradientStepper,
        iteration: int = 0,
        fraction_done: float = 0.0,
    ) -> dict[str, dict[str, float]]:
        """One learning step of every UnitTrainer due at ``iteration`` on its rows of ``experience``.

        A UnitTrainer with ``update_every = k`` learns on iterations 0, k, 2k, ... and skips
        the others (its rows are simply not used), e.g. to let one co-trained binding adapt
        to a slower-moving partner. Then the shared modules take their one step.

        Args:
            experience: one rollout of every binding.
            optimizers: name (binding id, ``_shared``) -> optimizer, as `make_optimizers` named them.
            stepper: backward and optimizer steps (across processes under DDP).
            iteration: training iterations done before this one.
            fraction_done: the share of the training budget spent, for the learners' schedules.
        """
        metrics = {
            binding_id: unit.learn(experience, optimizers[binding_id], stepper, fraction_done=fraction_done)
            for binding_id, unit in self.unit_trainers.items()
            if iteration % unit.update_every == 0
        }
        if self.shared_modules:
            metrics[SHARED_METRICS] = self._step_shared(optimizers[SHARED_METRICS], stepper)
        return metrics

    def _step_shared(self, optimizer: torch.optim.Optimizer, stepper: GradientStepper) -> dict[str, float]:
        """One step of every shared module on the gradient its users' losses summed this iteration."""
        assert self.shared is not None
        params = self.shared_parameters()
        # Every rank takes this step (with zeros where no loss reached a module), so DDP all-reduces line up.
        norms = {}
        for name, module in self.shared_modules.items():
            grads = [p.grad for p in module.parameters() if p.grad is not None]
            norms[f"{name}_grad_norm"] = (
                float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0
            )
        clip = [self.shared.optimizer_settings(n)[2] for n in self.shared_modules]
        max_grad_norm = min((c for c in clip if c is not None), default=None)
        norm = stepper.step(optimizer, params, max_grad_norm)
        # A non-finite gradient (a user's loss went wrong after backward) was not stepped: say so.
        norms["skipped_steps"] = float(not math.isfinite(norm))
        if not math.isfinite(norm):
            if any(unit.guard.policy == "stop" for unit in self.unit_trainers.values()):
                raise TrainingFault(f"shared modules {list(self.shared_modules)}: non-finite gradient (norm {norm})")
            log.warning(
                "lightmarl: shared modules %s: non-finite gradient (norm %s); their step is skipped",
                list(self.shared_modules),
                norm,
            )
        return norms

    def to(self, device: torch.device) -> MARLTrainer:
        for unit in self.unit_trainers.values():
            unit.to(device)
        return self

    def describe(self) -> str:
        """Which binding learns with what, in words, for the run's log (``binding 'main' learns with MAPPO``)."""
        return ", ".join(f"binding {b!r} learns with {unit.flavour}" for b, unit in self.unit_trainers.items())

    def state_dict(self) -> dict:
        return {b: unit.state_dict() for b, unit in self.unit_trainers.items()}

    def load_state_dict(self, state: dict) -> None:
        for b, unit in self.unit_trainers.items():
            if b in state:
                unit.load_state_dict(state[b])

    def replay_state_dict(self) -> dict:
        """The UnitTrainers' replay buffers by binding ([`UnitTrainer.replay_state_dict`][lightmarl.algorithms.base.UnitTrainer.replay_state_dict]), those that keep one."""
        saved = {b: unit.replay_state_dict() for b, unit in self.unit_trainers.items()}
        return {b: state for b, state in saved.items() if state}

    def load_replay_state_dict(self, state: dict) -> None:
        for b, unit in self.unit_trainers.items():
            if b in state:
                unit.load_replay_state_dict(state[b])

    def check_loss_profiles(self) -> None:
        """Fail unless every trainable binding's loss profile names losses its trainers run.

        A profile of a trainable binding must be non-empty, every name in it must be a loss of a
        UnitTrainer of this run (``loss_names``; names are case-sensitive), and at least one must
        be the binding's own. Otherwise the binding would silently learn nothing.

        Raises:
            ConfigError: naming the profile, the bad name and the valid names.
        """
        valid = sorted({name for unit in self.unit_trainers.values() for name in unit.loss_names})
        for binding_id, unit in self.unit_trainers.items():
            profile = self.table.binding(binding_id).loss_profile
            allowed = self.table.loss_profiles[profile]
            if allowed is None:
                continue  # no loss_profiles in the recipe: every loss may use every row
            field = f"loss_profiles.{profile}"
            unknown = [name for name in allowed if name not in valid]
            if unknown:
                raise ConfigError(
                    f"{field}: {unknown[0]!r} is not a loss of this run; valid names are {valid} "
                    f"(binding {binding_id!r} uses this profile)"
                )
            if not set(allowed) & set(unit.loss_names):
                raise ConfigError(
                    f"{field}: {allowed} names none of trainable binding {binding_id!r}'s losses, so it would learn "
                    f"nothing; add one of {list(unit.loss_names)} (valid names are {valid})"
                )


#: what ``model.marl_trainer`` holds: the class (or a ``class_path`` + ``init_args`` partial) to build it with.
MARLTrainerFactory = Callable[
    [BindingTable, dict[str, Policy], dict[str, Algorithm], SharedModules | None], MARLTrainer
]


def build_marl_trainer(
    factory: MARLTrainerFactory,
    table: BindingTable,
    policies: dict[str, Policy],
    algorithms: dict[str, Algorithm],
    shared: SharedModules | None,
    *,
    num_envs: int,
    rollout_steps: int,
) -> MARLTrainer:
    """A run's MARLTrainer, once every binding is checked against its algorithm (policy contract,
    rollout shape) and the loss profiles against the trainers' loss names: before any env exists.

    Args:
        factory: the recipe's ``model.marl_trainer``.
        table: the run's bindings.
        policies: every active binding's policy.
        algorithms: the algorithm of each trainable binding.
        shared: the run's shared modules.
        num_envs: env copies per process.
        rollout_steps: env steps per copy per iteration.

    Raises:
        ConfigError: naming the binding, algorithm or loss profile that does not fit.
    """
    try:
        table.require_trainable()
        for binding_id, algorithm in algorithms.items():
            algorithm.check_rollout(binding_id, num_envs, rollout_steps)
        marl_trainer = factory(table, policies, algorithms, shared)
        marl_trainer.check_loss_profiles()
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(str(err)) from err
    return marl_trainer


def reserve_algorithm_bindings(table: BindingTable, algorithms: Mapping[str, Algorithm], default: Algorithm) -> None:
    """Check a recipe's per-binding algorithms, then give every binding a trainable binding's algorithm reads a policy.

    Args:
        table: the run's bindings, before their policies are built.
        algorithms: ``model.algorithms``: binding id -> algorithm, each id a trainable binding's.
        default: ``model.algorithm``, for every other trainable binding.

    Raises:
        ValueError: naming an entry of ``model.algorithms`` that is no trainable binding, or a binding an
            algorithm reads (e.g. a distillation teacher) that the population lacks.
    """
    table.check_trainable(algorithms, field="model.algorithms")
    for binding_id in table.trainable_ids:
        algorithms.get(binding_id, default).reserve_bindings(binding_id, table)


class IndependentMARLTrainer(MARLTrainer):
    """Independent learning, the default ``model.marl_trainer``: each trainable binding learns on its own rows.

    Exactly [`MARLTrainer`][lightmarl.algorithms.marl_trainer.MARLTrainer]'s behaviour, under the name recipes choose it by.
    """
