"""DQN for a binding (independent Q-learning, IQL): replay buffer, target network, double DQN.

Mnih et al. 2015 (DQN: experience replay and a delayed target network); van Hasselt et al.
2016 (double DQN: the online network picks the next action, the target network values it).
The loss is TorchRL's `DQNLoss` with a TD(0) target; the target
network follows TorchRL's `SoftUpdate` or
`HardUpdate`; transitions live in a TorchRL
`ReplayBuffer` over a `LazyTensorStorage`.

The data path is the shared off-policy one (`lightmarl.algorithms.off_policy`): each
update, the binding's trainable rows of the rollout (``loss_row_mask(..., "dqn", binding_id=...)``)
become one transition each and are added to the binding's own replay buffer; then
``updates_per_iteration`` batches of ``batch_size`` transitions are sampled from it and trained on.
A PPO binding fed by the same rollout stream learns on-policy from its own rows; nothing here
touches them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.objectives import DQNLoss, HardUpdate, LossModule, SoftUpdate

from lightmarl import keys
from lightmarl.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyUnitTrainer, linear_schedule
from lightmarl.policies.contracts import QValues


class DQNUnitTrainer(OffPolicyUnitTrainer):
    """Runs [`DQN`][lightmarl.algorithms.dqn.DQN] for one binding: its replay buffer, loss, target network and epsilon schedule."""

    requires = (QValues,)
    action_kinds = ("discrete",)
    suggested_policy = "lightmarl.policies.qnet.QNetworkPolicy"
    loss_name = "dqn"
    config: DQN

    @property
    def qvalue(self) -> TensorDictModuleBase:
        """The policy's Q-network (observation -> action values -> greedy action)."""
        return cast(QValues, self.policy).qvalue

    @property
    def flavour(self) -> str:
        return "double DQN" if self.config.double_dqn else "DQN"

    def _make_loss(self) -> LossModule:
        g = self.group.name
        loss = DQNLoss(
            self.qvalue,
            loss_function=self.config.loss_function,
            delay_value=True,
            double_dqn=self.config.double_dqn,
            action_space="categorical",
        )
        return self._td0(
            loss, action=(g, keys.ACTION), action_value=(g, keys.ACTION_VALUE), value=(g, keys.CHOSEN_ACTION_VALUE)
        )

    def exploration(self) -> tuple[str, torch.Tensor, float]:
        return "epsilon", cast(QValues, self.policy).epsilon, self.config.epsilon_at(self.frames)

    @property
    def epsilon(self) -> float:
        return float(cast(QValues, self.policy).epsilon)

    def _make_target_updater(self) -> SoftUpdate | HardUpdate:
        if self.config.target_update == "soft":
            return SoftUpdate(self.loss, tau=self.config.tau)
        # HardUpdate copies on the (interval + 1)-th step: ask for one less to copy every `interval` steps.
        return HardUpdate(self.loss, value_network_update_interval=self.config.target_update_interval - 1)

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        # The Q-network only: the policy's epsilon is a buffer, and it has no other trainable part.
        return [(self.own_parameters([self.qvalue]), self.config.lr)]

    def _last_batch_metrics(self, batch: TensorDictBase) -> dict[str, float]:
        with torch.no_grad():
            chosen = self.qvalue(batch.select(*self.qvalue.in_keys)).get((self.group.name, keys.CHOSEN_ACTION_VALUE))
        return {"q_mean": float(chosen.mean())}


@dataclass(kw_only=True)
class DQN(OffPolicyAlgorithm):
    """Deep Q-learning on the binding's rows, through its own replay buffer.

    Needs a policy with action values ([`QValues`][lightmarl.policies.contracts.QValues]): a
    ``qvalue`` TensorDictModule writing ``(group, "action_value")`` and the greedy
    ``(group, "action")``, and an ``epsilon`` buffer for exploration, as
    [`lightmarl.policies.qnet.QNetworkPolicy`][lightmarl.policies.qnet.QNetworkPolicy] has. Loss name for ``loss_profiles``: ``dqn``.
    """

    trainer_class = DQNUnitTrainer

    lr: float = 1e-3
    """Adam learning rate."""
    double_dqn: bool = True
    """van Hasselt et al. 2016's target (online argmax, target value)."""
    loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1"
    target_update: Literal["soft", "hard"] = "soft"
    """``soft`` (Polyak averaging by ``tau`` after every step) or ``hard`` (copy every ``target_update_interval`` steps)."""
    tau: float = 0.01
    target_update_interval: int = 250
    """Optimizer steps between hard copies."""
    eps_start: float = 1.0
    """Exploration rate before any frame was seen."""
    eps_end: float = 0.05
    """Exploration rate after ``eps_decay_frames``."""
    eps_decay_frames: int = 50_000
    """Env frames (env steps of every env copy on this process, counted in the iterations this binding updates) over which epsilon decays linearly."""
    max_grad_norm: float | None = 10.0

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        return (
            *super().hyperparameter_checks(),
            ("lr", self.lr, self.lr > 0, "lr > 0"),
            (
                "target_update",
                self.target_update,
                self.target_update in ("soft", "hard"),
                'target_update in ("soft", "hard")',
            ),
            ("tau", self.tau, 0 < self.tau <= 0.5, "0 < tau <= 0.5"),
            (
                "target_update_interval",
                self.target_update_interval,
                self.target_update_interval >= 1,
                "target_update_interval >= 1",
            ),
            ("eps_start", self.eps_start, 0 <= self.eps_start <= 1, "0 <= eps_start <= 1"),
            ("eps_end", self.eps_end, 0 <= self.eps_end <= 1, "0 <= eps_end <= 1"),
            ("eps_decay_frames", self.eps_decay_frames, self.eps_decay_frames >= 0, "eps_decay_frames >= 0"),
        )

    def epsilon_at(self, frames: int) -> float:
        """The exploration rate after ``frames`` env frames: linear from ``eps_start`` to ``eps_end``."""
        return linear_schedule(self.eps_start, self.eps_end, frames, self.eps_decay_frames)
