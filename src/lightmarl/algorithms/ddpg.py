"""DDPG for a binding: IDDPG with a local critic, MADDPG with a centralized one.

Lillicrap et al. 2016 (DDPG: a deterministic actor trained through a Q critic, target actor
and critic); Lowe et al. 2017 (MADDPG: decentralised actors, a critic that reads every agent's
observation and action). The loss is TorchRL's `DDPGLoss` with a
TD(0) target; the target critic, and the target actor unless ``delay_actor`` is false, follow
TorchRL's `SoftUpdate`.
The data path is the shared off-policy one (`lightmarl.algorithms.off_policy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torchrl.objectives import DDPGLoss, LossModule

from lightmarl import keys
from lightmarl.algorithms.actor_critic import OffPolicyActorCriticAlgorithm, OffPolicyActorCriticUnitTrainer
from lightmarl.algorithms.off_policy import linear_schedule
from lightmarl.policies.contracts import DeterministicActor, QCritic


class DDPGUnitTrainer(OffPolicyActorCriticUnitTrainer):
    """Runs [`DDPG`][lightmarl.algorithms.ddpg.DDPG] for one binding: replay buffer, ``DDPGLoss``, target critic (and actor), noise schedule."""

    requires = (DeterministicActor, QCritic)
    suggested_policy = "lightmarl.policies.DeterministicActorCritic"
    loss_name = "ddpg"
    config: DDPG

    def _make_loss(self) -> LossModule:
        loss = DDPGLoss(
            cast(DeterministicActor, self.policy).actor,
            cast(QCritic, self.policy).qvalue,
            loss_function=self.config.loss_function,
            delay_actor=self.config.delay_actor,
            delay_value=True,
        )
        return self._td0(loss, masked=self.joint, state_action_value=(self.group.name, keys.STATE_ACTION_VALUE))

    def exploration(self) -> tuple[str, torch.Tensor, float]:
        noise = cast(DeterministicActor, self.policy).exploration_noise
        return "exploration_noise", noise, self.config.noise_at(self.frames)

    def networks(self) -> tuple[nn.Module, nn.Module]:
        return cast(DeterministicActor, self.policy).actor, cast(QCritic, self.policy).qvalue


@dataclass(kw_only=True)
class DDPG(OffPolicyActorCriticAlgorithm):
    """Deep deterministic policy gradient on the binding's rows, through its own replay buffer.

    Needs a deterministic actor and a Q critic ([`DeterministicActor`][lightmarl.policies.contracts.DeterministicActor],
    [`QCritic`][lightmarl.policies.contracts.QCritic]) for continuous actions:
    [`lightmarl.policies.DeterministicActorCritic`][lightmarl.policies.continuous.DeterministicActorCritic]. Its critic decides the flavour: ``local``
    trains IDDPG, ``centralized`` MADDPG (the binding must then control every agent of its
    group). Loss name for ``loss_profiles``: ``ddpg``.
    """

    trainer_class = DDPGUnitTrainer

    noise_start: float = 0.3
    """Exploration noise (standard deviation as a fraction of the action range) before any frame was seen."""
    noise_end: float = 0.05
    """Exploration noise after ``noise_decay_frames``."""
    noise_decay_frames: int = 50_000
    """Env frames (env steps of every env copy on this process, counted in the iterations this binding updates) over which the noise decays linearly."""
    delay_actor: bool = True
    """The TD target's next action comes from a target actor, a slow copy of the actor (Lillicrap et al. 2016).
    ``False``: from the actor itself, as with TorchRL ``DDPGLoss``'s default and in BenchMARL's MADDPG and IDDPG."""

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        return (
            *super().hyperparameter_checks(),
            ("noise_start", self.noise_start, self.noise_start >= 0, "noise_start >= 0"),
            ("noise_end", self.noise_end, self.noise_end >= 0, "noise_end >= 0"),
            ("noise_decay_frames", self.noise_decay_frames, self.noise_decay_frames >= 0, "noise_decay_frames >= 0"),
        )

    def noise_at(self, frames: int) -> float:
        """The exploration noise after ``frames`` env frames: linear from ``noise_start`` to ``noise_end``."""
        return linear_schedule(self.noise_start, self.noise_end, frames, self.noise_decay_frames)
