"""The off-policy learner shared by DQN, DDPG, SAC and QMIX/VDN: rows -> transitions -> replay -> sampled updates.

Each update, an off-policy UnitTrainer selects its binding's rows of the rollout with the shared
loss filter ([`loss_row_mask`][lightmarl.algorithms.base.loss_row_mask]), turns them into transitions
(observation, action, reward, next observation, done, terminated, plus the row annotations) and
adds them to the binding's own TorchRL `ReplayBuffer` over a
`LazyTensorStorage`. Once the buffer holds ``learning_starts`` transitions it
samples ``updates_per_iteration`` batches of ``batch_size``; each is one TorchRL loss call, one
gradient step through the [`GradientStepper`][lightmarl.algorithms.base.GradientStepper] and one
target-network update. Whether the buffer is full enough is agreed by every process
(``GradientStepper.agree_min``), so that all DDP ranks step together.

Transitions come in two layouts:

* **per row** (`row_transitions`, ``[N]``): one transition per (env, step, agent) row; what
  a decentralised value (DQN's Q-network, a ``local`` SAC/DDPG critic) reads.
* **joint** (`joint_transitions`, ``[N, agents]``): one transition per (env, step) with every
  agent of the group, for a ``centralized`` critic that reads all agents' observations and
  actions (MADDPG, MASAC); ``(group, "loss_mask")`` marks the rows the losses may learn from.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal, cast

import torch
from tensordict import TensorDict, TensorDictBase, is_tensor_collection
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers import RandomSampler
from torchrl.objectives import HardUpdate, LossModule, SoftUpdate, ValueEstimators

from lightmarl import keys
from lightmarl.algorithms.base import Algorithm, GradientStepper, MetricMeans, UnitTrainer, loss_row_mask
from lightmarl.algorithms.open_transitions import AgentTransitions, rows_of, sequences
from lightmarl.algorithms.rollout_rows import RolloutRows, rollout_rows
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
    return _select_transitions(experience, group_name, mask)


def joint_transitions(experience: TensorDictBase, group_name: str, mask: torch.Tensor) -> TensorDict:
    """The (env, step) entries of ``group_name`` with at least one row in ``mask``, as ``[N, agents]``.

    Every agent of the group is kept (a centralized critic reads them all); ``(group,
    "loss_mask")`` is ``mask`` for the kept entries, so the losses learn from those rows only.
    """
    steps = mask.any(-1)  # [envs, time]
    transitions = _select_transitions(experience, group_name, steps)
    transitions.set((group_name, keys.LOSS_MASK), mask[steps])
    return transitions


def closed_transitions(
    data: TensorDictBase,
    group_name: str,
    mask: torch.Tensor,
    transitions: AgentTransitions,
    counted: torch.Tensor,
) -> TensorDict:
    """The agent transitions that start on the rows in ``mask`` (``[envs, time, agents]``), as flat ``[N]``.

    For turn-based envs (`lightmarl.algorithms.open_transitions`): each keeps its start
    row's ``(group, observation/action/action_mask + annotations)``; under ``("next", group)``
    the reward is the sum of the transition's ``counted`` rows' rewards and observation, done,
    terminated and action mask are those of its end row (the agent's next own turn, or its
    episode's end). ``transitions`` groups ``data``'s ``[envs * agents, time]`` sequences.
    """
    rows = data.get(group_name)
    shape = rows.shape
    after = data.get((keys.NEXT, group_name))
    reward = after.get(keys.REWARD)
    reward_seq = torch.where(sequences(counted, 1, shape), sequences(reward, 1, shape), 0)
    sums = transitions.sum_rows(torch.where(transitions.slot >= 0, reward_seq, 0))
    n_seq = reward_seq.shape[0]
    start_slot = transitions.valid.long().cumsum(1) - 1
    flat = torch.arange(n_seq, device=start_slot.device).unsqueeze(1) * transitions.width + start_slot
    chosen = rows_of(flat, 1, shape)[mask]
    env, _, agent = mask.nonzero(as_tuple=True)
    now = rows.select(*_NOW_KEYS, strict=False)[mask]
    nxt = after.select(*_NEXT_KEYS, strict=False)[env, transitions.end[chosen], agent]
    nxt.set(keys.REWARD, sums[chosen].to(reward.dtype).reshape(nxt.get(keys.REWARD).shape))
    n = int(mask.sum())
    return TensorDict(
        {group_name: now, keys.NEXT: TensorDict({group_name: nxt}, batch_size=[n])},
        batch_size=[n],
        device=data.device,
    )


def _select_transitions(experience: TensorDictBase, group_name: str, index: torch.Tensor) -> TensorDict:
    now = experience.get(group_name).select(*_NOW_KEYS, strict=False)[index]
    nxt = experience.get((keys.NEXT, group_name)).select(*_NEXT_KEYS, strict=False)[index]
    n = int(index.sum())
    return TensorDict(
        {group_name: now, keys.NEXT: TensorDict({group_name: nxt}, batch_size=[n])},
        batch_size=[n],
        device=experience.device,
    )


def terminate_truncated(transitions: TensorDictBase, group_name: str) -> None:
    """Mark every ended transition of ``group_name`` terminal in place: ``("next", group, "terminated")`` := ``done``."""
    after = transitions.get((keys.NEXT, group_name))
    if keys.DONE in after.keys():
        after.set(keys.TERMINATED, after.get(keys.DONE).clone())


def _path(key: str | tuple[str, ...]) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def linear_schedule(start: float, end: float, frames: int, decay_frames: int) -> float:
    """``start`` moved linearly to ``end`` over ``decay_frames`` frames (``end`` from then on)."""
    if decay_frames == 0:
        return end
    return start + min(1.0, frames / decay_frames) * (end - start)


def require_whole_group(
    binding_id: str, algorithm: str, table: BindingTable, group_name: str, why: str, hint: str = ""
) -> None:
    """Fail unless ``binding_id`` controls every agent of ``group_name`` in every env copy.

    A centralized critic's losses re-compute every agent's action with this binding's actor, and
    a mixer mixes every agent's utility: both are only right when no other binding acts in the group.
    """
    possible = list(table.env_spec.possible_agents)
    agents = list(table.env_spec.groups[group_name].agents)
    maps = [("agent_binding_map", table.agent_binding_map)]
    maps += [(f"agent_binding_map.per_env[{e}]", m) for e, m in sorted(table.per_env_maps.items())]
    for where, agent_map in maps:
        others = {agent: agent_map[possible.index(agent)] for agent in agents}
        given = ", ".join(f"{agent!r} to {owner!r}" for agent, owner in others.items() if owner != binding_id)
        if given:
            raise ValueError(
                f"binding {binding_id!r}: algorithm {algorithm} {why} needs the binding to control every agent of "
                f"group {group_name!r}, but {where} gives {given}; map all of {agents} to {binding_id!r}{hint}"
            )


@dataclass(kw_only=True)
class OffPolicyAlgorithm(Algorithm):
    """The hyper-parameters every off-policy algorithm shares: replay, target networks, clipping."""

    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak weight of the online networks in each soft target update."""
    batch_size: int = 256
    """Transitions per sampled batch (rows; env steps for a centralized critic or a mixer)."""
    buffer_size: int = 100_000
    """Capacity of the binding's replay buffer (transitions; oldest overwritten)."""
    learning_starts: int = 1_000
    """No gradient step until the buffer holds this many transitions (on every process)."""
    updates_per_iteration: int = 8
    """Sampled batches (= optimizer steps) per training iteration."""
    loss_function: Literal["l2", "l1", "smooth_l1"] = "l2"
    """TD-error loss: ``l2``, ``l1`` or ``smooth_l1`` (Huber)."""
    max_grad_norm: float | None = None
    """Clip the gradient norm to this (``null``: no clipping)."""
    update_every: int = 1
    """Learn (store rows and train) on every k-th training iteration only."""
    bootstrap_truncated: bool = True
    """Bootstrap the TD target from the next observation's value when an episode is cut off (``truncated``:
    done, not terminated), as Pardo et al. 2018 argue. ``false`` treats every episode end as terminal (the
    stored ``terminated`` is ``done``), as runs through TorchRL's ``VmasEnv`` do: with ``max_steps`` it sets
    ``terminated`` at the horizon, which is what BenchMARL's VMAS runs learn from."""

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        return (
            *super().hyperparameter_checks(),
            ("gamma", self.gamma, 0 <= self.gamma <= 1, "0 <= gamma <= 1"),
            ("tau", self.tau, 0 < self.tau <= 1, "0 < tau <= 1"),
            ("batch_size", self.batch_size, self.batch_size >= 1, "batch_size >= 1"),
            ("buffer_size", self.buffer_size, self.buffer_size >= self.batch_size, "buffer_size >= batch_size"),
            ("learning_starts", self.learning_starts, self.learning_starts >= 0, "learning_starts >= 0"),
            (
                "updates_per_iteration",
                self.updates_per_iteration,
                self.updates_per_iteration >= 1,
                "updates_per_iteration >= 1",
            ),
            (
                "loss_function",
                self.loss_function,
                self.loss_function in ("l2", "l1", "smooth_l1"),
                'loss_function in ("l2", "l1", "smooth_l1")',
            ),
            (
                "max_grad_norm",
                self.max_grad_norm,
                self.max_grad_norm is None or self.max_grad_norm > 0,
                "max_grad_norm is None or max_grad_norm > 0",
            ),
            ("update_every", self.update_every, self.update_every >= 1, "update_every >= 1"),
        )

    def check_binding(self, binding_id: str, policy: Policy, table: BindingTable) -> None:
        trainer = cast(type[OffPolicyUnitTrainer], self.trainer_class)
        if trainer.reads_whole_group(policy) and table.env_spec.turn_based:
            # A joint transition per env step mixes the agents' values at one step, but in a
            # turn-based env each agent's transition runs from its own turn to its next one.
            raise ValueError(
                f"binding {binding_id!r}: algorithm {self.name} learns from joint transitions of the whole group "
                f"(a centralized critic or a mixer), which turn-based env {table.env_spec.name!r} does not have "
                "(one agent acts per step); use a local critic, DQN or PPO"
            )
        if trainer.reads_whole_group(policy):
            why, hint = trainer.whole_group_reason
            require_whole_group(binding_id, self.name, table, policy.group.name, why, hint)


class OffPolicyUnitTrainer(UnitTrainer):
    """The off-policy learner of one binding: replay buffer, sampled updates, target networks, counters.

    Subclasses set `loss_name` and implement `_make_loss` (a TorchRL loss with target
    parameters, finished with `_td0`); they may override [`exploration`][lightmarl.algorithms.off_policy.OffPolicyUnitTrainer.exploration] (a schedule the
    policy explores with), `_batch_metrics`, `_last_batch_metrics` and `_make_target_updater`.
    """

    config: OffPolicyAlgorithm
    loss: LossModule
    target_updater: SoftUpdate | HardUpdate
    #: the loss name that selects rows (``loss_profiles`` refer to it).
    loss_name: str
    #: why a learner that reads the whole group ([`reads_whole_group`][lightmarl.algorithms.off_policy.OffPolicyUnitTrainer.reads_whole_group]) must control it, and a hint.
    whole_group_reason: ClassVar[tuple[str, str]] = ("reads every agent of its group and", "")

    def _build(self) -> None:
        self.loss_names = (self.loss_name,)
        #: store joint transitions ``[N, agents]`` (centralized critic) instead of rows ``[N]``.
        self.joint = self.reads_whole_group(self.policy)
        self.update_every = self.config.update_every
        #: turn-based envs: a replay entry is written when the agent's transition closes.
        self.turn_based = self.table.env_spec.turn_based
        #: where each update's rows come from (turn-based: with the transitions earlier rollouts left open).
        self.rollout_rows: RolloutRows = rollout_rows(
            self.group.name, self.table.index[self.binding_id], turn_based=self.turn_based and not self.joint
        )
        self.device = torch.device("cpu")
        self.replay = self._make_replay()
        self.frames = 0
        self.grad_steps = 0
        self.updates = 0
        self.loss = self._make_loss()
        # The target networks start as copies of the online ones.
        self.target_updater = self._make_target_updater()
        self._set_exploration()

    @classmethod
    def reads_whole_group(cls, policy: Policy) -> bool:
        """Whether the learner reads every agent of the group at once (then it must control the whole group)."""
        del policy
        return False

    @abstractmethod
    def _make_loss(self) -> LossModule: ...

    def _td0(self, loss: LossModule, masked: bool = False, **tensor_keys: object) -> LossModule:
        """Finish ``loss``: the group's reward/done/terminated/TD-error keys (unless given), a TD(0) target.

        ``masked``: the loss learns only from ``(group, "loss_mask")`` rows (joint transitions).
        """
        g = self.group.name
        defaults = {
            "reward": (g, keys.REWARD),
            "done": (g, keys.DONE),
            "terminated": (g, keys.TERMINATED),
            "priority": (g, keys.TD_ERROR),
        }
        loss.set_keys(**{**defaults, **tensor_keys})
        if masked:
            loss.loss_mask_key = (g, keys.LOSS_MASK)
        loss.make_value_estimator(ValueEstimators.TD0, gamma=self.config.gamma)
        return loss

    def _make_target_updater(self) -> SoftUpdate | HardUpdate:
        return SoftUpdate(self.loss, tau=self.config.tau)

    def restart(self) -> None:
        """New weights: the target networks restart as copies of them and the replay buffer empties.

        The old transitions came from the previous weights' behaviour, and targets of the
        previous weights would bootstrap the new ones from another policy's values.
        """
        self.target_updater = self._make_target_updater()  # copies the online networks into the targets
        self.replay = self._make_replay()
        self.rollout_rows.restart()

    def exploration(self) -> tuple[str, torch.Tensor, float] | None:
        """``(metric name, the policy's exploration buffer, its scheduled value now)``, or ``None`` (no schedule)."""
        return None

    def _set_exploration(self) -> None:
        schedule = self.exploration()
        if schedule is not None:
            schedule[1].fill_(schedule[2])

    # -- plumbing ---------------------------------------------------------------------------
    def _make_replay(self) -> ReplayBuffer:
        return ReplayBuffer(
            storage=LazyTensorStorage(self.config.buffer_size, device=self.device),
            sampler=RandomSampler(),
            batch_size=self.config.batch_size,
        )

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
            # The same transitions in the same slots, and the same write cursor, on the new device.
            self.load_replay_state_dict(self.replay_state_dict())
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

        Rows ``[N]`` (`row_transitions`), or joint ``[N, agents]`` entries
        (`joint_transitions`) when the trainer's critic is centralized.
        """
        g = self.group.name
        rows = self.rollout_rows.take(experience)
        data = rows.data
        mask = rows.learnable(loss_row_mask(data.get(g), self.table, self.loss_name, binding_id=self.binding_id))
        if rows.transitions is not None:
            # Turn-based: the kept tail of open transitions, then this rollout: entries for the transitions that close.
            return closed_transitions(data, g, mask, rows.transitions, rows.counted)
        if not self.joint:
            return row_transitions(data, g, mask)
        self._check_whole_group_rows(data, mask.any(-1))
        return joint_transitions(data, g, mask)

    def _check_whole_group_rows(self, experience: TensorDictBase, steps: torch.Tensor) -> None:
        """Fail when another binding acted in one of the env ``steps`` this learner reads whole."""
        g = self.group.name
        if bool((experience.get((g, keys.BINDING_ID))[steps] != self.table.index[self.binding_id]).any()):
            raise ValueError(
                f"binding {self.binding_id!r}: {self.flavour} needs every agent of group {g!r}, but the rollout has "
                "rows of other bindings in its env steps (did the agent_binding_map change?)"
            )

    def update(
        self,
        experience: TensorDictBase,
        optimizer: torch.optim.Optimizer,
        stepper: GradientStepper,
        *,
        fraction_done: float = 0.0,
    ) -> dict[str, float]:
        del fraction_done  # exploration follows the frames collected, not the budget
        # A NaN reward or observation in replay would poison every later sample: it never gets in.
        transitions = self.guard.finite_transitions(self.transitions(experience))
        if not self.config.bootstrap_truncated:
            terminate_truncated(transitions, self.group.name)
        num_rows = transitions.shape[0]
        if num_rows:
            self.replay.extend(transitions.to(self.device))
        self.frames += int(experience.batch_size.numel())
        metrics: dict[str, float] = {"rows": float(num_rows), "buffer_size": float(len(self.replay))}
        # Every process decides together, so that all take the same optimizer steps.
        if stepper.agree_min(len(self.replay)) >= max(1, self.config.learning_starts):
            metrics.update(self._train(optimizer, stepper))
        self.updates += 1
        schedule = self.exploration()
        if schedule is not None:
            metrics[schedule[0]] = float(schedule[1])  # what the consumed rollout was collected with
            self._set_exploration()  # the next rollout explores with the value for the frames seen so far
        metrics["grad_steps"] = float(self.grad_steps)
        return metrics

    def _train(self, optimizer: torch.optim.Optimizer, stepper: GradientStepper) -> dict[str, float]:
        params = self.parameters()
        means = MetricMeans()
        batch = None
        for _ in range(self.config.updates_per_iteration):
            batch = self.replay.sample().to(self.device)
            terms = dict(self.loss(batch).items())
            self.gradient_step(terms, optimizer, stepper, params)
            self.target_updater.step()
            self.grad_steps += 1
            means.add({**terms, **self._batch_metrics(batch)})
        # Diagnostics that need another forward pass: once per update (on its last batch), not once per step.
        return {**means.means(), **({} if batch is None else self._last_batch_metrics(batch))}

    def _batch_metrics(self, batch: TensorDictBase) -> dict[str, float]:
        """Extra per-batch metrics read after the loss ran on ``batch`` (default: its mean TD error);
        averaged over the update's steps, so only what the loss already computed."""
        td_error = batch.get((self.group.name, keys.TD_ERROR), None)
        return {} if td_error is None else {keys.TD_ERROR: float(td_error.float().mean())}

    def _last_batch_metrics(self, batch: TensorDictBase) -> dict[str, float]:
        """Metrics that cost a forward pass, taken on the update's last batch after its step (default: none)."""
        del batch
        return {}

    # -- state ------------------------------------------------------------------------------
    #: prefixes of the loss's ``state_dict`` entries that a checkpoint keeps: the target networks
    #: (built as copies of the policy before a resumed run loads its weights, so they must be saved).
    saved_networks: tuple[str, ...] = ("target_",)

    def state_dict(self) -> dict:
        """Counters and the loss's networks of `saved_networks` (the replay buffer is not saved)."""
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

    def replay_state_dict(self) -> dict:
        """The replay buffer's transitions in storage order, on the CPU, and its writer's cursor.

        Tensors and plain data only (loadable with ``weights_only=True``): every leaf under its key
        path, and the batch size of every nested TensorDict (a joint transition's group is
        ``[N, agents]``). Restored in the same slots with the same cursor, the buffer samples and
        overwrites as the saved one would have.
        """
        count = len(self.replay)
        data = self.replay.storage[:count] if count else TensorDict({}, batch_size=[0])
        return {
            "open_transitions": self.rollout_rows.state_dict(),
            "count": count,
            "writer": self.replay.writer.state_dict(),
            # Copies: a slice of the storage would save the whole preallocated storage (buffer_size slots).
            "entries": [(_path(key), value.to("cpu", copy=True)) for key, value in data.items(True, True)],
            "batch_sizes": [
                (_path(key), list(value.batch_size)) for key, value in data.items(True) if is_tensor_collection(value)
            ],
        }

    def load_replay_state_dict(self, state: dict) -> None:
        self.rollout_rows.load_state_dict(state.get("open_transitions", {}))
        self.replay = self._make_replay()
        count = int(state["count"])
        if not count:
            return
        batch_sizes = {(): [count], **{tuple(k): b for k, b in state["batch_sizes"]}}
        # The leaves in their saved order, nested as dicts: the rebuilt TensorDicts keep the original key order.
        tree: dict = {}
        for key, value in state["entries"]:
            node = tree
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = value.to(self.device)

        def nested(node: dict, prefix: tuple[str, ...]) -> TensorDict:
            # Each TensorDict with its own batch size (a joint transition's group is [N, agents]).
            fields = {k: nested(v, (*prefix, k)) if isinstance(v, dict) else v for k, v in node.items()}
            return TensorDict(fields, batch_size=batch_sizes[prefix], device=self.device)

        self.replay.extend(nested(tree, ()))
        self.replay.writer.load_state_dict(state["writer"])

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
        self._set_exploration()
