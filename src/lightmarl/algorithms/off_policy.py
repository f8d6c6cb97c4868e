"""The off-policy data path shared by DQN, SAC and DDPG: rows -> transitions -> replay -> sampled updates.

Each update, an off-policy UnitTrainer selects its binding's rows of the rollout with the shared
loss filter (:func:`~lightmarl.algorithms.base.loss_row_mask`), turns them into transitions
(observation, action, reward, next observation, done, terminated, plus the row annotations) and
adds them to the binding's own TorchRL :class:`~torchrl.data.ReplayBuffer` over a
:class:`~torchrl.data.LazyTensorStorage`. Once the buffer holds ``learning_starts`` transitions it
samples ``updates_per_iteration`` batches of ``batch_size``; each is one TorchRL loss call, one
gradient step through the :class:`~lightmarl.algorithms.base.GradientStepper` and one
target-network update.

Transitions come in two layouts:

* **per row** (:func:`row_transitions`, ``[N]``): one transition per (env, step, agent) row; what
  a decentralised value (DQN's Q-network, a ``local`` SAC/DDPG critic) reads.
* **joint** (:func:`joint_transitions`, ``[N, agents]``): one transition per (env, step) with every
  agent of the group, for a ``centralized`` critic that reads all agents' observations and
  actions (MADDPG, MASAC); ``(group, "loss_mask")`` marks the rows the losses may learn from.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Protocol, cast

import torch
import torch.distributed as dist
from tensordict import TensorDict, TensorDictBase
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers import RandomSampler
from torchrl.objectives import HardUpdate, LossModule, SoftUpdate

from lightmarl import keys
from lightmarl.algorithms.base import GradientStepper, UnitTrainer, loss_row_mask
from lightmarl.policies.base import Policy
from lightmarl.population import BindingTable

#: row entries copied into the replay buffer next to observation and action.
TRANSITION_ANNOTATIONS = (
    keys.BINDING_ID,
    keys.AGENT_ID,
    keys.EPISODE_ID,
    keys.ENV_INDEX,
    keys.LOSS_PROFILE_ID,
    keys.IS_TRAINABLE_AGENT,
    keys.VALID,
)

_NOW_KEYS = (keys.OBSERVATION, keys.ACTION, keys.ACTION_MASK, *TRANSITION_ANNOTATIONS)
_NEXT_KEYS = (keys.OBSERVATION, keys.REWARD, keys.DONE, keys.TERMINATED, keys.ACTION_MASK)


def row_transitions(experience: TensorDictBase, group_name: str, mask: torch.Tensor) -> TensorDict:
    """The rows of ``group_name`` where ``mask`` holds, as flat transitions ``[N]``.

    Each keeps ``(group, observation/action/action_mask + annotations)`` and
    ``("next", group, observation/reward/done/terminated/action_mask)``.
    """
    now = experience.get(group_name).select(*_NOW_KEYS, strict=False)[mask]
    nxt = experience.get((keys.NEXT, group_name)).select(*_NEXT_KEYS, strict=False)[mask]
    n = int(mask.sum())
    return TensorDict(
        {group_name: now, keys.NEXT: TensorDict({group_name: nxt}, batch_size=[n])},
        batch_size=[n],
        device=experience.device,
    )


def joint_transitions(experience: TensorDictBase, group_name: str, mask: torch.Tensor) -> TensorDict:
    """The (env, step) entries of ``group_name`` with at least one row in ``mask``, as ``[N, agents]``.

    Every agent of the group is kept (a centralized critic reads them all); ``(group,
    "loss_mask")`` is ``mask`` for the kept entries, so the losses learn from those rows only.
    """
    steps = mask.any(-1)  # [envs, time]
    now = experience.get(group_name).select(*_NOW_KEYS, strict=False)[steps]
    now.set(keys.LOSS_MASK, mask[steps])
    nxt = experience.get((keys.NEXT, group_name)).select(*_NEXT_KEYS, strict=False)[steps]
    n = int(steps.sum())
    return TensorDict(
        {group_name: now, keys.NEXT: TensorDict({group_name: nxt}, batch_size=[n])},
        batch_size=[n],
        device=experience.device,
    )


def linear_schedule(start: float, end: float, frames: int, decay_frames: int) -> float:
    """``start`` moved linearly to ``end`` over ``decay_frames`` frames (``end`` from then on)."""
    if decay_frames == 0:
        return end
    return start + min(1.0, frames / decay_frames) * (end - start)


def replay_checks(
    batch_size: int, buffer_size: int, learning_starts: int, updates_per_iteration: int, update_every: int
) -> tuple[tuple[str, object, bool], ...]:
    """The replay hyper-parameter checks every off-policy algorithm runs (for ``check_hyperparameters``)."""
    return (
        ("batch_size", batch_size, batch_size >= 1),
        ("buffer_size", buffer_size, buffer_size >= batch_size),
        ("learning_starts", learning_starts, learning_starts >= 0),
        ("updates_per_iteration", updates_per_iteration, updates_per_iteration >= 1),
        ("update_every", update_every, update_every >= 1),
    )


def require_whole_group(binding_id: str, algorithm: str, table: BindingTable, group_name: str) -> None:
    """Fail unless ``binding_id`` controls every agent of ``group_name`` in every env copy.

    A centralized critic's losses re-compute every agent's action with this binding's actor,
    which is only right when no other binding acts in the group.
    """
    possible = table.env_spec.possible_agents
    for where, agent_map in [("agent_binding_map", table.agent_binding_map)] + [
        (f"agent_binding_map.per_env[{e}]", m) for e, m in table.per_env_maps.items()
    ]:
        for agent in table.env_spec.groups[group_name].agents:
            owner = agent_map[possible.index(agent)]
            if owner != binding_id:
                raise ValueError(
                    f"binding {binding_id!r}: algorithm {algorithm} with a centralized critic needs the binding to "
                    f"control every agent of group {group_name!r}, but {where} gives {agent!r} to {owner!r}; "
                    "use policy_kwargs.critic: local for a binding that shares its group"
                )


class OffPolicyConfig(Protocol):
    """The replay settings an off-policy algorithm config carries."""

    batch_size: int
    buffer_size: int
    learning_starts: int
    updates_per_iteration: int
    max_grad_norm: float | None
    update_every: int


class OffPolicyUnitTrainer(UnitTrainer):
    """The off-policy learner of one binding: replay buffer, sampled updates, target networks, counters.

    Subclasses build ``self.loss`` (a TorchRL loss with target parameters) in their
    ``__init__``, then call :meth:`_init_targets`; they may override :meth:`_after_update`
    (exploration schedules), :meth:`_batch_metrics` and :meth:`_make_target_updater`.

    Args:
        binding_id: the binding it trains.
        policy: that binding's policy.
        table: the population.
        config: the algorithm's settings.
        loss_name: the loss name that selects rows (``loss_profiles`` refer to it).
        joint: store joint transitions ``[N, agents]`` (centralized critic) instead of rows ``[N]``.
    """

    loss: LossModule
    target_updater: SoftUpdate | HardUpdate

    def __init__(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        config: OffPolicyConfig,
        loss_name: str,
        joint: bool = False,
    ) -> None:
        super().__init__(binding_id, policy, table)
        self.config = config
        self.loss_name = loss_name
        self.loss_names = (loss_name,)
        self.joint = joint
        self.update_every = config.update_every
        self.device = torch.device("cpu")
        self.replay = self._make_replay()
        self.frames = 0
        self.grad_steps = 0
        self.updates = 0

    # -- plumbing ---------------------------------------------------------------------------
    def _make_replay(self) -> ReplayBuffer:
        return ReplayBuffer(
            storage=LazyTensorStorage(self.config.buffer_size, device=self.device),
            sampler=RandomSampler(),
            batch_size=self.config.batch_size,
        )

    def _init_targets(self) -> None:
        """Start the target networks as copies of the online ones (call once ``self.loss`` exists)."""
        self.target_updater = self._make_target_updater()

    @abstractmethod
    def _make_target_updater(self) -> SoftUpdate | HardUpdate: ...

    def target_parameters(self) -> list[torch.Tensor]:
        """The target networks' tensors (detached copies of the online networks' parameters)."""
        return [
            t
            for name, params in self.loss.named_children()
            if name.startswith("target_") and name.endswith("_params")
            for t in params.values(True, True)
        ]

    def to(self, device: torch.device) -> OffPolicyUnitTrainer:
        device = torch.device(device)
        self.loss.to(device)
        if device != self.device:
            self.device = device
            old = self.replay[:] if len(self.replay) else None
            self.replay = self._make_replay()
            if old is not None:
                self.replay.extend(old.to(device))
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
        """This binding's rows of ``experience`` that its loss may learn from, as transitions.

        Rows ``[N]`` (:func:`row_transitions`), or joint ``[N, agents]`` entries
        (:func:`joint_transitions`) when the trainer's critic is centralized.
        """
        g = self.group.name
        rows = experience.get(g)
        mask = loss_row_mask(rows, self.table, self.loss_name, binding_id=self.binding_id)
        if not self.joint:
            return row_transitions(experience, g, mask)
        steps = mask.any(-1)
        others = (rows.get(keys.BINDING_ID)[steps] != self.table.index[self.binding_id]).any()
        if bool(others):
            raise ValueError(
                f"binding {self.binding_id!r}: its centralized critic needs every agent of group {g!r}, but the "
                "rollout has rows of other bindings in its env steps (did the agent_binding_map change?)"
            )
        return joint_transitions(experience, g, mask)

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
        self._after_update(metrics)
        metrics["grad_steps"] = float(self.grad_steps)
        return metrics

    def _after_update(self, metrics: dict[str, float]) -> None:
        """Called after each update (e.g. to move an exploration schedule on); may add metrics."""

    def _train(self, optimizer: torch.optim.Optimizer, stepper: GradientStepper) -> dict[str, float]:
        params = self.parameters()
        sums: dict[str, float] = {}
        for _ in range(self.config.updates_per_iteration):
            batch = self.replay.sample().to(self.device)
            out = self.loss(batch)
            # DQNLoss names its only term "loss"; SAC / DDPG return "loss_<part>" terms.
            loss = cast(torch.Tensor, sum(v for k, v in out.items() if k.startswith("loss")))
            stepper.backward(loss)
            stepper.step(optimizer, params, self.config.max_grad_norm)
            self.target_updater.step()
            self.grad_steps += 1
            step_metrics = {
                k: float(v.detach().float().mean()) for k, v in out.items() if v.numel() and v.dtype.is_floating_point
            }
            step_metrics.update(self._batch_metrics(batch))
            for k, v in step_metrics.items():
                sums[k] = sums.get(k, 0.0) + v
        n = self.config.updates_per_iteration
        return {k: v / n for k, v in sums.items() if math.isfinite(v)}

    def _batch_metrics(self, batch: TensorDictBase) -> dict[str, float]:
        """Extra per-batch metrics read after the loss ran on ``batch`` (default: its mean TD error)."""
        td_error = batch.get((self.group.name, keys.TD_ERROR), None)
        return {} if td_error is None else {keys.TD_ERROR: float(td_error.float().mean())}

    # -- state ------------------------------------------------------------------------------
    #: prefixes of the loss's ``state_dict`` entries that a checkpoint keeps: the target networks
    #: (built as copies of the policy before a resumed run loads its weights, so they must be saved).
    saved_networks: tuple[str, ...] = ("target_",)

    def state_dict(self) -> dict:
        """Counters and the loss's networks of :attr:`saved_networks` (the replay buffer is not saved)."""
        networks = {
            k: v.detach().clone() for k, v in self.loss.state_dict().items() if k.startswith(self.saved_networks)
        }
        return {
            "frames": self.frames,
            "grad_steps": self.grad_steps,
            "updates": self.updates,
            "networks": networks,
            "target_updater": self.target_updater.state_dict(),  # a hard update's step counter
        }

    def load_state_dict(self, state: dict) -> None:
        self.frames = int(state.get("frames", 0))
        self.grad_steps = int(state.get("grad_steps", 0))
        self.updates = int(state.get("updates", 0))
        if "networks" in state:  # absent in checkpoints written before target networks were saved
            expected = [k for k, _ in self.loss.state_dict().items() if k.startswith(self.saved_networks)]
            missing = [k for k in expected if k not in state["networks"]]
            if missing:
                raise ValueError(f"binding {self.binding_id!r}: the saved trainer state lacks {missing}")
            self.loss.load_state_dict(state["networks"], strict=False)
        if "target_updater" in state:
            self.target_updater.load_state_dict(state["target_updater"])
