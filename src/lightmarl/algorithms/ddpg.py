"""DDPG for a binding: IDDPG with a local critic, MADDPG with a centralized one.

Lillicrap et al. 2016 (DDPG: a deterministic actor trained through a Q critic, target actor
and critic); Lowe et al. 2017 (MADDPG: decentralised actors, a critic that reads every agent's
observation and action). The loss is TorchRL's :class:`~torchrl.objectives.DDPGLoss` with a
TD(0) target; both target networks follow TorchRL's :class:`~torchrl.objectives.SoftUpdate`.
The data path is the shared off-policy one (:mod:`lightmarl.algorithms.off_policy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.objectives import DDPGLoss, SoftUpdate, ValueEstimators

from lightmarl import keys
from lightmarl.algorithms.base import Algorithm, check_hyperparameters, require_policy_outputs
from lightmarl.algorithms.off_policy import OffPolicyUnitTrainer, linear_schedule, replay_checks, require_whole_group
from lightmarl.policies.base import Policy
from lightmarl.policies.continuous import DeterministicActorCritic
from lightmarl.population import BindingTable

LOSS_NAME = "ddpg"


class DDPG(Algorithm):
    """Deep deterministic policy gradient on the binding's rows, through its own replay buffer.

    Needs a policy with a deterministic ``actor`` (a ``TensorDictModule`` writing ``(group,
    "action")``), a Q critic ``qvalue`` (a ``TensorDictModule`` reading the action and writing
    ``(group, "state_action_value")``) and an ``exploration_noise`` buffer, for continuous
    actions: :class:`lightmarl.policies.DeterministicActorCritic`. Its critic decides the
    flavour: ``local`` trains IDDPG, ``centralized`` MADDPG (the binding must then control every
    agent of its group). Loss name for ``loss_profiles``: ``ddpg``.

    Actor and critic step together: one Adam with a parameter group each.

    Args:
        actor_lr: Adam learning rate of the actor.
        critic_lr: Adam learning rate of the critic.
        gamma: discount factor.
        tau: Polyak weight of the online networks in each target update (actor and critic).
        batch_size: transitions per sampled batch (rows; env steps for a centralized critic).
        buffer_size: capacity of the binding's replay buffer (transitions; oldest overwritten).
        learning_starts: no gradient step until the buffer holds this many transitions.
        updates_per_iteration: sampled batches (= optimizer steps) per training iteration.
        loss_function: critic loss: ``l2``, ``l1`` or ``smooth_l1``.
        noise_start: exploration noise (standard deviation as a fraction of the action range)
            before any frame was seen.
        noise_end: exploration noise after ``noise_decay_frames``.
        noise_decay_frames: env frames (env steps of every env copy on this process, counted in
            the iterations this binding updates) over which the noise decays linearly.
        max_grad_norm: clip the gradient norm to this (``None``: no clipping).
        update_every: learn (store rows and train) on every k-th training iteration only.
    """

    def __init__(
        self,
        actor_lr: float = 1e-3,
        critic_lr: float = 1e-3,
        gamma: float = 0.99,
        tau: float = 0.005,
        batch_size: int = 256,
        buffer_size: int = 100_000,
        learning_starts: int = 1_000,
        updates_per_iteration: int = 8,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        noise_start: float = 0.3,
        noise_end: float = 0.05,
        noise_decay_frames: int = 50_000,
        max_grad_norm: float | None = None,
        update_every: int = 1,
    ) -> None:
        check_hyperparameters(
            ("actor_lr", actor_lr, actor_lr > 0),
            ("critic_lr", critic_lr, critic_lr > 0),
            ("gamma", gamma, 0 <= gamma <= 1),
            ("tau", tau, 0 < tau <= 1),
            *replay_checks(batch_size, buffer_size, learning_starts, updates_per_iteration, update_every),
            ("loss_function", loss_function, loss_function in ("l2", "l1", "smooth_l1")),
            ("noise_start", noise_start, noise_start >= 0),
            ("noise_end", noise_end, noise_end >= 0),
            ("noise_decay_frames", noise_decay_frames, noise_decay_frames >= 0),
            ("max_grad_norm", max_grad_norm, max_grad_norm is None or max_grad_norm > 0),
        )
        self.actor_lr = actor_lr
        self.critic_lr = critic_lr
        self.gamma = gamma
        self.tau = tau
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self.learning_starts = learning_starts
        self.updates_per_iteration = updates_per_iteration
        self.loss_function = loss_function
        self.noise_start = noise_start
        self.noise_end = noise_end
        self.noise_decay_frames = noise_decay_frames
        self.max_grad_norm = max_grad_norm
        self.update_every = update_every

    def noise_at(self, frames: int) -> float:
        """The exploration noise after ``frames`` env frames: linear from ``noise_start`` to ``noise_end``."""
        return linear_schedule(self.noise_start, self.noise_end, frames, self.noise_decay_frames)

    def check_policy(self, binding_id: str, policy: Policy) -> None:
        missing = []
        g = policy.group.name
        actor = getattr(policy, "actor", None)
        if not (isinstance(actor, TensorDictModuleBase) and (g, keys.ACTION) in actor.out_keys):
            missing.append(f"a deterministic `actor` writing {(g, keys.ACTION)!r}")
        elif callable(getattr(actor, "get_dist", None)):
            missing.append("a deterministic `actor` (it has a stochastic one)")
        qvalue = getattr(policy, "qvalue", None)
        if not (
            isinstance(qvalue, TensorDictModuleBase)
            and (g, keys.STATE_ACTION_VALUE) in qvalue.out_keys
            and (g, keys.ACTION) in qvalue.in_keys
        ):
            missing.append(
                f"a Q critic (`qvalue` reading {(g, keys.ACTION)!r}, writing {(g, keys.STATE_ACTION_VALUE)!r})"
            )
        if not isinstance(getattr(policy, "exploration_noise", None), torch.Tensor):
            missing.append("an `exploration_noise` buffer")
        require_policy_outputs(
            binding_id,
            "DDPG",
            policy,
            missing,
            use="lightmarl.policies.DeterministicActorCritic",
            action_kind="continuous",
        )

    def make_unit_trainer(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        population: Mapping[str, Policy] | None = None,
    ) -> DDPGUnitTrainer:
        self.check_policy(binding_id, policy)
        if getattr(policy, "critic_kind", "local") == "centralized":
            require_whole_group(binding_id, "DDPG", table, policy.group.name)
        return DDPGUnitTrainer(binding_id, policy, table, self)


class DDPGUnitTrainer(OffPolicyUnitTrainer):
    """Runs :class:`DDPG` for one binding: replay buffer, ``DDPGLoss``, target actor and critic, noise schedule."""

    config: DDPG
    policy: DeterministicActorCritic

    def __init__(self, binding_id: str, policy: Policy, table: BindingTable, config: DDPG) -> None:
        centralized = getattr(policy, "critic_kind", "local") == "centralized"
        super().__init__(binding_id, policy, table, config, LOSS_NAME, joint=centralized)
        self.flavour = "MADDPG" if centralized else "IDDPG"
        g = self.group.name
        self.loss = DDPGLoss(
            policy.actor,  # type: ignore[arg-type]
            policy.qvalue,  # type: ignore[arg-type]
            loss_function=config.loss_function,
            delay_actor=True,
            delay_value=True,
        )
        self.loss.set_keys(
            state_action_value=(g, keys.STATE_ACTION_VALUE),
            reward=(g, keys.REWARD),
            done=(g, keys.DONE),
            terminated=(g, keys.TERMINATED),
            priority=(g, keys.TD_ERROR),
        )
        if centralized:
            self.loss.loss_mask_key = (g, keys.LOSS_MASK)
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=config.gamma)
        self._init_targets()
        self._set_noise()

    def _make_target_updater(self) -> SoftUpdate:
        return SoftUpdate(self.loss, tau=self.config.tau)

    def _set_noise(self) -> None:
        self.policy.exploration_noise.fill_(self.config.noise_at(self.frames))

    def _parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        groups = [
            (self.own_parameters([self.policy.actor]), self.config.actor_lr),
            (self.own_parameters([self.policy.qvalue]), self.config.critic_lr),
        ]
        return [(params, lr) for params, lr in groups if params]

    def parameters(self) -> list[nn.Parameter]:
        return [p for params, _ in self._parameter_groups() for p in params]

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam([{"params": params, "lr": lr} for params, lr in self._parameter_groups()])

    def _after_update(self, metrics: dict[str, float]) -> None:
        # The next rollout explores with the schedule's value for the frames seen so far.
        metrics["exploration_noise"] = float(self.policy.exploration_noise)
        self._set_noise()

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._set_noise()
