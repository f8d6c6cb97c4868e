"""PPO for a binding: MAPPO with a centralized critic, IPPO with a local one.

Schulman et al. 2017 (PPO); Yu et al. 2022 (MAPPO); de Witt et al. 2020 (IPPO).
The losses are TorchRL's `MAPPOLoss` /
`IPPOLoss` (their diagnostics, such as ``kl_approx``, taken
over the binding's own rows: `lightmarl.algorithms.masked_ppo_loss`); the loop (advantages over each agent's
valid rows, epochs x minibatches) is the on-policy one of `lightmarl.algorithms.on_policy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import nn
from torchrl.objectives import LossModule

from lightmarl import keys
from lightmarl.algorithms.distillation import Distillation
from lightmarl.algorithms.magnet import Magnet, MagnetLoss
from lightmarl.algorithms.masked_ppo_loss import MaskedIPPOLoss, MaskedMAPPOLoss
from lightmarl.algorithms.on_policy import AuxiliaryLoss, OnPolicyAlgorithm, OnPolicyUnitTrainer
from lightmarl.policies.contracts import StochasticActor, ValueCritic
from lightmarl.population import BindingTable


class PPOUnitTrainer(OnPolicyUnitTrainer):
    """Runs [`PPO`][lightmarl.algorithms.ppo.PPO] (and its distillation loss, if any) for one binding."""

    requires = (StochasticActor, ValueCritic)
    suggested_policy = "lightmarl.policies.MLPActorCritic with policy_kwargs.critic 'centralized' or 'local'"
    loss_name = "ppo"
    config: PPO

    def _make_auxiliary_losses(self) -> tuple[AuxiliaryLoss, ...]:
        losses: list[AuxiliaryLoss] = []
        distillation, magnet = self.config.distillation, self.config.magnet
        if distillation is not None:
            losses.append(distillation.make_loss(self.binding_id, self.policy, self.table, self.population))
        if magnet is not None:
            losses.append(magnet.make_loss(self.binding_id, self.policy, self.table, self.loss_name))
        return tuple(losses)

    @property
    def magnet(self) -> MagnetLoss | None:
        """The magnetic-mirror-descent term, when ``magnet`` is set."""
        return next((aux for aux in self.auxiliary if isinstance(aux, MagnetLoss)), None)

    def state_dict(self) -> dict:
        state = super().state_dict()
        magnet = self.magnet
        if magnet is not None:
            state["magnet"] = magnet.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        magnet = self.magnet
        if magnet is not None and "magnet" in state:
            magnet.load_state_dict(state["magnet"])

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        if not self.config.clip_each_network:
            return super().parameter_groups()
        # Two groups, clipped apart: the actor's (with anything it shares with the critic, and the policy's
        # other parameters) and the critic's own.
        policy = self.policy
        critic_ids = {id(p) for p in self.own_parameters([cast(ValueCritic, policy).critic])}
        actor_ids = {id(p) for p in self.own_parameters([cast(StochasticActor, policy).actor])}
        every = self.own_parameters([policy])
        critic = [p for p in every if id(p) in critic_ids and id(p) not in actor_ids]
        actor = [p for p in every if id(p) not in critic_ids or id(p) in actor_ids]
        return [(actor, self.config.lr), (critic, self.config.lr)]

    @property
    def flavour(self) -> str:
        return "MAPPO" if cast(ValueCritic, self.policy).critic_kind == "centralized" else "IPPO"

    def _make_loss(self) -> LossModule:
        config, policy = self.config, self.policy
        critic = cast(ValueCritic, policy)
        loss_class = MaskedMAPPOLoss if critic.critic_kind == "centralized" else MaskedIPPOLoss
        g = self.group.name
        loss = loss_class(
            cast(StochasticActor, policy).actor,
            critic.critic,
            clip_epsilon=config.clip_epsilon,
            entropy_coeff=config.entropy_coeff,
            critic_coeff=config.critic_coeff,
            loss_critic_type=config.loss_critic_type,
            # Advantages are standardised by the on-policy loop over the binding's own valid rows instead.
            normalize_advantage=False,
            functional=False,
        )
        loss.set_keys(
            action=(g, keys.ACTION),
            sample_log_prob=(g, keys.ACTION_LOG_PROB),
            value=(g, keys.STATE_VALUE),
            advantage=(g, keys.ADVANTAGE),
            value_target=(g, keys.VALUE_TARGET),
            reward=(g, keys.REWARD),
            done=(g, keys.DONE),
            terminated=(g, keys.TERMINATED),
        )
        return loss

    def divergence_limits(self) -> dict[str, float]:
        return {} if self.config.max_kl is None else {keys.KL_APPROX: self.config.max_kl}

    def set_progress(self, optimizer: torch.optim.Optimizer, fraction_done: float) -> None:
        super().set_progress(optimizer, fraction_done)
        final = self.config.final_entropy_coeff
        if final is not None:
            start = self.config.entropy_coeff
            self.loss.entropy_coeff.fill_(start + (final - start) * min(1.0, max(0.0, fraction_done)))


@dataclass(kw_only=True)
class PPO(OnPolicyAlgorithm):
    """Clipped PPO on the binding's rows of each rollout: GAE, then epochs x minibatches.

    The critic decides the flavour: a policy with ``critic: centralized`` trains with
    ``MAPPOLoss`` (MAPPO), one with ``critic: local`` with ``IPPOLoss`` (IPPO). With
    ``distillation`` the binding also learns from a teacher binding (kickstarting or sliced
    cloning, see [`Distillation`][lightmarl.algorithms.distillation.Distillation]), in the same optimizer steps.
    With ``magnet`` the policy loss also pays ``magnet.coeff * KL(pi || magnet)`` towards a slowly moving
    copy of the policy: magnetic mirror descent (Sokota et al. 2022, see
    [`Magnet`][lightmarl.algorithms.magnet.Magnet]), on the same rows as ``ppo``.
    Loss names for ``loss_profiles``: ``ppo``, plus ``distill`` / ``clone``. The policy must
    satisfy [`StochasticActor`][lightmarl.policies.contracts.StochasticActor] and
    [`ValueCritic`][lightmarl.policies.contracts.ValueCritic] (e.g. ``MLPActorCritic``,
    ``RecurrentActorCritic``).
    """

    trainer_class = PPOUnitTrainer

    clip_epsilon: float = 0.2
    """PPO ratio clip."""
    entropy_coeff: float = 0.01
    """Weight of the entropy bonus."""
    final_entropy_coeff: float | None = None
    """Move the entropy weight linearly from ``entropy_coeff`` to this over the frame budget
    (``null``: constant), as RLlib's ``entropy_coeff_schedule``: explore broadly first, then let
    the policy commit to its best actions."""
    critic_coeff: float = 1.0
    """Weight of the value loss."""
    loss_critic_type: Literal["l2", "l1", "smooth_l1"] = "l2"
    """Value loss: ``l2``, ``l1`` or ``smooth_l1``."""
    distillation: Distillation | None = None
    """Learn from a teacher binding as well (``null``: plain PPO)."""
    magnet: Magnet | None = None
    """Magnetic mirror descent: a reverse-KL pull towards a slowly moving magnet policy (``null``: plain PPO)."""
    max_kl: float | None = 1.0
    """Divergence limit: the update's mean approximate KL between the collecting and the updated policy
    (``on_divergence`` acts after ``divergence_patience`` updates above it; ``null``: no limit)."""

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        return (
            *super().hyperparameter_checks(),
            ("clip_epsilon", self.clip_epsilon, self.clip_epsilon > 0, "clip_epsilon > 0"),
            # Negative weights would reward low entropy (collapse) or maximise the value error.
            ("entropy_coeff", self.entropy_coeff, self.entropy_coeff >= 0, "entropy_coeff >= 0"),
            (
                "final_entropy_coeff",
                self.final_entropy_coeff,
                self.final_entropy_coeff is None or self.final_entropy_coeff >= 0,
                "final_entropy_coeff is None or final_entropy_coeff >= 0",
            ),
            ("critic_coeff", self.critic_coeff, self.critic_coeff >= 0, "critic_coeff >= 0"),
            ("max_kl", self.max_kl, self.max_kl is None or self.max_kl > 0, "max_kl is None or max_kl > 0"),
        )

    def reserve_bindings(self, binding_id: str, table: BindingTable) -> None:
        """A kickstarting teacher that plays no agent gets a place in the student's group (`Distillation.reserve_teacher`)."""
        if self.distillation is not None:
            self.distillation.reserve_teacher(binding_id, table)
