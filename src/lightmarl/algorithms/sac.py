"""SAC for a binding: ISAC with local critics, MASAC with centralized ones.

Haarnoja et al. 2018 ("Soft Actor-Critic: Off-Policy Maximum Entropy Deep RL with a Stochastic
Actor"; "Soft Actor-Critic Algorithms and Applications": twin Q critics, no value network,
entropy temperature tuned to a target entropy). The loss is TorchRL's
:class:`~torchrl.objectives.SACLoss` (v2) with a TD(0) target; the target critics follow
TorchRL's :class:`~torchrl.objectives.SoftUpdate`. The data path is the shared off-policy one
(:mod:`lightmarl.algorithms.off_policy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from tensordict.nn import TensorDictParams
from torch import nn
from torchrl.objectives import SACLoss, SoftUpdate, ValueEstimators

from lightmarl import keys
from lightmarl.algorithms.base import Algorithm, check_hyperparameters, require_policy_outputs
from lightmarl.algorithms.off_policy import OffPolicyUnitTrainer, replay_checks, require_whole_group
from lightmarl.policies.base import Policy
from lightmarl.policies.continuous import SACActorCritic
from lightmarl.population import BindingTable

LOSS_NAME = "sac"


class SAC(Algorithm):
    """Soft actor-critic on the binding's rows, through its own replay buffer.

    Needs a policy with a stochastic ``actor`` (TorchRL ``ProbabilisticActor`` writing
    ``(group, "action")`` and ``(group, "action_log_prob")``) and Q critics (``qvalue``, a
    ``TensorDictModule`` writing ``(group, "state_action_value")``, with their weights stacked in
    ``qvalue_params``), for continuous actions: :class:`lightmarl.policies.SACActorCritic`.
    Its critic decides the flavour: ``local`` trains ISAC, ``centralized`` MASAC (the binding
    must then control every agent of its group). Loss name for ``loss_profiles``: ``sac``.

    Actor, critics and temperature step together: one Adam with a parameter group each.

    Args:
        actor_lr: Adam learning rate of the actor.
        critic_lr: Adam learning rate of the Q critics.
        alpha_lr: Adam learning rate of the log-temperature.
        gamma: discount factor.
        tau: Polyak weight of the online critics in each target update.
        batch_size: transitions per sampled batch (rows; env steps for a centralized critic).
        buffer_size: capacity of the binding's replay buffer (transitions; oldest overwritten).
        learning_starts: no gradient step until the buffer holds this many transitions.
        updates_per_iteration: sampled batches (= optimizer steps) per training iteration.
        alpha_init: initial entropy temperature.
        fixed_alpha: keep the temperature at ``alpha_init`` instead of tuning it.
        target_entropy: the entropy the temperature is tuned towards, per agent; ``auto`` is
            ``-action_dim``.
        loss_function: critic loss: ``l2``, ``l1`` or ``smooth_l1``.
        max_grad_norm: clip the gradient norm to this (``None``: no clipping).
        update_every: learn (store rows and train) on every k-th training iteration only.
    """

    def __init__(
        self,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        alpha_lr: float = 3e-4,
        gamma: float = 0.99,
        tau: float = 0.005,
        batch_size: int = 256,
        buffer_size: int = 100_000,
        learning_starts: int = 1_000,
        updates_per_iteration: int = 8,
        alpha_init: float = 1.0,
        fixed_alpha: bool = False,
        target_entropy: float | Literal["auto"] = "auto",
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        max_grad_norm: float | None = None,
        update_every: int = 1,
    ) -> None:
        check_hyperparameters(
            ("actor_lr", actor_lr, actor_lr > 0),
            ("critic_lr", critic_lr, critic_lr > 0),
            ("alpha_lr", alpha_lr, alpha_lr > 0),
            ("gamma", gamma, 0 <= gamma <= 1),
            ("tau", tau, 0 < tau <= 1),
            *replay_checks(batch_size, buffer_size, learning_starts, updates_per_iteration, update_every),
            ("alpha_init", alpha_init, alpha_init > 0),
            ("target_entropy", target_entropy, target_entropy == "auto" or isinstance(target_entropy, (int, float))),
            ("loss_function", loss_function, loss_function in ("l2", "l1", "smooth_l1")),
            ("max_grad_norm", max_grad_norm, max_grad_norm is None or max_grad_norm > 0),
        )
        self.actor_lr = actor_lr
        self.critic_lr = critic_lr
        self.alpha_lr = alpha_lr
        self.gamma = gamma
        self.tau = tau
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self.learning_starts = learning_starts
        self.updates_per_iteration = updates_per_iteration
        self.alpha_init = alpha_init
        self.fixed_alpha = fixed_alpha
        self.target_entropy = target_entropy
        self.loss_function = loss_function
        self.max_grad_norm = max_grad_norm
        self.update_every = update_every

    def check_policy(self, binding_id: str, policy: Policy) -> None:
        missing = []
        g = policy.group.name
        actor = getattr(policy, "actor", None)
        if not (
            callable(getattr(actor, "get_dist", None)) and (g, keys.ACTION_LOG_PROB) in getattr(actor, "out_keys", ())
        ):
            missing.append(f"a stochastic `actor` (ProbabilisticActor) writing {(g, keys.ACTION_LOG_PROB)!r}")
        qvalue = getattr(policy, "qvalue", None)
        if not (
            qvalue is not None
            and (g, keys.STATE_ACTION_VALUE) in getattr(qvalue, "out_keys", ())
            and isinstance(getattr(policy, "qvalue_params", None), TensorDictParams)
        ):
            missing.append(
                f"Q critics (`qvalue` writing {(g, keys.STATE_ACTION_VALUE)!r} with stacked `qvalue_params`)"
            )
        require_policy_outputs(
            binding_id, "SAC", policy, missing, use="lightmarl.policies.SACActorCritic", action_kind="continuous"
        )

    def make_unit_trainer(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        population: Mapping[str, Policy] | None = None,
    ) -> SACUnitTrainer:
        self.check_policy(binding_id, policy)
        if getattr(policy, "critic_kind", "local") == "centralized":
            require_whole_group(binding_id, "SAC", table, policy.group.name)
        return SACUnitTrainer(binding_id, policy, table, self)


class SACUnitTrainer(OffPolicyUnitTrainer):
    """Runs :class:`SAC` for one binding: replay buffer, ``SACLoss``, target critics, temperature."""

    config: SAC
    policy: SACActorCritic

    def __init__(self, binding_id: str, policy: Policy, table: BindingTable, config: SAC) -> None:
        centralized = getattr(policy, "critic_kind", "local") == "centralized"
        super().__init__(binding_id, policy, table, config, LOSS_NAME, joint=centralized)
        self.flavour = "MASAC" if centralized else "ISAC"
        g = self.group.name
        qvalue_params: TensorDictParams = policy.qvalue_params  # type: ignore[assignment]
        num_critics = int(qvalue_params.batch_size[0])
        target_entropy = config.target_entropy
        if target_entropy == "auto":
            target_entropy = -float(policy.group.action_shape[0])
        self.loss = SACLoss(
            policy.actor,  # type: ignore[arg-type]
            # The policy's template once per critic: SACLoss builds its own stacked weights from it ...
            [policy.qvalue] * num_critics,  # type: ignore[list-item]
            num_qvalue_nets=num_critics,
            loss_function=config.loss_function,
            alpha_init=config.alpha_init,
            fixed_alpha=config.fixed_alpha,
            target_entropy=target_entropy,
        )
        # ... which are swapped for the policy's, so that the critics the loss trains are the ones the
        # policy saves, loads and exchanges; the target critics start as copies of them.
        self.loss.qvalue_network_params = qvalue_params
        self.loss.target_qvalue_network_params = TensorDictParams(qvalue_params.data.clone(), no_convert=True)
        self.loss.set_keys(
            action=(g, keys.ACTION),
            log_prob=(g, keys.ACTION_LOG_PROB),
            value=(g, keys.STATE_VALUE),
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

    def _make_target_updater(self) -> SoftUpdate:
        return SoftUpdate(self.loss, tau=self.config.tau)

    def _parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        groups = [
            (self.own_parameters([self.policy.actor]), self.config.actor_lr),
            (self.own_parameters([self.policy.qvalue_params]), self.config.critic_lr),
        ]
        if isinstance(self.loss.log_alpha, nn.Parameter):  # a buffer when fixed_alpha
            groups.append(([self.loss.log_alpha], self.config.alpha_lr))
        return [(params, lr) for params, lr in groups if params]

    def parameters(self) -> list[nn.Parameter]:
        return [p for params, _ in self._parameter_groups() for p in params]

    def make_optimizer(self) -> torch.optim.Optimizer:
        # log_alpha lives in the loss, which the LightningModule does not move: bring it to the policy first.
        self.to(next(self.policy.parameters()).device)
        return torch.optim.Adam([{"params": params, "lr": lr} for params, lr in self._parameter_groups()])

    @property
    def alpha(self) -> float:
        return float(self.loss.log_alpha.detach().exp())

    def state_dict(self) -> dict:
        """Counters, target networks and the temperature (the critics are the policy's; the replay buffer is not saved)."""
        return {**super().state_dict(), "log_alpha": float(self.loss.log_alpha.detach())}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "log_alpha" in state:
            with torch.no_grad():
                self.loss.log_alpha.fill_(float(state["log_alpha"]))
