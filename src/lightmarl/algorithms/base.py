"""The learner contract: an [`Algorithm`][lightmarl.algorithms.base.Algorithm] (config) builds one [`UnitTrainer`][lightmarl.algorithms.base.UnitTrainer] per binding.

This layer knows nothing of Lightning nor of ``torch.distributed``. Gradient steps and the
few decisions every process must take together go through a [`GradientStepper`][lightmarl.algorithms.base.GradientStepper], so
that the LightningModule can route ``backward`` through ``manual_backward`` and all-reduce
under DDP, while plain Python scripts use [`PlainStepper`][lightmarl.algorithms.base.PlainStepper].

An algorithm is a dataclass: its fields are its hyper-parameters (the YAML schema of
``class_path: lightmarl.algorithms.PPO`` + ``init_args``, with each field's docstring as its
``--help``), checked in ``__post_init__``. Its `Algorithm.trainer_class` declares, in
``requires``, the policy contracts ([`lightmarl.policies.contracts`][lightmarl.policies.contracts]) it reads.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

import torch
from tensordict import TensorDictBase
from torch import nn

from lightmarl import keys
from lightmarl.algorithms.faults import DivergencePolicy, DivergenceWatch, NonFiniteGuard, NonFinitePolicy
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy
from lightmarl.policies.contracts import missing_capabilities
from lightmarl.population import BindingTable


class GradientStepper(Protocol):
    """How a UnitTrainer turns a loss into a parameter update, and agrees with the other processes."""

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        parameters: list[nn.Parameter],
        max_grad_norm: float | None,
        *,
        clip_each_group: bool = False,
    ) -> float:
        """Synchronise gradients (if distributed), clip them, step and zero them; return the gradient norm.

        The norm is taken over ``parameters`` after synchronising and before clipping. A
        non-finite norm means the step was not taken (gradients zeroed, optimizer untouched):
        see `step_finite`. ``clip_each_group`` is only passed (as ``True``) by algorithms asked to
        clip each of the optimizer's parameter groups on its own.
        """
        ...

    def agree_min(self, value: int) -> int:
        """The smallest ``value`` over every process (a decision all must take together, e.g. "start learning")."""
        ...


def step_finite(
    optimizer: torch.optim.Optimizer,
    parameters: list[nn.Parameter],
    max_grad_norm: float | None,
    *,
    clip_each_group: bool = False,
) -> float:
    """Clip and step unless the gradient norm is non-finite; zero the gradients either way; return the norm.

    The steppers call it once gradients are final (averaged across processes under DDP, so every
    process takes the same decision): a NaN or infinite gradient never reaches the weights or
    the optimizer's state. The norm returned is the joint one; ``clip_each_group`` clips each of
    ``optimizer``'s parameter groups to ``max_grad_norm`` by its own norm instead of clipping them together.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return 0.0
    total = torch.nn.utils.get_total_norm(grads)
    norm = float(total)
    if math.isfinite(norm):
        if max_grad_norm is not None and not clip_each_group:
            torch.nn.utils.clip_grads_with_norm_(parameters, max_grad_norm, total)
        elif max_grad_norm is not None:
            for group in optimizer.param_groups:
                stepped = [p for p in group["params"] if p.grad is not None]
                if stepped:
                    torch.nn.utils.clip_grad_norm_(stepped, max_grad_norm)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


class PlainStepper:
    """Single-process stepping for scripts and tests: ``loss.backward()``, clip, step."""

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        parameters: list[nn.Parameter],
        max_grad_norm: float | None,
        *,
        clip_each_group: bool = False,
    ) -> float:
        return step_finite(optimizer, parameters, max_grad_norm, clip_each_group=clip_each_group)

    def agree_min(self, value: int) -> int:
        return value


def optimize(
    terms: Mapping[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    stepper: GradientStepper,
    parameters: list[nn.Parameter],
    max_grad_norm: float | None,
    *,
    guard: NonFiniteGuard,
    clip_each_group: bool = False,
) -> bool:
    """One gradient step on the sum of a loss output's ``loss*`` terms (TorchRL's convention).

    Other entries (diagnostics such as ``entropy`` or ``ESS``) are left out of the sum; DQN's
    loss names its only term ``loss``, the others ``loss_<part>``. The binding's ``guard``
    (`NonFiniteGuard`, ``UnitTrainer.guard``) skips the step,
    or stops the run, when a term or the gradient is not finite; returns whether the step was taken.
    """
    losses = {name: value for name, value in terms.items() if name.startswith("loss")}
    if not guard.losses_finite(losses, stepper.agree_min):
        optimizer.zero_grad(set_to_none=True)
        return False
    stepper.backward(cast(torch.Tensor, sum(losses.values())))
    # Passed only when asked for: a stepper written before the option keeps working.
    extra = {"clip_each_group": True} if clip_each_group else {}
    norm = stepper.step(optimizer, parameters, max_grad_norm, **extra)
    if not math.isfinite(norm):
        guard.gradient_not_finite(norm)
        return False
    return True


class MetricMeans:
    """Means of per-step metrics over an update: each `add` is one step.

    Tensors are reduced to their mean (multi-agent diagnostics can be non-scalar); empty and
    integer tensors are skipped. Non-finite values are kept: a NaN loss shows in the logs as NaN.
    """

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self.steps = 0

    def add(self, values: Mapping[str, torch.Tensor | float]) -> None:
        self.steps += 1
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                if not (value.numel() and value.dtype.is_floating_point):
                    continue
                value = float(value.detach().float().mean())
            self._sums[name] = self._sums.get(name, 0.0) + value

    def means(self) -> dict[str, float]:
        return {k: v / max(self.steps, 1) for k, v in self._sums.items()}


def loss_row_mask(
    rows: TensorDictBase,
    table: BindingTable,
    loss_name: str,
    *,
    binding_id: str | None,
    trainable_only: bool = True,
) -> torch.Tensor:
    """The shared loss filter: which rows a loss may learn from.

    A row passes when the agent was present (``valid``), its loss profile includes
    ``loss_name``, it belongs to ``binding_id`` (unless ``None``: any binding, as a
    distillation loss reading a teacher's rows needs) and, for ``trainable_only``
    losses, it was produced by a trainable binding.

    Args:
        rows: a group's rows (``[..., agents]``) carrying the annotations of [`lightmarl.keys`][lightmarl.keys].
        table: the population.
        loss_name: the loss asking.
        binding_id: restrict to this binding's rows, or ``None``.
        trainable_only: also require ``is_trainable_agent``.

    Returns:
        A bool tensor shaped like the rows' batch.
    """
    profile_allows = torch.tensor(
        [allowed is None or loss_name in allowed for allowed in table.loss_profiles.values()],
        device=rows.device,
    )
    mask = rows.get(keys.VALID) & profile_allows[rows.get(keys.LOSS_PROFILE_ID)]
    if trainable_only:
        mask = mask & rows.get(keys.IS_TRAINABLE_AGENT)
    if binding_id is not None:
        mask = mask & (rows.get(keys.BINDING_ID) == table.index[binding_id])
    return mask


class UnitTrainer(ABC):
    """The learner of one trainable binding: its losses, optimizer and data path.

    Subclasses declare what they read from the policy (`requires`, `action_kinds`)
    and which parameters they step at which learning rate ([`parameter_groups`][lightmarl.algorithms.base.UnitTrainer.parameter_groups]); the
    [`Algorithm`][lightmarl.algorithms.base.Algorithm] checks the first before building the trainer.

    Args:
        binding_id: the binding it trains.
        policy: that binding's policy.
        table: the population (for the loss filter).
        config: the algorithm's hyper-parameters.
        population: binding id -> policy for every binding that plays (a loss reading
            another binding's policy, e.g. a distillation teacher, needs it).
        shared_parameter_ids: ids of the parameters of shared modules (``shared_modules`` in a
            recipe): the MARLTrainer's shared optimizer steps them, never this trainer.
    """

    #: the policy contracts ([`lightmarl.policies.contracts`][lightmarl.policies.contracts]) this trainer reads.
    requires: ClassVar[tuple[type, ...]] = ()
    #: the action kinds it can learn (``None``: any).
    action_kinds: ClassVar[tuple[str, ...] | None] = None
    #: a policy class that satisfies `requires`, named in the error when a policy does not.
    suggested_policy: ClassVar[str] = "a policy that provides them"
    #: names of the losses this trainer runs; loss profiles refer to them (checked at build time).
    loss_names: tuple[str, ...] = ()
    #: learn on every k-th training iteration only.
    update_every: int = 1

    def __init__(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        config: Any,
        population: Mapping[str, Policy] | None = None,
        *,
        shared_parameter_ids: frozenset[int] = frozenset(),
    ) -> None:
        self.binding_id = binding_id
        self.policy = policy
        self.table = table
        self.config = config
        self.group: GroupSpec = policy.group
        self.population = population
        self.shared_parameter_ids = shared_parameter_ids
        #: skips (or stops on) non-finite losses and gradients of this binding's steps.
        self.guard = NonFiniteGuard(binding_id, getattr(config, "on_nonfinite", "skip"))
        self._build()
        #: warns (or stops) when this binding's update metrics stay beyond [`divergence_limits`][lightmarl.algorithms.base.UnitTrainer.divergence_limits].
        self.divergence = DivergenceWatch(
            binding_id,
            self.divergence_limits(),
            max_loss_growth=getattr(config, "max_loss_growth", None),
            patience=getattr(config, "divergence_patience", 3),
            policy=getattr(config, "on_divergence", "warn"),
        )

    def _build(self) -> None:  # noqa: B027 - an optional hook: a plain UnitTrainer needs nothing more
        """Build losses and state once the attributes above are set (subclasses extend it, not ``__init__``)."""

    @property
    def flavour(self) -> str:
        """What it trains, in words (e.g. ``MAPPO``, ``double DQN``), for the run's log."""
        return type(self).__name__.removesuffix("UnitTrainer")

    @abstractmethod
    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """``(parameters, learning rate)`` pairs its optimizer steps; build each with [`own_parameters`][lightmarl.algorithms.base.UnitTrainer.own_parameters]."""

    def parameters(self) -> list[nn.Parameter]:
        """Every parameter its optimizer steps."""
        return [p for params, _ in self.parameter_groups() for p in params]

    def gradient_step(
        self,
        terms: Mapping[str, torch.Tensor],
        optimizer: torch.optim.Optimizer,
        stepper: GradientStepper,
        parameters: list[nn.Parameter],
    ) -> bool:
        """One gradient step on a loss output with this binding's clipping (``max_grad_norm``,
        ``clip_each_network``) and its guard; see `optimize`. Returns whether the step was taken."""
        return optimize(
            terms,
            optimizer,
            stepper,
            parameters,
            self.config.max_grad_norm,
            guard=self.guard,
            clip_each_group=self.config.clip_each_network,
        )

    def own_parameters(self, modules: Iterable[nn.Module]) -> list[nn.Parameter]:
        """Trainable parameters of ``modules``, each once, without those of shared modules.

        Shared modules (``shared_modules`` in a recipe) accumulate gradients from every binding
        that uses them and are stepped once per update by the MARLTrainer's own optimizer.
        """
        return [p for p in unique_parameters(modules) if id(p) not in self.shared_parameter_ids]

    def make_optimizer(self) -> torch.optim.Optimizer:
        """One Adam with a parameter group per entry of [`parameter_groups`][lightmarl.algorithms.base.UnitTrainer.parameter_groups] (empty ones left out)."""
        groups = [{"params": params, "lr": lr} for params, lr in self.parameter_groups() if params]
        return torch.optim.Adam(groups, eps=self.config.adam_eps)

    @abstractmethod
    def update(
        self,
        experience: TensorDictBase,
        optimizer: torch.optim.Optimizer,
        stepper: GradientStepper,
        *,
        fraction_done: float = 0.0,
    ) -> dict[str, float]:
        """Learn from one rollout; returns scalar metrics (logged as ``train/<binding>/<name>``).

        Args:
            experience: the rollout (every binding's rows; this learner picks its own).
            optimizer: this binding's optimizer.
            stepper: backward and optimizer steps (across processes under DDP).
            fraction_done: the share of the training budget spent, for schedules that depend on it.
        """

    def learn(
        self,
        experience: TensorDictBase,
        optimizer: torch.optim.Optimizer,
        stepper: GradientStepper,
        *,
        fraction_done: float = 0.0,
    ) -> dict[str, float]:
        """[`update`][lightmarl.algorithms.base.UnitTrainer.update], scheduled and watched.

        First [`set_progress`][lightmarl.algorithms.base.UnitTrainer.set_progress] applies the schedules at
        ``fraction_done``, then the update runs with it; adds ``skipped_steps`` (non-finite steps skipped) and
        ``diverging`` to its metrics. The MARLTrainer calls this; [`update`][lightmarl.algorithms.base.UnitTrainer.update]
        is what a subclass implements.
        """
        self.guard.begin_update()
        self.set_progress(optimizer, fraction_done)
        metrics = self.update(experience, optimizer, stepper, fraction_done=fraction_done)
        if not metrics:  # no rows of this binding: nothing was tried
            return metrics
        metrics.update(self.guard.end_update())
        metrics.update(self.divergence.observe(metrics, stepper.agree_min))
        return metrics

    def divergence_limits(self) -> dict[str, float]:
        """Metric name -> largest healthy value, for `DivergenceWatch` (default: none)."""
        return {}

    def set_progress(self, optimizer: torch.optim.Optimizer, fraction_done: float) -> None:
        """Apply the schedules at ``fraction_done``, the share of the training budget spent (e.g. the learning
        rate in ``optimizer``); [`learn`][lightmarl.algorithms.base.UnitTrainer.learn] calls it before each update.
        Default: no schedule."""
        del optimizer, fraction_done

    def to(self, device: torch.device) -> UnitTrainer:
        """Move loss buffers (the policy moves with the LightningModule)."""
        return self

    def restart(self) -> None:  # noqa: B027 - an optional hook: learners without such state keep nothing
        """Forget learner state tied to the binding's previous weights, which were just replaced.

        Called after a league reset or a population-based copy loaded new weights into the
        binding (its optimizer state is cleared by the caller). Counters and schedules go on.
        """

    def state_dict(self) -> dict:
        """Trainer state beyond the policy and optimizer (schedules, counters, target networks)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        del state

    def replay_state_dict(self) -> dict:
        """Experience kept across iterations (a replay buffer, open transitions) that a resumed run needs; ``{}``: none.

        Kept apart from [`state_dict`][lightmarl.algorithms.base.UnitTrainer.state_dict]: it is per process under DDP, large, and optional
        (``model.checkpoint_replay``).
        """
        return {}

    def load_replay_state_dict(self, state: dict) -> None:
        del state


@dataclass(kw_only=True)
class Algorithm(ABC):
    """Configuration of a learning algorithm; builds the [`UnitTrainer`][lightmarl.algorithms.base.UnitTrainer] of a binding.

    Subclasses are dataclasses: each field is a hyper-parameter with a default and a docstring,
    which makes the ``__init__`` signature the YAML schema (``class_path:
    lightmarl.algorithms.PPO`` + ``init_args``). [`hyperparameter_checks`][lightmarl.algorithms.base.Algorithm.hyperparameter_checks] lists the checks
    ``__post_init__`` runs, so a bad recipe fails before training starts. The fields below,
    shared by every algorithm, say what happens when learning goes wrong
    (`lightmarl.algorithms.faults`).
    """

    #: the learner this algorithm builds; its ``requires`` is the policy contract.
    trainer_class: ClassVar[type[UnitTrainer]]

    on_nonfinite: NonFinitePolicy = "skip"
    """A NaN or infinite loss term or gradient: ``skip`` that gradient step (the binding's weights and optimizer
    state stay as they were; warned, counted in ``train/<binding>/skipped_steps``) or ``stop`` the run."""
    on_divergence: DivergencePolicy = "warn"
    """A binding whose metrics stay beyond the divergence limits for ``divergence_patience`` updates: ``warn``
    (logged, ``train/<binding>/diverging`` is 1) or ``stop`` the run."""
    divergence_patience: int = 3
    """Consecutive updates beyond a divergence limit before ``on_divergence`` acts."""
    max_loss_growth: float | None = 1e4
    """Divergence limit: a critic / Q loss above this many times its mean over the binding's first 5 learning
    updates (at least 0.01) (``null``: no limit)."""
    adam_eps: float = 1e-8
    """The epsilon of the binding's Adam optimizer (torch's default; BenchMARL's runs use 1e-6)."""
    clip_each_network: bool = False
    """Clip each network's gradient norm to ``max_grad_norm`` on its own (each parameter group of the binding's
    optimizer: PPO's actor and critic, DDPG's actor and critics, SAC's actor, critics and temperature), as
    BenchMARL does with one optimizer per loss term. ``false`` clips the norm of all of them together, so a
    large critic gradient also scales the actor's step down. DQN, QMIX and VDN step one network, where the two
    are the same."""

    def __post_init__(self) -> None:
        check_hyperparameters(*self.hyperparameter_checks())

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        """``(field, value, ok, rule)`` for every hyper-parameter with a constraint (extend with ``super()``'s)."""
        return (
            (
                "on_nonfinite",
                self.on_nonfinite,
                self.on_nonfinite in ("skip", "stop"),
                "on_nonfinite in ('skip', 'stop')",
            ),
            (
                "on_divergence",
                self.on_divergence,
                self.on_divergence in ("warn", "stop"),
                "on_divergence in ('warn', 'stop')",
            ),
            (
                "divergence_patience",
                self.divergence_patience,
                self.divergence_patience >= 1,
                "divergence_patience >= 1",
            ),
            (
                "max_loss_growth",
                self.max_loss_growth,
                self.max_loss_growth is None or self.max_loss_growth > 1,
                "max_loss_growth is None or max_loss_growth > 1",
            ),
            ("adam_eps", self.adam_eps, self.adam_eps > 0, "adam_eps > 0"),
        )

    @property
    def name(self) -> str:
        """The algorithm's name in messages."""
        return type(self).__name__

    def check_policy(self, binding_id: str, policy: Policy) -> None:
        """Fail unless ``policy`` satisfies the trainer's contracts and has actions it can learn.

        Raises:
            ValueError: naming the binding, the algorithm, the policy class and what it lacks.
        """
        trainer = self.trainer_class
        missing = missing_capabilities(policy, trainer.requires)
        if missing:
            raise ValueError(
                f"binding {binding_id!r}: algorithm {self.name} needs {' and '.join(missing)}; "
                f"{type(policy).__name__} lacks {'them' if len(missing) > 1 else 'it'} (use {trainer.suggested_policy})"
            )
        kinds = trainer.action_kinds
        if kinds is not None and policy.group.action_kind not in kinds:
            raise ValueError(
                f"binding {binding_id!r}: algorithm {self.name} needs {' or '.join(kinds)} actions; group "
                f"{policy.group.name!r} has {policy.group.action_kind} actions"
            )

    def reserve_bindings(self, binding_id: str, table: BindingTable) -> None:
        """Reserve in ``table`` the bindings the learner of ``binding_id`` reads that play no agent; default: none.

        The LightningModule calls it for every trainable binding before any policy is built, so that
        such a binding (e.g. PPO's kickstarting teacher) still gets one, built for the group it is
        reserved in ([`BindingTable.reserve`][lightmarl.population.BindingTable.reserve]).
        """
        del binding_id, table

    def check_binding(self, binding_id: str, policy: Policy, table: BindingTable) -> None:
        """Checks that need the population (e.g. who controls the group's other agents); default: none."""
        del binding_id, policy, table

    def check_rollout(self, binding_id: str, num_envs: int, rollout_steps: int) -> None:
        """Checks against the size of one rollout (``num_envs x rollout_steps`` env steps); default: none."""
        del binding_id, num_envs, rollout_steps

    def make_unit_trainer(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        population: Mapping[str, Policy] | None = None,
        *,
        shared_parameter_ids: frozenset[int] = frozenset(),
    ) -> UnitTrainer:
        """Check the binding, then build its learner.

        ``population`` (binding id -> policy, every binding that plays) lets a loss read other
        bindings' policies, e.g. a distillation teacher; losses that need it fail without it.
        ``shared_parameter_ids`` are the parameters of shared modules, which the learner leaves
        to the MARLTrainer's shared optimizer.
        """
        self.check_policy(binding_id, policy)
        self.check_binding(binding_id, policy, table)
        return self.trainer_class(
            binding_id, policy, table, self, population, shared_parameter_ids=shared_parameter_ids
        )


def check_hyperparameters(*checks: tuple[str, object, bool, str]) -> None:
    """Raise a ``ValueError`` naming the first ``(name, value, ok, rule)`` whose ``ok`` is false, and its rule."""
    for name, value, ok, rule in checks:
        if not ok:
            raise ValueError(f"algorithm.{name}: invalid value {value!r}; valid values satisfy {rule}")


def unique_parameters(modules: Iterable[nn.Module]) -> list[nn.Parameter]:
    """Trainable parameters of ``modules``, each once (shared modules appear in several)."""
    seen: set[int] = set()
    out = []
    for module in modules:
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out
