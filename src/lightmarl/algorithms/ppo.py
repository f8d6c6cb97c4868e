"""PPO for a binding: MAPPO with a centralized critic, IPPO with a local one.

Schulman et al. 2017 (PPO); Yu et al. 2022 (MAPPO); de Witt et al. 2020 (IPPO).
The losses are TorchRL's :class:`~torchrl.objectives.multiagent.MAPPOLoss` /
:class:`~torchrl.objectives.multiagent.IPPOLoss`; advantages come from TorchRL's GAE, run
over each (env, agent)'s own valid rows (:func:`valid_row_gae`), so turn-based envs and
agents that leave mid-episode get the right credit.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Literal, cast

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ValueEstimators
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss
from torchrl.objectives.value.functional import vec_generalized_advantage_estimate

from lightmarl import keys
from lightmarl.algorithms.base import (
    Algorithm,
    GradientStepper,
    UnitTrainer,
    check_hyperparameters,
    loss_row_mask,
)
from lightmarl.algorithms.distillation import CLONE_LOSS, Distillation, KickstarterLoss, SlicedClonerLoss
from lightmarl.policies.base import Policy
from lightmarl.policies.recurrent import RecurrentActorCritic
from lightmarl.population import BindingTable

LOSS_NAME = "ppo"


class PPO(Algorithm):
    """Clipped PPO on the binding's rows of each rollout: GAE, then epochs x minibatches.

    The critic decides the flavour: a policy with ``critic: centralized`` trains with
    ``MAPPOLoss`` (MAPPO), one with ``critic: local`` with ``IPPOLoss`` (IPPO). With
    ``distillation`` the binding also learns from a teacher binding (kickstarting or sliced
    cloning, see :class:`~lightmarl.algorithms.Distillation`), in the same optimizer steps.
    Loss names for ``loss_profiles``: ``ppo``, plus ``distill`` / ``clone``.

    Args:
        lr: Adam learning rate.
        epochs: passes over each rollout.
        minibatch_size: env steps (all agents of the group at one step of one env) per minibatch.
        gamma: discount factor.
        lmbda: GAE lambda.
        clip_epsilon: PPO ratio clip.
        entropy_coeff: weight of the entropy bonus.
        critic_coeff: weight of the value loss.
        loss_critic_type: value loss: ``l2``, ``l1`` or ``smooth_l1``.
        max_grad_norm: clip the gradient norm to this (``None``: no clipping).
        normalize_advantage: standardise advantages over the binding's valid rows of a rollout.
        anneal_lr: decay the learning rate linearly to 0 over the frame budget.
        update_every: learn on every k-th training iteration only (1: every iteration).
        distillation: learn from a teacher binding as well (``None``: plain PPO).
    """

    def __init__(
        self,
        lr: float = 3e-3,
        epochs: int = 4,
        minibatch_size: int = 400,
        gamma: float = 0.99,
        lmbda: float = 0.95,
        clip_epsilon: float = 0.2,
        entropy_coeff: float = 0.01,
        critic_coeff: float = 1.0,
        loss_critic_type: Literal["l2", "l1", "smooth_l1"] = "l2",
        max_grad_norm: float | None = 1.0,
        normalize_advantage: bool = True,
        anneal_lr: bool = False,
        update_every: int = 1,
        distillation: Distillation | None = None,
    ) -> None:
        check_hyperparameters(
            ("lr", lr, lr > 0),
            ("epochs", epochs, epochs >= 1),
            ("minibatch_size", minibatch_size, minibatch_size >= 1),
            ("gamma", gamma, 0 <= gamma <= 1),
            ("lmbda", lmbda, 0 <= lmbda <= 1),
            ("clip_epsilon", clip_epsilon, clip_epsilon > 0),
            ("update_every", update_every, update_every >= 1),
        )
        self.lr = lr
        self.epochs = epochs
        self.minibatch_size = minibatch_size
        self.gamma = gamma
        self.lmbda = lmbda
        self.clip_epsilon = clip_epsilon
        self.entropy_coeff = entropy_coeff
        self.critic_coeff = critic_coeff
        self.loss_critic_type = loss_critic_type
        self.max_grad_norm = max_grad_norm
        self.normalize_advantage = normalize_advantage
        self.anneal_lr = anneal_lr
        self.update_every = update_every
        self.distillation = distillation

    def check_policy(self, binding_id: str, policy: Policy) -> None:
        actor = getattr(policy, "actor", None)
        if actor is None or not policy.has_critic or getattr(policy, "critic", None) is None:
            raise ValueError(
                f"binding {binding_id!r}: algorithm PPO needs a policy with a probabilistic `actor` and a value "
                f"`critic`; {type(policy).__name__} has actor={actor is not None}, critic={policy.has_critic} "
                "(for MLPActorCritic set policy_kwargs.critic to 'centralized' or 'local')"
            )

    def make_unit_trainer(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        population: Mapping[str, Policy] | None = None,
    ) -> PPOUnitTrainer:
        self.check_policy(binding_id, policy)
        return PPOUnitTrainer(binding_id, policy, table, self, population)


class PPOUnitTrainer(UnitTrainer):
    """Runs :class:`PPO` (and its distillation loss, if any) for one binding."""

    loss_names: tuple[str, ...] = (LOSS_NAME,)

    def __init__(
        self,
        binding_id: str,
        policy: Policy,
        table: BindingTable,
        config: PPO,
        population: Mapping[str, Policy] | None = None,
    ) -> None:
        super().__init__(binding_id, policy, table)
        self.config = config
        self.distillation = config.distillation
        self.distill_loss: KickstarterLoss | SlicedClonerLoss | None = None
        if self.distillation is not None:
            self.distill_loss = self.distillation.make_loss(binding_id, policy, table, population)
            self.loss_names = (LOSS_NAME, self.distillation.loss_name)
        self.fraction_done = 0.0
        centralized = getattr(policy, "critic_kind", "local") == "centralized"
        loss_class = MAPPOLoss if centralized else IPPOLoss
        self.flavour = "MAPPO" if centralized else "IPPO"
        g = self.group.name
        self.loss = loss_class(
            policy.actor,
            policy.critic,
            clip_epsilon=config.clip_epsilon,
            entropy_coeff=config.entropy_coeff,
            critic_coeff=config.critic_coeff,
            loss_critic_type=config.loss_critic_type,
            # Advantages are standardised here over the binding's own valid rows instead.
            normalize_advantage=False,
            functional=False,
        )
        self.loss.set_keys(
            action=(g, keys.ACTION),
            sample_log_prob=(g, keys.ACTION_LOG_PROB),
            value=(g, keys.STATE_VALUE),
            advantage=(g, keys.ADVANTAGE),
            value_target=(g, keys.VALUE_TARGET),
            reward=(g, keys.REWARD),
            done=(g, keys.DONE),
            terminated=(g, keys.TERMINATED),
        )
        self.loss.make_value_estimator(
            ValueEstimators.GAE,
            gamma=config.gamma,
            lmbda=config.lmbda,
            # torch.vmap has no batching rule for recurrent layers: call a recurrent critic twice.
            deactivate_vmap=getattr(policy, "is_recurrent", False),
        )
        self.loss.loss_mask_key = (g, keys.LOSS_MASK)
        self.update_every = config.update_every
        self.updates = 0

    def parameters(self) -> list[nn.Parameter]:
        return self.own_parameters([self.policy])

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.config.lr)

    def to(self, device: torch.device) -> PPOUnitTrainer:
        self.loss.to(device)
        if self.distill_loss is not None:
            self.distill_loss.to(device)
        return self

    def set_progress(self, optimizer: torch.optim.Optimizer, fraction_done: float) -> None:
        """Linear learning-rate annealing, when enabled; the budget fraction also drives distillation schedules."""
        self.fraction_done = fraction_done
        if self.config.anneal_lr:
            for group in optimizer.param_groups:
                group["lr"] = self.config.lr * max(0.0, 1.0 - fraction_done)

    def update(
        self, experience: TensorDictBase, optimizer: torch.optim.Optimizer, stepper: GradientStepper
    ) -> dict[str, float]:
        g = self.group.name
        # A structural copy: advantage/mask entries written below stay private to this binding.
        data = experience.copy()
        rows = data.get(g)
        mask = loss_row_mask(rows, self.table, LOSS_NAME, binding_id=self.binding_id)
        num_rows = int(mask.sum())
        distill_rows = 0
        if self.distill_loss is not None:
            distill_mask = self.distillation_rows(rows)
            distill_rows = int(distill_mask.sum())
            data.set(self.distill_loss.tensor_keys.mask, distill_mask)
            self.distill_loss.coeff = self.distillation_coeff()
        if num_rows == 0 and distill_rows == 0:
            return {}
        if num_rows:
            with torch.no_grad():
                self.estimate_advantages(data)
            advantage = rows.get(keys.ADVANTAGE)
            if self.config.normalize_advantage:
                valid_adv = advantage[mask]
                std = valid_adv.std() if num_rows > 1 else torch.ones((), device=advantage.device)
                advantage = (advantage - valid_adv.mean()) / (std + 1e-8)
                rows.set(keys.ADVANTAGE, advantage)
            rows.set(keys.LOSS_MASK, mask)

        recurrent = getattr(self.policy, "is_recurrent", False)
        replay: Callable[[], AbstractContextManager[Any]]
        if recurrent:
            # Whole env sequences [envs, time]: the actor replays each one from its stored state.
            samples = data
            minibatch = max(1, min(self.config.minibatch_size // data.shape[1], data.shape[0]))
            replay = cast(RecurrentActorCritic, self.policy).sequence_mode
        else:
            samples = data.reshape(-1)
            minibatch = min(self.config.minibatch_size, samples.shape[0])
            replay = contextlib.nullcontext
        num_samples = samples.shape[0]
        num_minibatches = max(1, num_samples // minibatch)
        sums: dict[str, float] = {}
        count = 0
        params = self.parameters()
        for _ in range(self.config.epochs):
            order = torch.randperm(num_samples, device=samples.device)
            for i in range(num_minibatches):
                batch = samples[order[i * minibatch : (i + 1) * minibatch]]
                with replay():
                    # No PPO rows (e.g. a profile that only clones): the PPO loss would average over nothing.
                    out = dict(self.loss(batch).items()) if num_rows else {}
                    if self.distill_loss is not None:
                        out.update(self.distill_loss(batch).items())
                loss = sum(v for k, v in out.items() if k.startswith("loss_"))
                stepper.backward(cast(torch.Tensor, loss))
                stepper.step(optimizer, params, self.config.max_grad_norm)
                for key, value in out.items():
                    if value.numel() and value.dtype.is_floating_point:
                        sums[key] = sums.get(key, 0.0) + float(value.detach().float().mean())
                count += 1
        self.updates += 1
        metrics = {k: v / count for k, v in sums.items() if math.isfinite(v)}
        metrics["rows"] = float(num_rows)
        if num_rows:
            metrics["value_target_mean"] = float(rows.get(keys.VALUE_TARGET)[mask].mean())
        if self.distillation is not None:
            metrics[f"{self.distillation.loss_name}_rows"] = float(distill_rows)
        return metrics

    def estimate_advantages(self, data: TensorDictBase) -> None:
        """Write ``(group, "advantage")`` and ``(group, "value_target")`` into ``data`` (``[envs, time]``).

        The critic values every row and every next observation as TorchRL's GAE does (same
        call, so recurrent and centralized critics behave as there); the recursion then runs
        over each (env, agent)'s valid rows only (:func:`valid_row_gae`). With every row valid
        this is exactly TorchRL's GAE.
        """
        g = self.group.name
        estimator = self.loss.value_estimator
        # TorchRL's own value call (vmap or not, recurrent "is_init" handling); no public API exposes it.
        value, next_value, _ = estimator._call_value_nets(
            data=data,
            params=None,
            next_params=None,
            single_call=False,
            value_key=estimator.tensor_keys.value,
            detach_next=True,
            vmap_randomness=estimator.vmap_randomness,
        )
        advantage, value_target = valid_row_gae(
            self.config.gamma,
            self.config.lmbda,
            value,
            next_value,
            reward=data.get((keys.NEXT, g, keys.REWARD)),
            done=data.get((keys.NEXT, g, keys.DONE)),
            terminated=data.get((keys.NEXT, g, keys.TERMINATED)),
            valid=data.get((g, keys.VALID)),
            time_dim=data.ndim - 1,
        )
        data.set(self.loss.tensor_keys.advantage, advantage)
        data.set(self.loss.tensor_keys.value_target, value_target)

    def distillation_rows(self, rows: TensorDictBase) -> torch.Tensor:
        """Rows the distillation loss learns from: the student's own (``kl``) or the teacher's (``clone``)."""
        assert self.distillation is not None
        if self.distillation.mode == "kl":
            return loss_row_mask(rows, self.table, self.distillation.loss_name, binding_id=self.binding_id)
        # The teacher's rows are not trainable rows: clone reads them through its own profile gate.
        return loss_row_mask(rows, self.table, CLONE_LOSS, binding_id=self.distillation.teacher, trainable_only=False)

    def distillation_coeff(self) -> float:
        """The distillation weight for the coming update (by this binding's update count or budget spent)."""
        assert self.distillation is not None
        return self.distillation.coefficient(self.updates, self.fraction_done)

    def state_dict(self) -> dict:
        return {"updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state.get("updates", 0))


def valid_row_gae(
    gamma: float,
    lmbda: float,
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    valid: torch.Tensor,
    time_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each sequence's valid rows: a transition runs from one valid row to the next.

    In turn-based envs an agent's rows alternate with rows where another agent acts (``valid``
    False), and rewards or the episode's end can arrive on those; in parallel envs an agent
    that left mid-episode has invalid rows until the reset. Each sequence (one env and agent,
    along ``time_dim``) is *compacted*: its valid row ``t`` becomes one transition whose

    * reward is the sum of the rewards on rows ``t .. e`` (undiscounted: they arrive within one
      of the agent's own steps),
    * end row ``e`` is the first row from ``t`` on that is ``done``, else the row before the
      agent's next valid row, else the sequence's last row,
    * ``done`` / ``terminated`` / next value are those of row ``e`` (so the next value is the
      critic's value of the agent's observation after row ``e``: in turn-based envs, what it
      sees at its next turn),

    then TorchRL's :func:`~torchrl.objectives.value.functional.vec_generalized_advantage_estimate`
    runs on the compacted sequences and the results go back to the valid rows. Rewards after a
    done row and before the agent's next valid row (its next episode, before its first turn) are
    dropped, as are rows before a sequence's first valid row. With every row valid, each
    transition is its own row and this is TorchRL's GAE.

    Args:
        gamma: discount factor.
        lmbda: GAE lambda.
        value: critic values of the rows ``[*batch, T, *features]`` (time at ``time_dim``).
        next_value: critic values of each row's next observation, same shape.
        reward: ``("next", reward)``, same shape.
        done: ``("next", done)``, same shape (bool).
        terminated: ``("next", terminated)``, same shape (bool).
        valid: the rows' ``valid`` flags, ``value``'s shape or without its trailing feature dims.
        time_dim: the time dimension.

    Returns:
        ``(advantage, value_target)`` shaped like ``value``; on invalid rows advantage is 0 and
        value_target is the row's value.
    """
    shape = value.shape
    time_dim = time_dim % value.dim()
    while valid.dim() < value.dim():
        valid = valid.unsqueeze(-1)
    valid = valid.expand(shape)
    steps = shape[time_dim]

    def sequences(x: torch.Tensor) -> torch.Tensor:
        return x.expand(shape).movedim(time_dim, -1).reshape(-1, steps)

    v, nv, r = sequences(value), sequences(next_value), sequences(reward).to(value.dtype)
    d, term, ok = sequences(done).bool(), sequences(terminated).bool(), sequences(valid).bool()
    n = v.shape[0]
    slot = ok.long().cumsum(1) - 1  # which valid row's transition a row belongs to (-1: none yet)
    dones_before = d.long().cumsum(1) - d.long()  # done rows strictly before each row
    # dones_before at the row's transition start (non-decreasing in time, so a running max finds it)
    start_dones = torch.where(ok, dones_before, 0).cummax(1).values
    member = (slot >= 0) & (dones_before == start_dones)  # no done between the transition's start and the row
    width = max(int(ok.sum(1).max()), 1) if n else 1
    index = torch.arange(n, device=v.device).unsqueeze(1) * width + slot  # flat [n * width] transition index
    reward_c = torch.zeros(n * width, dtype=v.dtype, device=v.device).index_add_(0, index[member], r[member])
    time = torch.arange(steps, device=v.device).expand(n, steps)
    end = torch.full((n * width,), -1, dtype=torch.long, device=v.device)
    end.scatter_reduce_(0, index[member], time[member], reduce="amax")
    used = end >= 0  # padding transitions (shorter sequences) stay zero and done: they add nothing
    end_flat = torch.arange(n * width, device=v.device) // width * steps + end.clamp(min=0)
    value_c = torch.zeros(n * width, dtype=v.dtype, device=v.device)
    value_c[index[ok]] = v[ok]
    next_value_c = torch.where(used, nv.reshape(-1)[end_flat], 0)
    done_c = torch.where(used, d.reshape(-1)[end_flat], True)
    terminated_c = torch.where(used, term.reshape(-1)[end_flat], True)
    advantage_c, _ = vec_generalized_advantage_estimate(
        gamma,
        lmbda,
        value_c.view(n, width, 1),
        next_value_c.view(n, width, 1),
        reward_c.view(n, width, 1),
        done=done_c.view(n, width, 1),
        terminated=terminated_c.view(n, width, 1),
        time_dim=-2,
    )
    advantage = torch.zeros_like(v)
    advantage[ok] = advantage_c.reshape(-1)[index[ok]]
    value_target = advantage + v

    def rows(x: torch.Tensor) -> torch.Tensor:
        moved = list(shape)
        moved.append(moved.pop(time_dim))
        return x.reshape(moved).movedim(-1, time_dim)

    return rows(advantage), rows(value_target)
