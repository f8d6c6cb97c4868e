"""DQN for a binding (independent Q-learning, IQL): replay buffer, target network, double DQN.

Mnih et al. 2015 (DQN: experience replay and a delayed target network); van Hasselt et al.
2016 (double DQN: the online network picks the next action, the target network values it).
The loss is TorchRL's :class:`~torchrl.objectives.DQNLoss` with a TD(0) target; the target
network follows TorchRL's :class:`~torchrl.objectives.SoftUpdate` or
:class:`~torchrl.objectives.HardUpdate`; transitions live in a TorchRL
:class:`~torchrl.data.ReplayBuffer` over a :class:`~torchrl.data.LazyTensorStorage`.

The data path is off-policy and per binding: each update, the binding's trainable rows of the
rollout (``loss_row_mask(..., "dqn", binding_id=...)``) become one transition each
(observation, action, reward, next observation, done, terminated, plus the row annotations)
and are added to the binding's own replay buffer; then ``updates_per_iteration`` batches of
``batch_size`` transitions are sampled from it and trained on. A PPO binding fed by the same
rollout stream learns on-policy from its own rows; nothing here touches them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers import RandomSampler
from torchrl.objectives import DQNLoss, HardUpdate, SoftUpdate, ValueEstimators

from lightmarl.algorithms.base import (
    Algorithm,
    GradientStepper,
    UnitTrainer,
    check_hyperparameters,
    loss_row_mask,
)
from lightmarl.data import schema
from lightmarl.policies.base import Policy
from lightmarl.population import BindingTable

LOSS_NAME = "dqn"
ACTION_VALUE = "action_value"
CHOSEN_ACTION_VALUE = "chosen_action_value"
TD_ERROR = "td_error"

#: row entries copied into the replay buffer next to observation and action.
TRANSITION_ANNOTATIONS = (
    schema.BINDING_ID,
    schema.AGENT_ID,
    schema.EPISODE_ID,
    schema.ENV_INDEX,
    schema.LOSS_PROFILE_ID,
    schema.IS_TRAINABLE_AGENT,
    schema.VALID,
)


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
            ("batch_size", batch_size, batch_size >= 1),
            ("buffer_size", buffer_size, buffer_size >= batch_size),
            ("learning_starts", learning_starts, learning_starts >= 0),
            ("updates_per_iteration", updates_per_iteration, updates_per_iteration >= 1),
            ("loss_function", loss_function, loss_function in ("l2", "l1", "smooth_l1")),
            ("target_update", target_update, target_update in ("soft", "hard")),
            ("tau", tau, 0 < tau <= 0.5),
            ("target_update_interval", target_update_interval, target_update_interval >= 1),
            ("eps_start", eps_start, 0 <= eps_start <= 1),
            ("eps_end", eps_end, 0 <= eps_end <= 1),
            ("eps_decay_frames", eps_decay_frames, eps_decay_frames >= 0),
            ("update_every", update_every, update_every >= 1),
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
        if self.eps_decay_frames == 0:
            return self.eps_end
        fraction = min(1.0, frames / self.eps_decay_frames)
        return self.eps_start + fraction * (self.eps_end - self.eps_start)

    def check_policy(self, binding_id: str, policy: Policy) -> None:
        qvalue = getattr(policy, "qvalue", None)
        value_key = (policy.group.name, ACTION_VALUE)
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


class DQNUnitTrainer(UnitTrainer):
    """Runs :class:`DQN` for one binding: its replay buffer, loss, target network and epsilon schedule."""

    loss_names: tuple[str, ...] = (LOSS_NAME,)

    def __init__(self, binding_id: str, policy: Policy, table: BindingTable, config: DQN) -> None:
        super().__init__(binding_id, policy, table)
        self.config = config
        self.update_every = config.update_every
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
            action=(g, schema.ACTION),
            action_value=(g, ACTION_VALUE),
            value=(g, CHOSEN_ACTION_VALUE),
            reward=(g, schema.REWARD),
            done=(g, schema.DONE),
            terminated=(g, schema.TERMINATED),
            priority=(g, TD_ERROR),
        )
        self.loss.make_value_estimator(ValueEstimators.TD0, gamma=config.gamma)
        self.device = torch.device("cpu")
        self.replay = self._make_replay()
        self.target_updater = self._make_target_updater()
        self.frames = 0
        self.grad_steps = 0
        self.updates = 0
        self._set_epsilon()

    # -- plumbing ---------------------------------------------------------------------------
    def _make_replay(self) -> ReplayBuffer:
        return ReplayBuffer(
            storage=LazyTensorStorage(self.config.buffer_size, device=self.device),
            sampler=RandomSampler(),
            batch_size=self.config.batch_size,
        )

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

    def target_parameters(self) -> list[torch.Tensor]:
        """The target network's tensors (detached copies of the online Q-network's parameters)."""
        return [t for t in self.loss.target_value_network_params.values(True, True)]

    def parameters(self) -> list[nn.Parameter]:
        # The Q-network only: the policy's epsilon is a buffer, and it has no other trainable part.
        return self.own_parameters([self.qvalue])

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.config.lr)

    def to(self, device: torch.device) -> DQNUnitTrainer:
        device = torch.device(device)
        self.loss.to(device)
        if device != self.device:
            self.device = device
            if len(self.replay):
                old = self.replay[:]
                self.replay = self._make_replay()
                self.replay.extend(old.to(device))
            else:
                self.replay = self._make_replay()
        # The updater caches the tensors it updates: re-bind it to the moved ones, keeping the target's values.
        target = [t.detach().clone() for t in self.target_parameters()]
        counter = self.target_updater.state_dict()
        self.target_updater = self._make_target_updater()
        self.target_updater.load_state_dict(counter)
        with torch.no_grad():
            for t, saved in zip(self.target_parameters(), target):
                t.copy_(saved)
        return self

    # -- data path --------------------------------------------------------------------------
    def transitions(self, experience: TensorDictBase) -> TensorDict:
        """The binding's valid trainable rows of ``experience`` as flat transitions ``[N]``.

        Each keeps ``(group, observation/action/action_mask + annotations)`` and
        ``("next", group, observation/reward/done/terminated/action_mask)``.
        """
        g = self.group.name
        rows = experience.get(g)
        mask = loss_row_mask(rows, self.table, LOSS_NAME, binding_id=self.binding_id)
        now = rows.select(schema.OBSERVATION, schema.ACTION, schema.ACTION_MASK, *TRANSITION_ANNOTATIONS, strict=False)[
            mask
        ]
        nxt = experience.get(("next", g)).select(
            schema.OBSERVATION, schema.REWARD, schema.DONE, schema.TERMINATED, schema.ACTION_MASK, strict=False
        )[mask]
        n = int(mask.sum())
        return TensorDict(
            {g: now, "next": TensorDict({g: nxt}, batch_size=[n])}, batch_size=[n], device=experience.device
        )

    def _ready(self) -> bool:
        """Whether the buffer holds ``learning_starts`` transitions (on every rank, so all step together)."""
        size = torch.tensor(len(self.replay), device=self.device)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(size, op=dist.ReduceOp.MIN)
        return int(size) >= max(1, self.config.learning_starts)

    def update(
        self, experience: TensorDictBase, optimizer: torch.optim.Optimizer, stepper: GradientStepper
    ) -> dict[str, float]:
        transitions = self.transitions(experience)
        num_rows = transitions.shape[0]
        if num_rows:
            self.replay.extend(transitions.to(self.device))
        self.frames += int(experience.batch_size.numel())
        metrics: dict[str, float] = {"rows": float(num_rows), "buffer_size": float(len(self.replay))}
        if self._ready():
            metrics.update(self._train(optimizer, stepper))
        self.updates += 1
        # The next rollout explores with the schedule's value for the frames seen so far.
        metrics["epsilon"] = self.epsilon
        self._set_epsilon()
        metrics["grad_steps"] = float(self.grad_steps)
        return metrics

    def _train(self, optimizer: torch.optim.Optimizer, stepper: GradientStepper) -> dict[str, float]:
        g = self.group.name
        params = self.parameters()
        sums = {"loss": 0.0, "td_error": 0.0, "q_mean": 0.0}
        for _ in range(self.config.updates_per_iteration):
            batch = self.replay.sample().to(self.device)
            out = self.loss(batch)
            loss = out.get("loss")
            stepper.backward(loss)
            stepper.step(optimizer, params, self.config.max_grad_norm)
            self.target_updater.step()
            self.grad_steps += 1
            sums["loss"] += float(loss.detach())
            sums["td_error"] += float(batch.get((g, TD_ERROR)).mean())
            with torch.no_grad():
                sums["q_mean"] += float(
                    self.qvalue(batch.select(*self.qvalue.in_keys)).get((g, CHOSEN_ACTION_VALUE)).mean()
                )
        n = self.config.updates_per_iteration
        return {k: v / n for k, v in sums.items() if math.isfinite(v)}

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Counters only: the replay buffer and the target network are not checkpointed."""
        return {"frames": self.frames, "grad_steps": self.grad_steps, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.frames = int(state.get("frames", 0))
        self.grad_steps = int(state.get("grad_steps", 0))
        self.updates = int(state.get("updates", 0))
        self._set_epsilon()
