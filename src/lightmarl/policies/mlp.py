"""Neural actor-critic policies built from TorchRL modules."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
from torch import nn
from torch.distributions import Categorical
from torch.nn import functional as F
from torchrl.modules import MLP, MultiAgentMLP, ProbabilisticActor, TanhNormal
from torchrl.modules.distributions import NormalParamExtractor

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy, StackableActor
from lightmarl.policies.distributions import discrete_distribution
from lightmarl.policies.encoders import (
    ACTIVATIONS,
    Encoded,
    FlattenEncoder,
    activation_class,
    build_encoder,
    hidden_widths,
    out_features_of,
)


class MLPActorCritic(Policy):
    """MLP actor (categorical or tanh-normal) with an optional value head.

    The actor is decentralised: each row acts on its own observation. The critic is
    ``centralized`` (MAPPO, Yu et al. 2022: one network reading every agent of the group,
    TorchRL's ``MultiAgentMLP(centralized=True, share_params=True)``), ``local`` (IPPO,
    de Witt et al. 2020: each agent's own observation) or ``none``.

    With ``agent_id_input`` the actor (and a ``local`` critic) also reads which agent a row
    is: a one-hot of the row's position in the group (``agent_id`` mapped through
    ``group.agent_ids``, size ``group.num_agents``) is appended to the observation, so one
    set of weights can act differently per agent (parameter sharing with agent indication,
    as in Terry et al. 2020, "Revisiting Parameter Sharing in Multi-Agent Deep RL"). The
    centralized critic already sees every agent at its own position and is unchanged.

    Args:
        group: the agent group this policy acts for.
        hidden_sizes: widths of the hidden layers of actor and critic.
        activation: hidden activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
        critic: ``centralized``, ``local`` or ``none``.
        agent_id_input: append a one-hot of each row's agent (its position in the group) to
            the observation read by the actor and a ``local`` critic. The actor's rows must then
            carry ``agent_id`` (env observations and stored experience do); the critic, which
            reads whole-group rows, takes the position from the agent dim.
        action_std: continuous actions only: where the tanh-normal's standard deviation (before
            the tanh) comes from. ``state``: a second output of the actor network, per
            observation, ``softplus`` mapped so that a zero output gives ``init_action_std``.
            ``learned``: one parameter per action dimension, independent of the observation
            (``exp(log_std)``, as in Schulman et al.'s PPO for MuJoCo), so the network's whole
            output is the mean.
        init_action_std: the standard deviation at initialisation (continuous actions).
        min_action_std: the lower bound of the standard deviation (continuous actions).
    """

    def __init__(
        self,
        group: GroupSpec,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh",
        critic: Literal["centralized", "local", "none"] = "centralized",
        agent_id_input: bool = False,
        encoder: nn.Module | Mapping[str, Any] | None = None,
        value_network: nn.Module | None = None,
        action_std: Literal["state", "learned"] = "state",
        init_action_std: float = 1.0,
        min_action_std: float = 0.01,
    ) -> None:
        super().__init__(group)
        if action_std not in ("state", "learned"):
            raise ValueError(f"policy_kwargs.action_std: {action_std!r} is not one of ['learned', 'state']")
        if not 0 < min_action_std < init_action_std:
            raise ValueError(
                f"policy_kwargs: expected 0 < min_action_std < init_action_std, got min_action_std={min_action_std!r}, "
                f"init_action_std={init_action_std!r}"
            )
        if action_std != "state" and group.action_kind != "continuous":
            raise ValueError(
                f"policy_kwargs.action_std: {action_std!r} applies to continuous actions; group {group.name!r} has "
                f"{group.action_kind} actions"
            )
        activation_class(activation, "policy_kwargs.activation")
        if critic not in ("centralized", "local", "none"):
            raise ValueError(f"policy_kwargs.critic: {critic!r} is not one of ['centralized', 'local', 'none']")
        if not isinstance(agent_id_input, bool):
            raise ValueError(f"policy_kwargs.agent_id_input: expected true or false, got {agent_id_input!r}")
        if value_network is not None and critic == "none":
            raise ValueError("policy_kwargs.value_network: given, but critic is 'none'")
        self.hidden_sizes = hidden_widths(hidden_sizes, "policy_kwargs.hidden_sizes")
        self.critic_kind = critic
        self.has_critic = critic != "none"
        self.agent_id_input = agent_id_input
        act = ACTIVATIONS[activation]
        encoder_module = build_encoder(group, encoder, field="policy_kwargs.encoder")
        features = out_features_of(encoder_module)
        obs_key = self.key(keys.OBSERVATION)
        # What the actor (and a local critic) reads: the features, plus the agent's one-hot.
        in_dim = features + (group.num_agents if agent_id_input else 0)
        in_keys = [obs_key, self.key(keys.AGENT_ID)] if agent_id_input else [obs_key]

        def reads(net: nn.Module, from_agent_dim: bool = False) -> nn.Module:
            return AgentIdInput(net, group.agent_ids, from_agent_dim) if agent_id_input else net

        if group.action_kind in ("discrete", "multi_discrete"):
            net = Encoded(
                encoder_module,
                reads(MLP(in_dim, group.num_actions, num_cells=list(self.hidden_sizes), activation_class=act)),
            )
            distribution_class, distribution_kwargs = discrete_distribution(group)
            dist_in = {"logits": self.key(keys.LOGITS)}
            if group.has_action_mask:
                dist_in["mask"] = self.key(keys.ACTION_MASK)
            self.actor = ProbabilisticActor(
                TensorDictModule(net, in_keys=in_keys, out_keys=[self.key(keys.LOGITS)]),
                in_keys=dist_in,
                out_keys=[self.key(keys.ACTION)],
                distribution_class=distribution_class,
                distribution_kwargs=distribution_kwargs,
                return_log_prob=True,
                log_prob_key=self.key(keys.ACTION_LOG_PROB),
            )
        else:
            action_dim = int(torch.Size(group.action_shape).numel())
            outputs = 2 * action_dim if action_std == "state" else action_dim
            mlp = reads(MLP(in_dim, outputs, num_cells=list(self.hidden_sizes), activation_class=act))
            net = Encoded(encoder_module, _NormalParams(mlp, action_dim, action_std, init_action_std, min_action_std))
            loc, scale = self.key(keys.LOC), self.key(keys.SCALE)
            self.actor = ProbabilisticActor(
                TensorDictModule(net, in_keys=in_keys, out_keys=[loc, scale]),
                in_keys={"loc": loc, "scale": scale},
                out_keys=[self.key(keys.ACTION)],
                distribution_class=TanhNormal,
                distribution_kwargs={
                    "low": torch.tensor(group.action_low).view(group.action_shape),
                    "high": torch.tensor(group.action_high).view(group.action_shape),
                },
                return_log_prob=True,
                log_prob_key=self.key(keys.ACTION_LOG_PROB),
            )

        self.critic: TensorDictModule | None = None
        value_key = self.key(keys.STATE_VALUE)
        if value_network is None and critic == "centralized":
            value_network = CentralizedValueNetwork(group, self.hidden_sizes, activation, in_features=features)
        elif value_network is None and critic == "local":
            # The critic always reads whole-group rows (as the centralized one does), including
            # GAE's "next" rows, which carry no agent_id: the agent dim gives each row's position.
            value_network = reads(
                MLP(in_dim, 1, num_cells=list(self.hidden_sizes), activation_class=act), from_agent_dim=True
            )
        if value_network is not None:
            self.critic = TensorDictModule(
                Encoded(encoder_module, value_network), in_keys=[obs_key], out_keys=[value_key]
            )
        # Handles on the parts a recipe can share (registered once, inside actor / critic, so each
        # weight appears once in the state_dict).
        self.__dict__["_encoder"] = encoder_module
        self.__dict__["_value_network"] = value_network

    @property
    def encoder(self) -> nn.Module:
        """observation -> features, read by the actor and the critic (shareable between bindings as ``encoder``, docs/shared_modules.md)."""
        return self.__dict__["_encoder"]

    @property
    def value_network(self) -> nn.Module | None:
        """The critic's network after the encoder (shareable between bindings as ``vf``); ``None`` without a critic."""
        return self.__dict__["_value_network"]

    def initialize_to_environment(self, group: GroupSpec) -> None:
        """As [`Policy.initialize_to_environment`][lightmarl.policies.base.Policy.initialize_to_environment]; with ``agent_id_input`` the group's size must match too.

        Raises:
            ValueError: when the policy was built for different spaces, or (``agent_id_input``)
                for a group with another number of agents.
        """
        if self.agent_id_input and group.num_agents != self.group.num_agents:
            raise ValueError(
                f"policy MLPActorCritic(agent_id_input=True) was built for {self.group.num_agents} agents "
                f"(its agent one-hot has that size), but group {group.name!r} has {group.num_agents}"
            )
        super().initialize_to_environment(group)
        for module in self.modules():
            if isinstance(module, AgentIdInput):
                module.set_agent_ids(group.agent_ids)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.actor(tensordict)

    def stackable_actor(self) -> StackableActor | None:
        """The plain case only: discrete actions from vector observations straight into the actor's MLP
        (no agent one-hot, no learnt encoder, a categorical without extra arguments)."""
        if type(self).forward is not MLPActorCritic.forward or self.group.action_kind != "discrete":
            return None
        if len(self.actor.module) != 2:
            return None
        encoded, dist = self.actor.module[0].module, self.actor.module[1]
        if not isinstance(encoded, Encoded) or type(encoded.encoder) is not FlattenEncoder:
            return None
        if dist.distribution_class is not Categorical or dist.distribution_kwargs:
            return None
        if not isinstance(encoded.net, nn.Sequential):
            return None
        return StackableActor(layers=tuple(encoded.net), default_mode=dist.default_interaction_type)


class AgentIdInput(nn.Module):
    """Runs ``net`` on the observation with a one-hot of the row's agent appended.

    ``agent_id`` is the row's index in the env's ``possible_agents``; the one-hot is over the
    agent's position in the group (``agent_ids``), so its size is the group's agent count.

    Args:
        net: the network; its input width is the observation's plus ``len(agent_ids)``.
        agent_ids: the group's agents' indices in ``possible_agents``, in group order.
        from_agent_dim: read whole-group rows ``[*batch, agents, obs]`` without ``agent_id``:
            a row's position is its index along the agent dim (for critics).
    """

    position: torch.Tensor

    def __init__(self, net: nn.Module, agent_ids: Sequence[int], from_agent_dim: bool = False) -> None:
        super().__init__()
        self.net = net
        self.num_agents = len(agent_ids)
        self.from_agent_dim = from_agent_dim
        self.register_buffer("position", torch.empty(0, dtype=torch.int64), persistent=False)
        self.set_agent_ids(agent_ids)

    def set_agent_ids(self, agent_ids: Sequence[int]) -> None:
        """Map ``agent_id`` -> position in the group (``-1``: not an agent of the group)."""
        if len(agent_ids) != self.num_agents:
            raise ValueError(f"expected {self.num_agents} agent ids, got {len(agent_ids)}")
        position = torch.full((max(agent_ids) + 1,), -1, dtype=torch.int64)
        position[torch.tensor(list(agent_ids), dtype=torch.int64)] = torch.arange(self.num_agents)
        self.position = position.to(self.position.device)

    def forward(self, observation: torch.Tensor, agent_id: torch.Tensor | None = None) -> torch.Tensor:
        if self.from_agent_dim:
            if observation.dim() < 2 or observation.shape[-2] != self.num_agents:
                raise ValueError(
                    f"agent_id_input: expected whole-group rows [*batch, {self.num_agents}, obs], "
                    f"got observation shape {tuple(observation.shape)}"
                )
            position = torch.arange(self.num_agents, device=observation.device)
        elif agent_id is not None:
            position = self.position[agent_id.long()]
        else:
            raise KeyError(
                f"agent_id_input: the rows carry no {keys.AGENT_ID!r} entry (observation shape "
                f"{tuple(observation.shape)}); env observations and stored experience have it"
            )
        one_hot = F.one_hot(position, self.num_agents).to(observation.dtype)
        return self.net(torch.cat([observation, one_hot.expand(*observation.shape[:-1], -1)], dim=-1))


class _NormalParams(nn.Module):
    """``net`` then (loc, scale) of a tanh-normal actor: see ``MLPActorCritic``'s ``action_std``.

    ``state``: `NormalParamExtractor` splits the output in two halves, the scale mapped by
    a softplus biased to give ``init_std`` at zero and bounded below by ``min_std``. ``learned``:
    the output is the loc; TensorDict's `AddStateIndependentNormalScale` adds
    ``exp(log_std)`` (clamped at ``min_std``) from one parameter per action dimension.
    """

    def __init__(
        self, net: nn.Module, action_dim: int, action_std: str = "state", init_std: float = 1.0, min_std: float = 0.01
    ) -> None:
        super().__init__()
        self.net = net
        self.extract: nn.Module
        if action_std == "state":
            self.extract = NormalParamExtractor(f"biased_softplus_{init_std}_{min_std}", scale_lb=min_std)
        else:
            self.extract = AddStateIndependentNormalScale(action_dim, init_value=math.log(init_std), scale_lb=min_std)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.extract(self.net(*inputs))


class CentralizedValueNetwork(nn.Module):
    """MAPPO's centralized value function: every agent's features in, one value per agent out.

    TorchRL's ``MultiAgentMLP(centralized=True, share_params=True)`` over ``[*batch, agents,
    in_features]``. Hand one instance to several bindings of a group (``shared_modules`` with
    ``value_network``) for one critic shared between them.

    Args:
        group: the agent group it values.
        hidden_sizes: widths of the hidden layers.
        activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
        in_features: features per agent (default: the flattened observation size; set it to
            the encoder's ``out_features`` when the policies use another encoder).
    """

    def __init__(
        self,
        group: GroupSpec,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        in_features: int | None = None,
    ) -> None:
        super().__init__()
        activation_class(activation, "value network activation")
        self.in_features = int(in_features) if in_features is not None else math.prod(group.observation_shape)
        self.num_agents = group.num_agents
        self.net = MultiAgentMLP(
            n_agent_inputs=self.in_features,
            n_agent_outputs=1,
            n_agents=group.num_agents,
            centralized=True,
            share_params=True,
            num_cells=list(hidden_widths(hidden_sizes, "value network hidden_sizes")),
            activation_class=ACTIVATIONS[activation],
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if features.shape[-2:] != (self.num_agents, self.in_features):
            raise ValueError(
                f"CentralizedValueNetwork: expected features [*batch, {self.num_agents}, {self.in_features}], got "
                f"{tuple(features.shape)} (does in_features match the encoder's out_features?)"
            )
        return self.net(features)
