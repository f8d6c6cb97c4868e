"""QMIX and VDN: one binding's team of agents learns a joint action value, decomposed per agent.

Sunehag et al. 2018 (VDN: the team's action value is the sum of the agents' utilities);
Rashid et al. 2018 (QMIX: a mixing network, monotonic in each utility, whose weights a
hyper-network computes from the global state). Each agent acts greedily on its own utility
(decentralised execution) while the loss is a TD error on the mixed team value (centralised
training). The policy is a [`QNetworkPolicy`][lightmarl.policies.qnet.QNetworkPolicy]: one utility
network shared by the group's agents, acting epsilon-greedily.

Built on TorchRL: `QMixerLoss` (TD(0) target from the
target utility network and target mixer), `QMixer` /
`VDNMixer`, `SoftUpdate` /
`HardUpdate`; the replay path is
[`OffPolicyUnitTrainer`][lightmarl.algorithms.off_policy.OffPolicyUnitTrainer]'s, with one *joint* transition per
(env copy, step) of the team:

* ``(group, observation/action/action_mask/valid + row annotations)`` ``[N, agents]``, and
  ``("next", group, observation/action_mask/valid)``, where the next ``valid`` is "present and
  not terminated": the agents whose utility enters the bootstrap (an absent agent's utility
  enters either mix as 0);
* the team signals at the root of ``"next"``: ``reward`` (the agents' rewards averaged, or
  summed, over the agents that acted), ``done`` (every agent that acted is done: the episode is
  over for the team), ``terminated`` (every agent that acted terminated: no bootstrap);
* for QMIX, the mixer's input ``"state"`` and ``("next", "state")``: the env's global state where
  the env records it (``PettingZooEnvConfig.state``), else the group's observations side by side.

The binding must control every agent of its group in every env copy: the mixer needs the whole
team's transition, so a recipe that gives some of the group to another binding fails at setup.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.modules.models.multiagent import Mixer, QMixer, VDNMixer
from torchrl.objectives import LossModule
from torchrl.objectives.multiagent import QMixerLoss

from lightmarl import keys
from lightmarl.algorithms.base import loss_row_mask
from lightmarl.algorithms.dqn import DQN, DQNUnitTrainer
from lightmarl.algorithms.off_policy import TRANSITION_ANNOTATIONS
from lightmarl.policies.base import Policy


class PresentAgentsMixer(nn.Module):
    """A TorchRL mixer over the agents present: an absent agent's utility enters the mix as 0.

    Args:
        mixer: the mixer, reading ``[*B, agents, 1]`` utilities (and a state if it needs one).
    """

    def __init__(self, mixer: Mixer) -> None:
        super().__init__()
        self.mixer = mixer

    def forward(
        self, chosen_action_value: torch.Tensor, present: torch.Tensor, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        utilities = chosen_action_value * present.unsqueeze(-1).to(chosen_action_value.dtype)
        return self.mixer(utilities) if state is None else self.mixer(utilities, state)


class BootstrapActionValue(TensorDictModuleBase):
    """Double Q's bootstrap: the action values at ``(group, "bootstrap_action")`` where the input has one.

    Follows the Q-network in the loss's utility network; the loss runs it with the target
    parameters on the next observation, where the online network's greedy action was put, so
    the target network values the online network's choice (van Hasselt et al. 2016).
    """

    def __init__(self, group_name: str) -> None:
        super().__init__()
        self.group_name = group_name
        self.in_keys = [(group_name, keys.ACTION_VALUE), (group_name, keys.BOOTSTRAP_ACTION)]
        self.out_keys = [(group_name, keys.CHOSEN_ACTION_VALUE)]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get((self.group_name, keys.BOOTSTRAP_ACTION), None)
        if action is not None:
            values = tensordict.get((self.group_name, keys.ACTION_VALUE))
            tensordict.set((self.group_name, keys.CHOSEN_ACTION_VALUE), values.gather(-1, action.unsqueeze(-1)))
        return tensordict


class DoubleQMixerLoss(QMixerLoss):
    """`QMixerLoss` with double-Q targets.

    Before the TD(0) target is computed, the online utility network picks each agent's greedy
    (legal) next action; the utility network, ending in `BootstrapActionValue`, is then
    valued at those actions with the target parameters, and the target mixer mixes them.
    """

    def forward(self, tensordict: TensorDictBase) -> TensorDict:  # type: ignore[override]
        network = self.local_value_network
        next_td = tensordict.get(keys.NEXT)
        with torch.no_grad(), self.local_value_network_params.to_module(network, preserve_module_state=False):
            greedy = network(next_td.select(*network.in_keys, strict=False))
        action_key = self.tensor_keys.action  # (group, "action") -> (group, "bootstrap_action")
        bootstrap_key = (
            (*action_key[:-1], keys.BOOTSTRAP_ACTION) if isinstance(action_key, tuple) else keys.BOOTSTRAP_ACTION
        )
        next_td.set(bootstrap_key, greedy.get(action_key))
        return super().forward(tensordict)


class ValueDecompositionUnitTrainer(DQNUnitTrainer):
    """Runs [`QMIX`][lightmarl.algorithms.value_decomposition.QMIX] / [`VDN`][lightmarl.algorithms.value_decomposition.VDN] for one binding: joint replay, utility network + mixer, targets, epsilon.

    The epsilon schedule, target updates and optimizer are DQN's; the loss, the transitions
    and the parameters differ. The mixer belongs to this trainer: its parameters are in
    [`parameters`][lightmarl.algorithms.base.UnitTrainer.parameters] (so in the optimizer) and its weights in [`state_dict`][lightmarl.algorithms.off_policy.OffPolicyUnitTrainer.state_dict] (so in
    checkpoints).
    """

    config: ValueDecomposition
    whole_group_reason = ("(value decomposition mixes the utilities of every agent of the group)", "")

    def _build(self) -> None:
        self.loss_name = self.config.loss_name
        super()._build()

    @classmethod
    def reads_whole_group(cls, policy: Policy) -> bool:
        return True  # the mixer reads the team's joint transitions

    @property
    def flavour(self) -> str:
        return self.config.name + (" (double Q)" if self.config.double_dqn else "")

    def _make_loss(self) -> LossModule:
        # DQN's epsilon schedule, target updates and optimizer; a QMixerLoss over the same utility network.
        g = self.group.name
        config = self.config
        self.state_shape = self._mixer_state_shape()
        self.mixer = config.make_mixer(self.group.num_agents, self.state_shape)
        state_in = [keys.STATE] if config.needs_state else []
        #: ``(group, chosen_action_value)`` + ``(group, valid)`` (+ ``state``) -> ``team_action_value``.
        self.mixer_module = TensorDictModule(
            PresentAgentsMixer(self.mixer),
            in_keys=[(g, keys.CHOSEN_ACTION_VALUE), (g, keys.VALID), *state_in],
            out_keys=[keys.TEAM_ACTION_VALUE],
        )
        utilities: TensorDictModuleBase = self.qvalue
        loss_class = QMixerLoss
        if config.double_dqn:
            utilities = TensorDictSequential(self.qvalue, BootstrapActionValue(g))
            loss_class = DoubleQMixerLoss
        loss = loss_class(
            utilities,
            self.mixer_module,
            loss_function=config.loss_function,
            delay_value=True,
            action_space="categorical",
        )
        # The team's signals sit at the root of the joint transitions.
        return self._td0(
            loss,
            local_value=(g, keys.CHOSEN_ACTION_VALUE),
            global_value=keys.TEAM_ACTION_VALUE,
            action_value=(g, keys.ACTION_VALUE),
            action=(g, keys.ACTION),
            reward=keys.REWARD,
            done=keys.DONE,
            terminated=keys.TERMINATED,
            priority=keys.TD_ERROR,
        )

    def _mixer_state_shape(self) -> tuple[int, ...]:
        """The env's global state shape where the env records it, else the group's observations side by side."""
        if self.table.env_spec.state_shape is not None:
            return tuple(self.table.env_spec.state_shape)
        return (self.group.num_agents * math.prod(self.group.observation_shape),)

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        # The shared utility network and the mixer (VDN's has none); epsilon is a buffer.
        return [(self.own_parameters([self.qvalue, self.mixer]), self.config.lr)]

    # -- data path --------------------------------------------------------------------------
    def transitions(self, experience: TensorDictBase) -> TensorDict:
        """The team's joint transitions ``[N]`` (rows ``[N, agents]``) of the env steps this loss may learn from.

        A step is kept when at least one of its rows passes the loss filter (present, profile
        includes the loss, trainable, this binding); every agent of the group comes along.
        """
        g = self.group.name
        rows = experience.get(g)
        per_agent = loss_row_mask(rows, self.table, self.loss_name, binding_id=self.binding_id)
        steps = per_agent.any(-1)  # [envs, time]
        self._check_whole_group_rows(experience, steps)
        now = rows.select(keys.OBSERVATION, keys.ACTION, keys.ACTION_MASK, *TRANSITION_ANNOTATIONS, strict=False)
        now = now[steps]
        present = now.get(keys.VALID)
        after = experience.get((keys.NEXT, g))[steps]
        reward = after.get(keys.REWARD).squeeze(-1)
        terminated = after.get(keys.TERMINATED).squeeze(-1)
        team_reward = (reward * present).sum(-1, keepdim=True)
        if self.config.team_reward == "mean":
            team_reward = team_reward / present.sum(-1, keepdim=True).clamp_min(1)
        nxt = after.select(keys.OBSERVATION, keys.ACTION_MASK, strict=False)
        nxt.set(keys.VALID, present & ~terminated)  # whose utility enters the bootstrap
        n = int(steps.sum())
        next_root = {
            g: nxt,
            keys.REWARD: team_reward,
            # Over for the team once every agent that acted is done; no bootstrap once all terminated.
            keys.DONE: (after.get(keys.DONE).squeeze(-1) | ~present).all(-1, keepdim=True),
            keys.TERMINATED: (terminated | ~present).all(-1, keepdim=True),
        }
        root: dict[str, Any] = {g: now}
        if self.config.needs_state:
            state, next_state = self._states(experience)
            root[keys.STATE], next_root[keys.STATE] = state[steps], next_state[steps]
        root[keys.NEXT] = TensorDict(next_root, batch_size=[n])
        return TensorDict(root, batch_size=[n], device=experience.device)

    def _states(self, experience: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(state, next state)`` ``[envs, time, *state_shape]``: the env's, or the observations side by side."""
        g = self.group.name
        if self.table.env_spec.state_shape is None:
            # [envs, time, agents, *obs] -> [envs, time, agents * prod(obs)]
            # uint8 observations are stored as such; the mixer reads float32
            return (
                experience.get((g, keys.OBSERVATION)).flatten(2).to(torch.float32),
                experience.get((keys.NEXT, g, keys.OBSERVATION)).flatten(2).to(torch.float32),
            )
        state = experience.get(keys.STATE, None)
        next_state = experience.get((keys.NEXT, keys.STATE), None)
        if state is None or next_state is None:
            raise ValueError(
                f"binding {self.binding_id!r}: the env spec has a global state {self.state_shape} but the experience "
                f"has no {keys.STATE!r} / ('next', {keys.STATE!r}) entries to feed {self.config.name}'s mixer"
            )
        return state, next_state

    @torch.no_grad()
    def team_action_value(self, transitions: TensorDictBase) -> torch.Tensor:
        """The mixed value ``[N]`` of each transition's joint action, with the online utility network and mixer."""
        g = self.group.name
        td = transitions.clone(recurse=False)
        self.qvalue(td)  # writes the greedy action into the copy only
        chosen = td.get((g, keys.ACTION_VALUE)).gather(-1, transitions.get((g, keys.ACTION)).unsqueeze(-1))
        td.set((g, keys.CHOSEN_ACTION_VALUE), chosen)
        return self.mixer_module(td).get(keys.TEAM_ACTION_VALUE).squeeze(-1)

    def _batch_metrics(self, batch: TensorDictBase) -> dict[str, float]:
        return {keys.TD_ERROR: float(batch.get(keys.TD_ERROR).mean())}

    def _last_batch_metrics(self, batch: TensorDictBase) -> dict[str, float]:
        return {"q_team": float(self.team_action_value(batch).mean())}

    # -- state ------------------------------------------------------------------------------
    # The mixer lives in the loss, not in the policy: its weights are checkpointed with the targets.
    saved_networks = ("mixer_network_params.", "target_")


@dataclass(kw_only=True)
class ValueDecomposition(DQN):
    """Value decomposition over the agents of a group: the shared part of [`QMIX`][lightmarl.algorithms.value_decomposition.QMIX] and [`VDN`][lightmarl.algorithms.value_decomposition.VDN].

    Hyper-parameters are [`DQN`][lightmarl.algorithms.dqn.DQN]'s (replay, target network, double
    Q, epsilon schedule), applied to joint transitions (one per env step of the team) instead of
    agent rows; ``updates_per_iteration`` batches of ``batch_size`` joint transitions each. The
    binding must control every agent of its group.
    """

    trainer_class = ValueDecompositionUnitTrainer
    #: the loss name (for ``loss_profiles``).
    loss_name: ClassVar[str]
    #: whether the mixer reads the global state (the transitions then carry it).
    needs_state: ClassVar[bool]

    team_reward: Literal["mean", "sum"] = "mean"
    """The team's reward at a step: ``mean`` (the agents' rewards averaged over those that acted, on the scale of a per-agent return) or ``sum``."""

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        return (
            *super().hyperparameter_checks(),
            ("team_reward", self.team_reward, self.team_reward in ("mean", "sum"), 'team_reward in ("mean", "sum")'),
        )

    @abstractmethod
    def make_mixer(self, num_agents: int, state_shape: tuple[int, ...]) -> Mixer:
        """The mixing network: ``[*B, num_agents, 1]`` utilities (and ``[*B, *state_shape]`` state) -> ``[*B, 1]``."""


@dataclass(kw_only=True)
class QMIX(ValueDecomposition):
    """QMIX (Rashid et al. 2018): a monotonic mixing network conditioned on the global state.

    The mixer is TorchRL's `QMixer`: hyper-networks
    map the state to non-negative weights of a two-layer mix of the agents' utilities, so each
    agent's greedy action is the team's greedy action. The state is the env's global state where
    the env records it (``env.state: true``), else the group's observations side by side. Loss
    name for ``loss_profiles``: ``qmix``.
    """

    loss_name = "qmix"
    needs_state = True

    mixing_embed_dim: int = 32
    """Width of the mixing network's hidden layer."""

    def hyperparameter_checks(self) -> tuple[tuple[str, object, bool, str], ...]:
        return (
            *super().hyperparameter_checks(),
            ("mixing_embed_dim", self.mixing_embed_dim, self.mixing_embed_dim >= 1, "mixing_embed_dim >= 1"),
        )

    def make_mixer(self, num_agents: int, state_shape: tuple[int, ...]) -> Mixer:
        return QMixer(
            state_shape=state_shape, mixing_embed_dim=self.mixing_embed_dim, n_agents=num_agents, device="cpu"
        )


@dataclass(kw_only=True)
class VDN(ValueDecomposition):
    """VDN (Sunehag et al. 2018): the team's action value is the sum of the agents' utilities.

    The mixer is TorchRL's `VDNMixer` (no parameters,
    no state). Loss name for ``loss_profiles``: ``vdn``.
    """

    loss_name = "vdn"
    needs_state = False

    def make_mixer(self, num_agents: int, state_shape: tuple[int, ...]) -> Mixer:
        return VDNMixer(n_agents=num_agents, device="cpu")
