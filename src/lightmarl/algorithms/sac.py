"""SAC for a binding: ISAC with local critics, MASAC with centralized ones.

Haarnoja et al. 2018 ("Soft Actor-Critic: Off-Policy Maximum Entropy Deep RL with a Stochastic
Actor"; "Soft Actor-Critic Algorithms and Applications": twin Q critics, no value network,
entropy temperature tuned to a target entropy). The loss is TorchRL's
`SACLoss` (v2) with a TD(0) target; the target critics follow
TorchRL's `SoftUpdate`. The data path is the shared off-policy one
(`lightmarl.algorithms.off_policy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
from tensordict.nn import TensorDictParams
from torch import nn
from torchrl.objectives import LossModule, SACLoss

from lightmarl import keys
from lightmarl.algorithms.actor_critic import OffPolicyActorCriticAlgorithm, OffPolicyActorCriticUnitTrainer
from lightmarl.policies.contracts import StochasticActor, TwinQCritics


class SACUnitTrainer(OffPolicyActorCriticUnitTrainer):
    """Runs [`SAC`][lightmarl.algorithms.sac.SAC] for one binding: replay buffer, ``SACLoss``, target critics, temperature."""

    requires = (StochasticActor, TwinQCritics)
    suggested_policy = "lightmarl.policies.SACActorCritic"
    loss_name = "sac"
    config: SAC
    loss: SACLoss

    def _make_loss(self) -> LossModule:
        g = self.group.name
        critics = cast(TwinQCritics, self.policy)
        num_critics = int(critics.qvalue_params.batch_size[0])
        target_entropy = self.config.target_entropy
        if target_entropy == "auto":
            target_entropy = -float(self.group.action_shape[0])
        loss = SACLoss(
            cast(StochasticActor, self.policy).actor,
            # The policy's template once per critic: SACLoss builds its own stacked weights from it ...
            [critics.qvalue] * num_critics,
            num_qvalue_nets=num_critics,
            loss_function=self.config.loss_function,
            alpha_init=self.config.alpha_init,
            fixed_alpha=self.config.fixed_alpha,
            target_entropy=target_entropy,
        )
        # ... which are swapped for the policy's, so that the critics the loss trains are the ones the
        # policy saves, loads and exchanges; the target critics start as copies of them.
        loss.qvalue_network_params = critics.qvalue_params
        loss.target_qvalue_network_params = TensorDictParams(critics.qvalue_params.data.clone(), no_convert=True)
        return self._td0(
            loss,
            masked=self.joint,
            action=(g, keys.ACTION),
            log_prob=(g, keys.ACTION_LOG_PROB),
            value=(g, keys.STATE_VALUE),
            state_action_value=(g, keys.STATE_ACTION_VALUE),
        )

    def networks(self) -> tuple[nn.Module, nn.Module]:
        return cast(StochasticActor, self.policy).actor, cast(TwinQCritics, self.policy).qvalue_params

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        # The temperature steps with actor and critics, in a parameter group of its own.
        groups = super().parameter_groups()
        if isinstance(self.loss.log_alpha, nn.Parameter):  # a buffer when fixed_alpha
            groups.append(([self.loss.log_alpha], self.config.alpha_lr))
        return groups

    def make_optimizer(self) -> torch.optim.Optimizer:
        # log_alpha lives in the loss, which the LightningModule does not move: bring it to the policy first.
        self.to(next(self.policy.parameters()).device)
        return super().make_optimizer()

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


@dataclass(kw_only=True)
class SAC(OffPolicyActorCriticAlgorithm):
    """Soft actor-critic on the binding's rows, through its own replay buffer.

    Needs a stochastic actor and Q critics with stacked weights
    ([`StochasticActor`][lightmarl.policies.contracts.StochasticActor],
    [`TwinQCritics`][lightmarl.policies.contracts.TwinQCritics]) for continuous actions:
    [`lightmarl.policies.SACActorCritic`][lightmarl.policies.continuous.SACActorCritic]. Its critic decides the flavour: ``local`` trains
    ISAC, ``centralized`` MASAC (the binding must then control every agent of its group). Loss
    name for ``loss_profiles``: ``sac``.
    """

    trainer_class = SACUnitTrainer

    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha_lr: float = 3e-4
    """Adam learning rate of the log-temperature."""
    alpha_init: float = 1.0
    """Initial entropy temperature."""
    fixed_alpha: bool = False
    """Keep the temperature at ``alpha_init`` instead of tuning it."""
    target_entropy: float | Literal["auto"] = "auto"
    """The entropy the temperature is tuned towards, per agent; ``auto`` is ``-action_dim``."""

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        target_entropy = self.target_entropy
        return (
            *super().hyperparameter_checks(),
            ("alpha_lr", self.alpha_lr, self.alpha_lr > 0, "alpha_lr > 0"),
            ("alpha_init", self.alpha_init, self.alpha_init > 0, "alpha_init > 0"),
            (
                "target_entropy",
                target_entropy,
                target_entropy == "auto" or isinstance(target_entropy, (int, float)),
                "'auto' or a number",
            ),
        )
