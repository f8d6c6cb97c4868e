"""Learning from a teacher binding: kickstarting and sliced behaviour cloning.

Kickstarting (Schmitt et al. 2018, "Kickstarting Deep Reinforcement Learning",
arXiv:1803.03835) adds to the student's RL loss a distillation term, the cross-entropy of the
student's policy against the teacher's on the student's own states (its gradient is that of
``KL(teacher || student)``), weighted by a coefficient annealed towards 0 so that the student
can eventually outgrow the teacher. The *sliced* form clones instead: some agents are played
by the teacher binding and the student learns, by maximum likelihood, the actions the teacher
took on those agents' rows, while PPO runs on the student's own rows.

The teacher is any binding of the population: a scripted policy with
[`action_logits`][lightmarl.policies.base.ScriptedPolicy.action_logits], or a (usually frozen) neural policy,
e.g. loaded from a checkpoint with ``policy_uri``. With continuous actions the teacher teaches by
its deterministic action: the cross-entropy becomes ``-log student(teacher's action)``, maximum-
likelihood behaviour cloning, so a deterministic script can teach. A ``kl`` teacher need not
play: one that controls no agent is built for the student's group. [`Distillation`][lightmarl.algorithms.distillation.Distillation] is the
config that [`PPO`][lightmarl.algorithms.ppo.PPO] takes; [`KickstarterLoss`][lightmarl.algorithms.distillation.KickstarterLoss] and
[`SlicedClonerLoss`][lightmarl.algorithms.distillation.SlicedClonerLoss] are the TorchRL losses it builds, and
[`DistillationLoss`][lightmarl.algorithms.distillation.DistillationLoss] the auxiliary loss of PPO's update
that runs them: its `rows()` picks the rows and asks the teacher once per update, its `loss()` runs
on each minibatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch.nn import functional as F
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.objectives import LossModule

from lightmarl import keys
from lightmarl.algorithms.base import loss_row_mask
from lightmarl.algorithms.on_policy import AuxiliaryLoss, AuxiliaryRows
from lightmarl.algorithms.rollout_rows import UpdateRows
from lightmarl.errors import ConfigError
from lightmarl.policies.base import Policy, ScriptedPolicy, masked_logits
from lightmarl.policies.contracts import StochasticActor, ValueCritic, satisfies
from lightmarl.population import BindingTable

#: loss name of the kickstarting KL term (loss profiles refer to it).
DISTILL_LOSS = "distill"
#: loss name of the sliced behaviour-cloning term.
CLONE_LOSS = "clone"


class Distillation:
    """Learn from a teacher binding next to the RL loss (kickstarting or sliced cloning).

    ``mode: kl`` (kickstarting, Schmitt et al. 2018): on the student's rows, minimise
    ``KL(teacher || student)`` of the two policies' action distributions; with discrete actions
    the teacher must give one (a scripted policy with ``action_logits`` or a neural policy writing
    ``logits``). With continuous actions the student maximises the likelihood of the teacher's
    deterministic action on its rows (the cross-entropy to a point mass), so any teacher works.
    The teacher need not control an agent: lightmarl builds it for the student's group.
    Loss name ``distill``: the student's loss profile must allow it.

    ``mode: clone`` (sliced kickstarter): agents mapped to the teacher binding play; the
    student maximises the likelihood of the actions the teacher took on those rows. Any
    teacher works, deterministic scripts included. Loss name ``clone``: the *teacher's* loss
    profile must allow it, which is how a recipe chooses the rows that teach.

    The coefficient moves linearly from ``coeff`` to ``final_coeff`` over ``anneal_iterations``
    updates of the student (``None``: over the whole training budget), then stays there.

    Args:
        teacher: id of the teacher binding. It acts in the student's group; in ``clone`` mode it
            must control at least one agent (its rows are what teaches).
        mode: ``kl`` (kickstarting) or ``clone`` (sliced behaviour cloning).
        coeff: weight of the distillation loss at the first update.
        final_coeff: weight at the end of annealing (``None``: keep ``coeff`` throughout).
        anneal_iterations: student updates over which the weight anneals; ``None``: the
            whole training budget (``model.max_frames``).
        value_coeff: weight (times the annealed coefficient) of the mean squared error between
            the student's and the teacher's value heads on the same rows; needs a teacher with a
            critic (0: off).

    Examples:
        >>> from lightmarl.algorithms import PPO
        >>> algorithm = PPO(distillation=Distillation("teacher", coeff=1.0, final_coeff=0.0, anneal_iterations=50))
        >>> algorithm.distillation.coefficient(updates=25)
        0.5
    """

    def __init__(
        self,
        teacher: str,
        mode: Literal["kl", "clone"] = "kl",
        coeff: float = 1.0,
        final_coeff: float | None = None,
        anneal_iterations: int | None = None,
        value_coeff: float = 0.0,
    ) -> None:
        if not isinstance(teacher, str) or not teacher:
            raise ValueError(f"distillation.teacher: expected a binding id, got {teacher!r}")
        if mode not in ("kl", "clone"):
            raise ValueError(f"distillation.mode: {mode!r} is not one of ['kl', 'clone']")
        for name, value in (("coeff", coeff), ("final_coeff", final_coeff), ("value_coeff", value_coeff)):
            if value is not None and value < 0:
                raise ValueError(f"distillation.{name}: expected a non-negative number, got {value!r}")
        if anneal_iterations is not None and anneal_iterations < 1:
            raise ValueError(
                f"distillation.anneal_iterations: expected a positive integer or null (whole budget), "
                f"got {anneal_iterations!r}"
            )
        self.teacher = teacher
        self.mode = mode
        self.coeff = coeff
        self.final_coeff = final_coeff
        self.anneal_iterations = anneal_iterations
        self.value_coeff = value_coeff

    @property
    def loss_name(self) -> str:
        """``distill`` (kl) or ``clone``: the name loss profiles use to gate this loss."""
        return DISTILL_LOSS if self.mode == "kl" else CLONE_LOSS

    def coefficient(self, updates: int, fraction_done: float = 0.0) -> float:
        """The weight at the student's ``updates``-th update (``fraction_done`` of the budget spent)."""
        if self.final_coeff is None:
            return self.coeff
        progress = fraction_done if self.anneal_iterations is None else updates / self.anneal_iterations
        progress = min(max(progress, 0.0), 1.0)
        return self.coeff + (self.final_coeff - self.coeff) * progress

    def reserve_teacher(self, student_id: str, table: BindingTable) -> None:
        """Give a ``kl`` teacher that plays no agent a place in the student's group, so that a policy is built for it.

        It reads the student's rows; a ``clone`` teacher must play (its rows are what teaches), and
        an unknown teacher is left for `make_loss` to name.
        """
        group = table.group_of_binding.get(student_id)
        if self.mode != "kl" or group is None:
            return
        if self.teacher in table.index and self.teacher not in table.group_of_binding:
            table.reserve({self.teacher: group})

    def make_loss(
        self, student_id: str, student: Policy, table: BindingTable, population: Mapping[str, Policy] | None
    ) -> DistillationLoss:
        """Resolve the teacher among the population and build the loss; every misconfiguration fails here.

        Raises:
            ConfigError: unknown, idle or mismatched teacher, a teacher without a distribution
                (``kl``) or critic (``value_coeff``), or loss profiles under which the loss never runs.
        """
        field = f"binding {student_id!r}: algorithm.distillation"
        if self.teacher not in table.index:
            raise ConfigError(f"{field}.teacher: {self.teacher!r} is not a binding; bindings are {table.ids}")
        if self.teacher == student_id:
            raise ConfigError(f"{field}.teacher: a binding cannot be its own teacher ({student_id!r})")
        if student.group.action_kind not in ("discrete", "continuous"):
            raise ConfigError(
                f"{field}: distillation needs discrete or continuous actions; group {student.group.name!r} has "
                f"{student.group.action_kind} actions"
            )
        if student.group.action_kind == "continuous" and not satisfies(student, StochasticActor):
            raise ConfigError(
                f"{field}: the student {student_id!r} ({type(student).__name__}) has no stochastic actor whose "
                "likelihood of the teacher's actions could be maximised"
            )
        if population is None or self.teacher not in population:
            raise ConfigError(
                f"{field}.teacher: binding {self.teacher!r} controls no agent, so no policy was built for it; "
                f"map at least one agent of group {student.group.name!r} to it in agent_binding_map "
                f"(map: {table.agent_binding_map})"
            )
        teacher = population[self.teacher]
        teacher_group = table.group_of_binding.get(self.teacher)
        if teacher_group != student.group.name:
            raise ConfigError(
                f"{field}.teacher: {self.teacher!r} plays group {teacher_group!r} but {student_id!r} plays "
                f"{student.group.name!r}; a teacher must act in the student's group"
            )
        if self.value_coeff > 0 and not satisfies(teacher, ValueCritic):
            raise ConfigError(
                f"{field}.value_coeff: {self.value_coeff!r} needs a teacher with a value critic; "
                f"{self.teacher!r} ({type(teacher).__name__}) has none: set value_coeff to 0"
            )
        if self.value_coeff > 0 and not satisfies(student, ValueCritic):
            raise ConfigError(f"{field}.value_coeff: the student {student_id!r} has no critic to regress")
        if self.mode == "kl":
            if student.group.action_kind == "discrete" and not gives_logits(teacher):
                hint = (
                    " (a ScriptedPolicy teaches only if it defines action_logits)"
                    if isinstance(teacher, ScriptedPolicy)
                    else ""
                )
                raise ConfigError(
                    f"{field}.teacher: {self.teacher!r} ({type(teacher).__name__}) gives no action distribution "
                    f"(no {keys.LOGITS!r} output), so mode 'kl' cannot learn from it{hint}; "
                    "use mode 'clone' to learn from its actions instead"
                )
            if not table.profile_allows(student_id, DISTILL_LOSS):
                raise ConfigError(
                    f"{field}: the student's loss profile {table.binding(student_id).loss_profile!r} "
                    f"({table.loss_profiles[table.binding(student_id).loss_profile]}) does not include "
                    f"{DISTILL_LOSS!r}, so the kickstarting loss would never run; add it to loss_profiles"
                )
            return DistillationLoss(
                self, student_id, table, KickstarterLoss(student, teacher, value_coeff=self.value_coeff)
            )
        if not table.profile_allows(self.teacher, CLONE_LOSS):
            raise ConfigError(
                f"{field}: the teacher's loss profile {table.binding(self.teacher).loss_profile!r} "
                f"({table.loss_profiles[table.binding(self.teacher).loss_profile]}) does not include "
                f"{CLONE_LOSS!r}, so no row would teach; add it to loss_profiles"
            )
        return DistillationLoss(
            self, student_id, table, SlicedClonerLoss(student, teacher, value_coeff=self.value_coeff)
        )


class DistillationLoss(AuxiliaryLoss):
    """The distillation term of a student's PPO update (an [`AuxiliaryLoss`][lightmarl.algorithms.on_policy.AuxiliaryLoss]).

    `rows` picks the rows (the student's own for ``kl``, the teacher's for ``clone``), asks a
    ``kl`` teacher for its targets once for the whole update (a frozen teacher gives the same answer
    on every pass, and a script can cost more than the student) and takes the annealed weight;
    `loss` runs the TorchRL loss on a minibatch with that weight. Built by
    [`Distillation.make_loss`][lightmarl.algorithms.distillation.Distillation.make_loss].

    Args:
        config: the distillation settings (teacher, mode, schedule).
        student_id: the student binding.
        table: the population (for the loss filter).
        module: the TorchRL loss it runs.
    """

    def __init__(
        self, config: Distillation, student_id: str, table: BindingTable, module: KickstarterLoss | SlicedClonerLoss
    ) -> None:
        self.config = config
        self.student_id = student_id
        self.table = table
        self.module = module
        self.name = config.loss_name

    def rows(self, rows: UpdateRows, *, updates: int, fraction_done: float) -> AuxiliaryRows:
        data, module = rows.data, self.module
        group_rows = data.get(module.group)
        if self.config.mode == "kl":
            mask = loss_row_mask(group_rows, self.table, DISTILL_LOSS, binding_id=self.student_id)
        else:
            # The teacher's rows are not trainable rows: clone reads them through its own profile gate.
            mask = loss_row_mask(
                group_rows, self.table, CLONE_LOSS, binding_id=self.config.teacher, trainable_only=False
            )
        entries: dict[NestedKey, torch.Tensor] = {}
        if isinstance(module, KickstarterLoss):
            entries[module.tensor_keys.teacher_target] = module.teacher_targets(data)
        # Rows of steps carried over from an earlier rollout were in an earlier update's distillation already.
        mask = rows.new(mask)
        entries[module.tensor_keys.mask] = mask
        return AuxiliaryRows(
            metric=f"{self.name}_rows",
            mask=mask,
            entries=entries,
            coeff=self.config.coefficient(updates, fraction_done),
        )

    def loss(self, batch: TensorDictBase, prepared: AuxiliaryRows) -> dict[str, torch.Tensor]:
        self.module.coeff = prepared.coeff
        return dict(self.module(batch).items())

    def to(self, device: torch.device) -> None:
        self.module.to(device)


@torch.no_grad()
def gives_logits(policy: Policy) -> bool:
    """Whether ``policy`` writes discrete ``logits`` (probed on a zero observation of its group)."""
    if isinstance(policy, ScriptedPolicy):
        return policy.has_distribution
    group = policy.group
    probe = {
        keys.OBSERVATION: torch.zeros(1, group.num_agents, *group.observation_shape),
        keys.AGENT_ID: torch.tensor(group.agent_ids).view(1, -1),
    }
    if group.has_action_mask:
        probe[keys.ACTION_MASK] = torch.ones(1, group.num_agents, group.num_actions, dtype=torch.bool)
    td = TensorDict({group.name: TensorDict(probe, [1, group.num_agents])}, [1])
    parameter = next(policy.parameters(), None)
    if parameter is not None:
        td = td.to(parameter.device)
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        out = policy(td)
    logits = out.get((group.name, keys.LOGITS), None)
    return logits is not None and logits.shape[-1] == group.num_actions


class _TeacherLoss(LossModule):
    """Shared plumbing: run student and teacher on a minibatch's observations, reduce over a row mask."""

    @dataclass
    class _AcceptedKeys:
        """Keys of the input rows (the constructor nests them under the student's group).

        Attributes:
            observation: the agents' observations.
            action_mask: legal actions (read when the group has one).
            agent_id: index of each row's agent in ``possible_agents`` (scripted teachers use it).
            action: the actions taken.
            mask: the rows this loss learns from (written by the UnitTrainer from ``loss_row_mask``).
            teacher_target: the teacher's log-probabilities (discrete) or action (continuous) on each
                row, when [`KickstarterLoss.teacher_targets`][lightmarl.algorithms.distillation.KickstarterLoss.teacher_targets] gave them for the whole batch.
        """

        observation: NestedKey = keys.OBSERVATION
        action_mask: NestedKey = keys.ACTION_MASK
        agent_id: NestedKey = keys.AGENT_ID
        action: NestedKey = keys.ACTION
        mask: NestedKey = "distill_mask"
        teacher_target: NestedKey = "teacher_target"

    tensor_keys: _AcceptedKeys
    _schedulable_buffers = frozenset({"coeff"})
    loss_name: str = DISTILL_LOSS

    def __init__(self, student: Policy, teacher: Policy | None, value_coeff: float = 0.0) -> None:
        super().__init__()
        self.student = student
        # Not a sub-module: the teacher's parameters belong to its own binding, never to this loss.
        self._teacher = [teacher] if teacher is not None else []
        self.value_coeff = value_coeff
        self.continuous = student.group.action_kind == "continuous"
        self.teacher_gives_logits = not self.continuous and teacher is not None and gives_logits(teacher)
        self.register_buffer("coeff", torch.tensor(1.0))
        if self.continuous:
            # Targets are kept a thousandth of the range inside the bounds. A script that saturates
            # (VMAS's clamps its forces to the range) would otherwise ask for a squashed Gaussian's
            # pre-tanh mean at TorchRL's clamped atanh(±1), far out where tanh saturates and the
            # -log likelihood is huge (about 2.1e4 at std 0.05, against 5.8e3 at 0.999).
            low = torch.tensor(student.group.action_low).view(student.group.action_shape)
            high = torch.tensor(student.group.action_high).view(student.group.action_shape)
            margin = (high - low) * 1e-3
            self.register_buffer("target_low", low + margin)
            self.register_buffer("target_high", high - margin)
        self.group = student.group.name
        self.set_keys(**{name: (self.group, value) for name, value in vars(self._AcceptedKeys()).items()})

    @property
    def teacher(self) -> Policy | None:
        return self._teacher[0] if self._teacher else None

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        pass  # no value estimator

    @property
    def in_keys(self) -> list[NestedKey]:
        accepted = self.tensor_keys
        return [accepted.observation, accepted.agent_id, accepted.action, accepted.mask]

    @property
    def out_keys(self) -> list[str]:
        return [
            f"loss_{self.loss_name}",
            f"loss_{self.loss_name}_value",
            "kl_teacher_student",
            "teacher_action_error",
            "distill_coeff",
        ]

    def _inputs(self, tensordict: TensorDictBase) -> TensorDict:
        """A fresh TensorDict holding only what a policy reads, so its outputs never touch the experience."""
        accepted = self.tensor_keys
        entries = {keys.OBSERVATION: tensordict.get(accepted.observation)}
        for name, key in ((keys.ACTION_MASK, accepted.action_mask), (keys.AGENT_ID, accepted.agent_id)):
            value = tensordict.get(key, None)
            if value is not None:
                entries[name] = value
        rows = TensorDict(entries, batch_size=entries[keys.OBSERVATION].shape[: tensordict.batch_dims + 1])
        return TensorDict({self.group: rows}, batch_size=tensordict.batch_size)

    def _log_probs(self, policy: Policy, inputs: TensorDict) -> torch.Tensor:
        logits = policy(inputs.copy()).get((self.group, keys.LOGITS), None)
        if logits is None:
            raise RuntimeError(f"{type(policy).__name__} wrote no {keys.LOGITS!r}: it cannot be distilled")
        return F.log_softmax(masked_logits(logits, inputs.get((self.group, keys.ACTION_MASK), None)), dim=-1)

    def _mode_action(self, policy: Policy, inputs: TensorDict) -> torch.Tensor:
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            return policy(inputs.copy()).get((self.group, keys.ACTION))

    def _continuous_loss(self, tensordict: TensorDictBase, inputs: TensorDict, target: torch.Tensor) -> TensorDict:
        """``-log student(target)`` on the masked rows, and the mean distance of the student's mode action to ``target``."""
        dist = cast(StochasticActor, self.student).actor.get_dist(inputs.copy())
        inside = torch.clamp(target, self.target_low, self.target_high)
        out = self._loss(tensordict, inputs, -dist.log_prob(inside))
        mask = tensordict.get(self.tensor_keys.mask)
        with torch.no_grad():
            error = torch.linalg.vector_norm(dist.deterministic_sample - target, dim=-1)
        out["teacher_action_error"] = (error * mask).sum() / mask.sum().clamp_min(1)
        return out

    def _value(self, policy: Policy, inputs: TensorDict) -> torch.Tensor:
        critic = cast(ValueCritic, policy).critic
        return critic(inputs.copy()).get((self.group, keys.STATE_VALUE))

    def _loss(
        self,
        tensordict: TensorDictBase,
        inputs: TensorDict,
        objective: torch.Tensor,
        student_log_probs: torch.Tensor | None = None,
        teacher_log_probs: torch.Tensor | None = None,
    ) -> TensorDict:
        mask = tensordict.get(self.tensor_keys.mask)
        count = mask.sum().clamp_min(1)
        out = {
            f"loss_{self.loss_name}": self.coeff * (objective * mask).sum() / count,
            "distill_coeff": self.coeff.detach().clone(),
        }
        teacher = self.teacher
        if teacher is not None and self.teacher_gives_logits and student_log_probs is not None:
            with torch.no_grad():
                if teacher_log_probs is None:
                    teacher_log_probs = self._log_probs(teacher, inputs)
                kl = _kl(teacher_log_probs, student_log_probs.detach())
            out["kl_teacher_student"] = (kl * mask).sum() / count
        if self.value_coeff > 0 and teacher is not None:
            with torch.no_grad():
                target = self._value(teacher, inputs)
            error = (self._value(self.student, inputs) - target).pow(2).squeeze(-1)
            out[f"loss_{self.loss_name}_value"] = self.coeff * self.value_coeff * (error * mask).sum() / count
        return TensorDict(out, batch_size=[])


class KickstarterLoss(_TeacherLoss):
    """Kickstarting: ``coeff * KL(teacher || student)`` on the masked rows (Schmitt et al. 2018).

    Both policies see the same observations (with ``agent_id`` and ``action_mask``); the teacher
    runs without gradient. With ``value_coeff > 0`` the student's critic also regresses the
    teacher's. Outputs ``loss_distill`` (and ``loss_distill_value``), plus the unweighted mean
    ``kl_teacher_student`` and the current ``distill_coeff``. Set the coefficient with
    ``loss.coeff = value``. Continuous actions: the objective is ``-log student(a)`` for the
    teacher's deterministic action ``a`` on the same observation, and ``teacher_action_error``
    (mean distance from the student's mode action to ``a``) replaces the KL.

    Args:
        student: the learning policy; it must write ``logits`` (discrete) or have a stochastic actor (continuous).
        teacher: the teacher policy; it must write ``logits`` too (discrete) or any action (continuous).
        value_coeff: weight of the value regression (relative to ``coeff``).

    Examples:
        >>> from lightmarl.envs import PettingZooEnvConfig
        >>> from lightmarl.policies import MLPActorCritic
        >>> group = PettingZooEnvConfig(env_kwargs={"N": 3}).spec().groups["agent"]
        >>> loss = KickstarterLoss(MLPActorCritic(group), teacher=MLPActorCritic(group))  # a trained one, in practice
        >>> rows = TensorDict(
        ...     {"observation": torch.randn(8, 3, 18), "agent_id": torch.arange(3).expand(8, 3),
        ...      "action": torch.zeros(8, 3, dtype=torch.int64), "distill_mask": torch.ones(8, 3, dtype=torch.bool)},
        ...     [8, 3],
        ... )
        >>> sorted(loss(TensorDict({"agent": rows}, [8])).keys())
        ['distill_coeff', 'kl_teacher_student', 'loss_distill']
    """

    loss_name = DISTILL_LOSS

    def __init__(self, student: Policy, teacher: Policy, value_coeff: float = 0.0) -> None:
        super().__init__(student, teacher, value_coeff)

    @torch.no_grad()
    def teacher_targets(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The teacher's targets for every row of ``tensordict`` (a whole batch), to store under
        ``tensor_keys.teacher_target`` so that the minibatches of an update's passes read them instead
        of running the teacher each time."""
        return self._teacher_target(self._inputs(tensordict))

    def _teacher_target(self, inputs: TensorDict) -> torch.Tensor:
        teacher = self.teacher
        assert teacher is not None
        with torch.no_grad():
            if self.continuous:
                return self._mode_action(teacher, inputs).to(self.target_low.dtype)
            return self._log_probs(teacher, inputs)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        inputs = self._inputs(tensordict)
        target = tensordict.get(self.tensor_keys.teacher_target, None)
        if target is None:
            target = self._teacher_target(inputs)
        if self.continuous:
            return self._continuous_loss(tensordict, inputs, target)
        teacher_log_probs = target
        student_log_probs = self._log_probs(self.student, inputs)
        objective = _kl(teacher_log_probs, student_log_probs)
        return self._loss(tensordict, inputs, objective, student_log_probs, teacher_log_probs)


class SlicedClonerLoss(_TeacherLoss):
    """Sliced behaviour cloning: ``coeff * -log student(teacher's action)`` on the teacher's rows.

    The rows (the mask) are those the teacher binding played and whose loss profile allows
    ``clone``; the actions are the ones it took during collection. Outputs ``loss_clone`` and
    ``clone_accuracy`` (how often the student's mode matches; with continuous actions
    ``teacher_action_error``, the mean distance of the student's mode action to the teacher's),
    plus ``kl_teacher_student`` when the teacher gives a distribution and ``loss_clone_value``
    with ``value_coeff > 0``.

    Args:
        student: the learning policy; it must write ``logits`` (discrete) or have a stochastic actor (continuous).
        teacher: the teacher policy (for the KL diagnostic and value regression), or ``None``.
        value_coeff: weight of the value regression (relative to ``coeff``).
    """

    loss_name = CLONE_LOSS

    def __init__(self, student: Policy, teacher: Policy | None = None, value_coeff: float = 0.0) -> None:
        super().__init__(student, teacher, value_coeff)
        self.set_keys(mask=(self.group, "clone_mask"))

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        inputs = self._inputs(tensordict)
        if self.continuous:
            return self._continuous_loss(tensordict, inputs, tensordict.get(self.tensor_keys.action))
        student_log_probs = self._log_probs(self.student, inputs)
        action = tensordict.get(self.tensor_keys.action).long()
        nll = -student_log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        out = self._loss(tensordict, inputs, nll, student_log_probs)
        mask = tensordict.get(self.tensor_keys.mask)
        hits = (student_log_probs.detach().argmax(-1) == action) & mask
        out["clone_accuracy"] = hits.sum() / mask.sum().clamp_min(1)
        return out


def _kl(teacher_log_probs: torch.Tensor, student_log_probs: torch.Tensor) -> torch.Tensor:
    """``KL(teacher || student)`` per row; actions the teacher never takes add nothing (no NaN on masks)."""
    p = teacher_log_probs.exp()
    terms = torch.where(p > 0, p * (teacher_log_probs - student_log_probs), torch.zeros_like(p))
    return terms.sum(-1)
