"""DQN for a binding (independent Q-learning, IQL): replay buffer, target network, double DQN.

Mnih et al. 2015 (DQN: experience replay and a delayed target network); van Hasselt et al.
2016 (double DQN: the online network picks the next action, the target network values it).
The loss is TorchRL's :class:`~torchrl.objectives.DQNLoss` with a TD(0) target; the target
network follows TorchRL's :class:`~torchrl.objectives.SoftUpdate` or
:class:`~torchrl.objectives.HardUpdate`; transitions live in a TorchRL
:class:`~torchrl.data.ReplayBuffer` over a :class:`~torchrl.data.LazyTensorStorage`.

The data path is the shared off-policy one (:mod:`lightmarl.algorithms.off_policy`): each
update, the binding's trainable rows of the rollout (``loss_row_mask(..., "dqn", binding_id=...)``)
become one transition each and are added to the binding's own replay buffer; then
``updates_per_iteration`` batches of ``batch_size`` transitions are sampled from it and trained on.
A PPO binding fed by the same rollout stream learns on-policy from its own rows; nothing here
touches them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.objectives import DQNLoss, HardUpdate, SoftUpdate, ValueEstimators

from lightmarl import keys
from lightmarl.algorithms.base import Algorithm, check_hyperparameters
from lightmarl.algorithms.off_policy import OffPolicyUnitTrainer, linear_schedule, replay_checks
from lightmarl.policies.base import Policy
from lightmarl.population import BindingTable

LOSS_NAME = "dqn"


class DQN(Algorithm):
    """Deep Q-learning on the binding's rows, through its own replay buffer.

    Needs a policy with action values: a ``qvalue`` TensorDictModule writing
    ``(group, "action_value")`` and the greedy ``(group, "action")``, and an ``epsilon`` buffer
    for exploration, as :class:`lightmarl.policies.qnet.QNetworkPolicy` has. Loss name for
    ``loss_profiles``: ``dqn``.

    Args:
        lr: Adam learning rate.
        gamma: discount factor.
        batch_size: transitions per sampled batch.
        buffer_size: capacity of the binding's replay buffer (transitions; oldest overwritten).
        learning_starts: no gradient step until the buffer holds this many transitions.
        updates_per_iteration: sampled batches (= optimizer steps) per training iteration.
        double_dqn: van Hasselt et al. 2016's target (online argmax, target value).
        loss_function: TD-error loss: ``l2``, ``l1`` or ``smooth_l1`` (Huber).
        target_update: ``soft`` (Polyak averaging by ``tau`` after every step) or ``hard``
            (copy every ``target_update_interval`` steps).
        tau: Polyak weight of the online network in a soft update.
        target_update_interval: optimizer steps between hard copies.
        eps_start: exploration rate before any frame was seen.
        eps_end: exploration rate after ``eps_decay_frames``.
        eps_decay_frames: env frames (env steps of every env copy on this process, counted
            in the iterations this binding updates) over which epsilon decays linearly.
        max_grad_norm: clip the gradient norm to this (``None``: no clipping).
        update_every: learn (store rows and train) on every k-th training iteration only.
    """

    def __init__(
        self,
        lr: float = 1e-3,
        gamma: float = 0.99,
        batch_size: int = 256,
        buffer_size: int = 100_000,
        learning_starts: int = 1_000,
        updates_per_iteration: int = 8,
        double_dqn: bool = True,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        target_update: Literal["soft", "hard"] = "soft",
        tau: float = 0.01,
        target_update_interval: int = 250,
        eps_start: float = 1.0,
        eps_end: float = 0.05,
        eps_decay_frames: int = 50_000,
        max_grad_norm: float | None = 10.0,
        update_every: int = 1,
    ) -> None:
        check_hyperparameters(
            ("lr", lr, lr > 0),
            ("gamma", gamma, 0 <= gamma <= 1),
            *replay_checks(batch_size, buffer_size, learning_starts, updates_per_iteration, update_every),
            ("loss_function", loss_function, loss_function in ("l2", "l1", "smooth_l1")),
            ("target_update", target_update, target_update in ("soft", "hard")),
            ("tau", tau, 0 < tau <= 0.5),
            ("target_update_interval", target_update_interval, target_update_interval >= 1),
            ("eps_start", eps_start, 0 <= eps_start <= 1),
            ("eps_end", eps_end, 0 <= eps_end <= 1),
            ("eps_decay_frames", eps_decay_frames, eps_decay_frames >= 0),
        )
        self.lr = lr
        self.gamma = gamma
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self.learning_starts = learning_starts
        self.updates_per_iteration = updates_per_iteration
        self.double_dqn = double_dqn
        self.loss_function = loss_function
        self.target_update = target_update
        self.tau = tau
        self.target_update_interval = target_update_interval
        self.eps_start = eps_start
        self.eps_end = eps_end
        self.eps_decay_frames = eps_decay_frames
        self.max_grad_norm = max_grad_norm
        self.update_every = update_every

    def epsilon_at(self, frames: int) -> float:
        """The exploration rate after ``frames`` env frames: linear from ``eps_start`` to ``eps_end``."""
        return linear_schedule(self.eps_start, self.eps_end, frames, self.eps_decay_frames)

    def check_policy(self, binding_id: str, policy: Policy) -> None:
        qvalue = getattr(policy, "qvalue", None)
        value_key = (policy.group.name, keys.ACTION_VALUE)
        has_values = isinstance(qvalue, TensorDictModuleBase) and value_key in qvalue.out_keys
        if not has_values or not isinstance(getattr(policy, "epsilon", None), torch.Tensor):
            raise ValueError(
                f"binding {binding_id!r}: algorithm DQN needs a policy with Q-values (a `qvalue` TensorDictModule "
                f"writing {value_key!r}) and an `epsilon` buffer; {type(policy).__name__} has "
                f"qvalue={has_values} (use lightmarl.policies.qnet.QNetworkPolicy)"
            )
        if policy.group.action_kind != "discrete":
            raise ValueError(
                f"binding {binding_id!r}: algorithm DQN needs discrete actions; group {policy.group.name!r} has "
                f"{policy.group.action_kind} actions"
            )

    def make_unit_trainer(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        population: Mapping[str, Policy] | None = None,
    ) -> DQNUnitTrainer:
        self.check_policy(binding_id, policy)
        return DQNUnitTrainer(binding_id, policy, table, self)


class DQNUnitTrainer(OffPolicyUnitTrainer):
    """Runs :class:`DQN` for one binding: its replay buffer, loss, target network and epsilon schedule."""

    config: DQN

    def __init__(self, binding_id: str, policy: Policy, table: BindingTable, config: DQN) -> None:
        super().__init__(binding_id, policy, table, config, LOSS_NAME)
        self.flavour = "double DQN" if config.double_dqn else "DQN"
        g = self.group.name
        self.qvalue: TensorDictModuleBase = policy.qvalue  # type: ignore[assignment]
        self.loss = DQNLoss(
            self.qvalue,
            loss_function=config.loss_function,
            delay_value=True,
            double_dqn=config.double_dqn,
            action_space="categorical",
        )
        self.loss.set_keys(
            action=(g, keys.ACTION),
            action_value=(g, keys.ACTION_VALUE),
            value=(g, keys.CHOSEN_ACTION_VALUE),
            reward=(g, keys.REWARD),
            done=(g, keys.DONE),
            terminated=(g, keys.TERMINATED),
            priority=(g, keys.TD_ERROR),
        )
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=config.gamma)
        self._init_targets()
        self._set_epsilon()

    def _set_epsilon(self) -> None:
        epsilon = self.policy.epsilon
        assert isinstance(epsilon, torch.Tensor)
        epsilon.fill_(self.config.epsilon_at(self.frames))

    @property
    def epsilon(self) -> float:
        return float(self.policy.epsilon)  # type: ignore[arg-type]

    def _make_target_updater(self) -> SoftUpdate | HardUpdate:
        if self.config.target_update == "soft":
            return SoftUpdate(self.loss, tau=self.config.tau)
        # HardUpdate copies on the (interval + 1)-th step: ask for one less to copy every `interval` steps.
        return HardUpdate(self.loss, value_network_update_interval=self.config.target_update_interval - 1)

    def parameters(self) -> list[nn.Parameter]:
        # The Q-network only: the policy's epsilon is a buffer, and it has no other trainable part.
        return self.own_parameters([self.qvalue])

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.config.lr)

    def _after_update(self, metrics: dict[str, float]) -> None:
        # The next rollout explores with the schedule's value for the frames seen so far.
        metrics["epsilon"] = self.epsilon
        self._set_epsilon()

    def _batch_metrics(self, batch: TensorDictBase) -> dict[str, float]:
        with torch.no_grad():
            chosen = self.qvalue(batch.select(*self.qvalue.in_keys)).get((self.group.name, keys.CHOSEN_ACTION_VALUE))
        return {**super()._batch_metrics(batch), "q_mean": float(chosen.mean())}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._set_epsilon()
