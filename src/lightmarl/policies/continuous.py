"""Actor-critic policies for continuous (``Box``) actions, trained off-policy by SAC and DDPG.

Both policies act on the encoder's features of each row's own observation (decentralised
actors) and carry Q critics ``Q(s, a)`` for their algorithm:

* [`SACActorCritic`][lightmarl.policies.continuous.SACActorCritic]: a stochastic tanh-normal actor and ``num_qvalue_nets`` (twin) Q critics,
  for [`lightmarl.algorithms.SAC`][lightmarl.algorithms.sac.SAC].
* [`DeterministicActorCritic`][lightmarl.policies.continuous.DeterministicActorCritic]: a deterministic actor with Gaussian exploration noise and
  one Q critic, for [`lightmarl.algorithms.DDPG`][lightmarl.algorithms.ddpg.DDPG].

The critic is ``local`` (each row's own observation and action: ISAC / IDDPG) or
``centralized`` (every agent's observation and action of the group: MASAC / MADDPG, Lowe et al.
2017). A centralized critic has one value per agent (``critic_value: per_agent``, so agents with
different rewards get different values) or one value for the whole group, given to every agent
(``critic_value: group``: BenchMARL's ``share_param_critic: true``, the layout of TorchRL's
``MultiAgentMLP(centralized=True, share_params=True)`` and of MAPPO's value network). Critics
write ``(group, "state_action_value")``.

The actor reads the features of the ``encoder`` argument (see `lightmarl.policies.encoders`;
default: flatten), so one encoder object can be handed to several bindings. Each critic reads
its own copy of that encoder, made when the policy is built: the critics' losses never move the
actor's encoder (as Stable-Baselines3's off-policy algorithms do by default).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal
from torchrl.modules.distributions import NormalParamExtractor

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy
from lightmarl.policies.encoders import ACTIVATIONS, Encoded, activation_class, build_encoder, hidden_widths

CriticKind = Literal["local", "centralized"]
CriticValue = Literal["per_agent", "group"]


def _check_continuous(policy: str, group: GroupSpec) -> int:
    """The action size of ``group``, or a ``ValueError`` when its actions are not a 1-D ``Box``."""
    if group.action_kind != "continuous":
        raise ValueError(
            f"{policy} needs continuous (Box) actions; group {group.name!r} has {group.action_kind} actions "
            "(use MLPActorCritic or QNetworkPolicy for discrete actions)"
        )
    if len(group.action_shape) != 1:
        raise ValueError(f"{policy} needs 1-D Box actions; group {group.name!r} has shape {group.action_shape}")
    return int(group.action_shape[0])


def _check_common(hidden_sizes: Sequence[int], activation: str, critic: str, critic_value: str) -> None:
    activation_class(activation, "policy_kwargs.activation")
    if critic not in ("local", "centralized"):
        raise ValueError(f"policy_kwargs.critic: {critic!r} is not one of ['local', 'centralized']")
    if critic_value not in ("per_agent", "group"):
        raise ValueError(f"policy_kwargs.critic_value: {critic_value!r} is not one of ['per_agent', 'group']")
    if critic_value == "group" and critic != "centralized":
        raise ValueError(
            "policy_kwargs.critic_value: 'group' (one value for the whole group) needs critic: centralized; "
            f"a {critic} critic reads one agent's row and values that agent only"
        )
    if not hidden_widths(hidden_sizes, "policy_kwargs.hidden_sizes"):
        raise ValueError(f"policy_kwargs.hidden_sizes: expected positive widths, got {list(hidden_sizes)!r}")


def _bounds(group: GroupSpec) -> tuple[torch.Tensor, torch.Tensor]:
    low = torch.tensor(group.action_low, dtype=torch.float32).view(group.action_shape)
    high = torch.tensor(group.action_high, dtype=torch.float32).view(group.action_shape)
    if not (torch.isfinite(low).all() and torch.isfinite(high).all() and (high > low).all()):
        raise ValueError(
            f"group {group.name!r}: continuous-action policies need finite bounds with high > low; got "
            f"low={group.action_low}, high={group.action_high}"
        )
    return low, high


class LocalQNetwork(nn.Module):
    """``Q(o_i, a_i)``: an MLP on one row's features and action, ``[*batch, 1]``.

    Args:
        encoder: observation -> features (``out_features`` of them).
        action_dim: size of an action.
        hidden_sizes: widths of the hidden layers.
        activation: hidden activation class.
    """

    def __init__(
        self, encoder: nn.Module, action_dim: int, hidden_sizes: Sequence[int], activation: type[nn.Module]
    ) -> None:
        super().__init__()
        self.encoder = encoder
        features = int(encoder.out_features)  # type: ignore[arg-type]
        self.net = MLP(features + action_dim, 1, num_cells=list(hidden_sizes), activation_class=activation)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([self.encoder(observation), action], dim=-1))


class CentralizedQNetwork(nn.Module):
    """``Q_i(o_1..o_n, a_1..a_n)`` for every agent ``i`` of the group: ``[*batch, agents, 1]``.

    One MLP reads every agent's features and action (concatenated in the group's agent order).
    ``group_value=False``: one output per agent, so agents with different rewards get different
    values. ``group_value=True``: one output, the group's value, given to every agent; trained on
    every agent's TD target, it learns their mean (BenchMARL's MADDPG and MASAC critics with
    ``share_param_critic: true``).

    Args:
        encoder: observation -> features (``out_features`` of them), applied per agent.
        num_agents: agents in the group.
        action_dim: size of one agent's action.
        hidden_sizes: widths of the hidden layers.
        activation: hidden activation class.
        group_value: one value for the group instead of one per agent.
    """

    def __init__(
        self,
        encoder: nn.Module,
        num_agents: int,
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: type[nn.Module],
        group_value: bool = False,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.num_agents = num_agents
        self.group_value = group_value
        self.in_per_agent = int(encoder.out_features) + action_dim  # type: ignore[arg-type]
        outputs = 1 if group_value else num_agents
        self.net = MLP(
            num_agents * self.in_per_agent, outputs, num_cells=list(hidden_sizes), activation_class=activation
        )

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        joint = torch.cat([self.encoder(observation), action], dim=-1)
        if joint.shape[-2:] != (self.num_agents, self.in_per_agent):
            raise ValueError(
                f"CentralizedQNetwork: expected whole-group rows [*batch, {self.num_agents}, ...], got observations "
                f"{tuple(observation.shape)}; a centralized critic reads every agent of its group at once"
            )
        values = self.net(joint.flatten(-2))  # [*batch, agents] or [*batch, 1]
        return values.expand(*values.shape[:-1], self.num_agents).unsqueeze(-1)


def _make_critic(
    group: GroupSpec,
    critic: CriticKind,
    encoder: nn.Module,
    action_dim: int,
    hidden_sizes: Sequence[int],
    activation: type[nn.Module],
    critic_value: CriticValue = "per_agent",
) -> TensorDictModule:
    net: nn.Module
    if critic == "centralized":
        net = CentralizedQNetwork(
            copy.deepcopy(encoder),
            group.num_agents,
            action_dim,
            hidden_sizes,
            activation,
            group_value=critic_value == "group",
        )
    else:
        net = LocalQNetwork(copy.deepcopy(encoder), action_dim, hidden_sizes, activation)
    return TensorDictModule(
        net,
        in_keys=[(group.name, keys.OBSERVATION), (group.name, keys.ACTION)],
        out_keys=[(group.name, keys.STATE_ACTION_VALUE)],
    )


class _BoundedTanh(nn.Module):
    """Squashes pre-activations into ``[low, high]``: ``low + (high - low) * (tanh(x) + 1) / 2``."""

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("low", low, persistent=False)
        self.register_buffer("high", high, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.low + (self.high - self.low) * (torch.tanh(x) + 1) / 2


class SACActorCritic(Policy):
    """Tanh-normal actor with ``num_qvalue_nets`` Q critics, for SAC (Haarnoja et al. 2018).

    ``forward`` writes ``(group, "loc")``, ``(group, "scale")``, ``(group, "action")`` and
    ``(group, "action_log_prob")``: under ``ExplorationType.RANDOM`` (collection) the action is
    sampled from the tanh-normal (rescaled to the action bounds) with its log-probability; under
    any other exploration type (evaluation) it is the distribution's deterministic action.

    The critics share one architecture (``qvalue``, a ``TensorDictModule`` template writing
    ``(group, "state_action_value")``) and hold their weights stacked along a leading dim in
    ``qvalue_params`` (one slice per critic), the layout TorchRL's ``SACLoss`` trains with
    ``torch.vmap``; [`state_action_values`][lightmarl.policies.continuous.SACActorCritic.state_action_values] runs every critic. The template's own weights
    are placeholders on the ``meta`` device: run it only under ``qvalue_params.to_module``.

    Args:
        group: the agent group this policy acts for (continuous 1-D ``Box`` actions).
        hidden_sizes: widths of the hidden layers of actor and critics.
        activation: hidden activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
        critic: ``local`` (ISAC) or ``centralized`` (MASAC: every agent of the group in).
        num_qvalue_nets: critics (2: clipped double-Q, the smaller target value is used).
        encoder: observation -> features before the actor (see `lightmarl.policies.encoders`;
            default: flatten), e.g. one shared with other bindings; each critic reads a copy.
        critic_value: a centralized critic's values: ``per_agent`` (one per agent) or ``group`` (one for the
            group, given to every agent; BenchMARL's ``share_param_critic: true``).
    """

    def __init__(
        self,
        group: GroupSpec,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: Literal["tanh", "relu", "elu", "gelu"] = "relu",
        critic: CriticKind = "local",
        num_qvalue_nets: int = 2,
        encoder: nn.Module | Mapping[str, Any] | None = None,
        critic_value: CriticValue = "per_agent",
    ) -> None:
        super().__init__(group)
        action_dim = _check_continuous(type(self).__name__, group)
        _check_common(hidden_sizes, activation, critic, critic_value)
        if not isinstance(num_qvalue_nets, int) or num_qvalue_nets < 1:
            raise ValueError(f"policy_kwargs.num_qvalue_nets: expected a positive integer, got {num_qvalue_nets!r}")
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.critic_kind: CriticKind = critic
        self.critic_value: CriticValue = critic_value
        self.num_qvalue_nets = num_qvalue_nets
        act = ACTIVATIONS[activation]
        low, high = _bounds(group)
        encoder_module = build_encoder(group, encoder, field="policy_kwargs.encoder")
        loc, scale = self.key(keys.LOC), self.key(keys.SCALE)
        net = Encoded(
            encoder_module,
            nn.Sequential(
                MLP(
                    encoder_module.out_features, 2 * action_dim, num_cells=list(self.hidden_sizes), activation_class=act
                ),
                NormalParamExtractor(),
            ),
        )
        self.actor = ProbabilisticActor(
            TensorDictModule(net, in_keys=[self.key(keys.OBSERVATION)], out_keys=[loc, scale]),
            in_keys={"loc": loc, "scale": scale},
            out_keys=[self.key(keys.ACTION)],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": low, "high": high},
            return_log_prob=True,
            log_prob_key=self.key(keys.ACTION_LOG_PROB),
        )
        critics = [
            _make_critic(group, critic, encoder_module, action_dim, self.hidden_sizes, act, critic_value)
            for _ in range(num_qvalue_nets)
        ]
        self.qvalue_params = TensorDict.from_modules(*critics, as_module=True)
        template = critics[0]
        # The template is structure only: its weights come from `qvalue_params` at every call.
        TensorDict.from_module(template).data.to("meta").to_module(template)
        self.__dict__["_qvalue"] = template  # not a submodule: its placeholders stay out of the state_dict

    @property
    def qvalue(self) -> TensorDictModule:
        """The critics' architecture (weights in `qvalue_params`)."""
        return self.__dict__["_qvalue"]

    @property
    def action_dim(self) -> int:
        return int(self.group.action_shape[0])

    def state_action_values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """Every critic's ``Q(s, a)`` for the group's observation and action: ``[num_qvalue_nets, *batch, 1]``."""
        inputs = tensordict.select(*self.qvalue.in_keys)
        values = []
        for params in self.qvalue_params.unbind(0):
            with params.to_module(self.qvalue):
                values.append(self.qvalue(inputs.clone(False)).get(self.key(keys.STATE_ACTION_VALUE)))
        return torch.stack(values)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.actor(tensordict)


class DeterministicActorCritic(Policy):
    """Deterministic actor with Gaussian exploration noise and one Q critic, for DDPG (Lillicrap et al. 2016).

    The actor (``actor``, a ``TensorDictModule``) maps each row's features to an action inside
    the bounds (a tanh rescaled to ``[low, high]``). ``forward`` writes ``(group, "action")`` and
    ``(group, "action_log_prob")``: under ``ExplorationType.RANDOM`` (collection) Gaussian noise
    of standard deviation ``exploration_noise x (high - low)`` is added and the action clipped to
    the bounds; the log-probability is the noise density of the unclipped action. Under any other
    exploration type (evaluation) the action is the actor's and its log-probability 0.

    ``exploration_noise`` is a buffer (saved with the policy) that
    [`lightmarl.algorithms.DDPG`][lightmarl.algorithms.ddpg.DDPG] anneals during training. The critic is ``qvalue``, a
    ``TensorDictModule`` writing ``(group, "state_action_value")``.

    Args:
        group: the agent group this policy acts for (continuous 1-D ``Box`` actions).
        hidden_sizes: widths of the hidden layers of actor and critic.
        activation: hidden activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
        critic: ``local`` (IDDPG) or ``centralized`` (MADDPG: every agent of the group in).
        exploration_noise: noise standard deviation as a fraction of the action range, until a trainer sets it.
        encoder: observation -> features before the actor (see `lightmarl.policies.encoders`;
            default: flatten), e.g. one shared with other bindings; the critic reads a copy.
        critic_value: a centralized critic's values: ``per_agent`` (one per agent) or ``group`` (one for the
            group, given to every agent; BenchMARL's ``share_param_critic: true``).
    """

    exploration_noise: torch.Tensor
    _action_range: torch.Tensor
    _low: torch.Tensor
    _high: torch.Tensor

    def __init__(
        self,
        group: GroupSpec,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: Literal["tanh", "relu", "elu", "gelu"] = "relu",
        critic: CriticKind = "local",
        exploration_noise: float = 0.1,
        encoder: nn.Module | Mapping[str, Any] | None = None,
        critic_value: CriticValue = "per_agent",
    ) -> None:
        super().__init__(group)
        action_dim = _check_continuous(type(self).__name__, group)
        _check_common(hidden_sizes, activation, critic, critic_value)
        if not exploration_noise >= 0:
            raise ValueError(f"policy_kwargs.exploration_noise: expected a value >= 0, got {exploration_noise!r}")
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.critic_kind: CriticKind = critic
        self.critic_value: CriticValue = critic_value
        act = ACTIVATIONS[activation]
        low, high = _bounds(group)
        self.register_buffer("exploration_noise", torch.tensor(float(exploration_noise)))
        self.register_buffer("_action_range", high - low, persistent=False)
        self.register_buffer("_low", low, persistent=False)
        self.register_buffer("_high", high, persistent=False)
        encoder_module = build_encoder(group, encoder, field="policy_kwargs.encoder")
        net = Encoded(
            encoder_module,
            nn.Sequential(
                MLP(encoder_module.out_features, action_dim, num_cells=list(self.hidden_sizes), activation_class=act),
                _BoundedTanh(low, high),
            ),
        )
        self.actor = TensorDictModule(net, in_keys=[self.key(keys.OBSERVATION)], out_keys=[self.key(keys.ACTION)])
        self.qvalue = _make_critic(group, critic, encoder_module, action_dim, self.hidden_sizes, act, critic_value)

    def set_exploration_noise(self, value: float) -> None:
        self.exploration_noise.fill_(value)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.actor(tensordict)
        action = tensordict.get(self.key(keys.ACTION))
        sigma = self.exploration_noise.to(action.dtype) * self._action_range
        if exploration_type() == ExplorationType.RANDOM and bool(self.exploration_noise > 0):
            noise = torch.randn_like(action) * sigma
            # Density of the Gaussian noise that was drawn (clipping to the bounds is not accounted for).
            log_prob = (-0.5 * (noise / sigma) ** 2 - sigma.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
            action = torch.maximum(torch.minimum(action + noise, self._high), self._low)
        else:
            log_prob = torch.zeros(action.shape[:-1], dtype=action.dtype, device=action.device)
        tensordict.set(self.key(keys.ACTION), action)
        tensordict.set(self.key(keys.ACTION_LOG_PROB), log_prob)
        return tensordict

    def extra_repr(self) -> str:
        return f"exploration_noise={float(self.exploration_noise):.3g}"
