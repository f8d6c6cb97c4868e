"""Off-policy actor-critic learning for continuous actions: the part DDPG and SAC share.

Both train an actor through Q critics from the binding's replay buffer; the policy's
``critic_kind`` decides the flavour: a ``local`` critic learns from per-row transitions
(IDDPG, ISAC), a ``centralized`` one from joint transitions of the whole group (MADDPG,
MASAC; the binding must then control every agent of its group). Actor and critics step
together: one Adam with a parameter group each, at their own learning rates.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import cast

from torch import nn

from lightmarl.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyUnitTrainer
from lightmarl.policies.base import Policy
from lightmarl.policies.contracts import QCritic


@dataclass(kw_only=True)
class OffPolicyActorCriticAlgorithm(OffPolicyAlgorithm):
    """The learning rates of an off-policy actor-critic (with the replay settings of every off-policy algorithm)."""

    actor_lr: float = 1e-3
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic(s)."""

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        return (
            *super().hyperparameter_checks(),
            ("actor_lr", self.actor_lr, self.actor_lr > 0, "actor_lr > 0"),
            ("critic_lr", self.critic_lr, self.critic_lr > 0, "critic_lr > 0"),
        )


class OffPolicyActorCriticUnitTrainer(OffPolicyUnitTrainer):
    """An off-policy learner of an actor and Q critics; subclasses name the two (`networks`)."""

    action_kinds = ("continuous",)
    whole_group_reason = (
        "with a centralized critic",
        " or set policy_kwargs.critic: local for a binding that shares its group",
    )
    config: OffPolicyActorCriticAlgorithm

    @classmethod
    def reads_whole_group(cls, policy: Policy) -> bool:
        return cast(QCritic, policy).critic_kind == "centralized"

    @property
    def flavour(self) -> str:
        # The field's names: independent learners (IDDPG, ISAC) or a centralized critic (MADDPG, MASAC).
        return ("MA" if self.joint else "I") + self.loss_name.upper()

    @abstractmethod
    def networks(self) -> tuple[nn.Module, nn.Module]:
        """``(actor, critics)``: the modules (or parameter holders) the two parameter groups step."""

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        actor, critics = self.networks()
        return [
            (self.own_parameters([actor]), self.config.actor_lr),
            (self.own_parameters([critics]), self.config.critic_lr),
        ]
