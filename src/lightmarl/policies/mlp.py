"""Neural actor-critic policies built from TorchRL modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torch.distributions import Categorical
from torchrl.modules import MLP, MaskedCategorical, MultiAgentMLP, ProbabilisticActor, TanhNormal
from torchrl.modules.distributions import NormalParamExtractor

from lightmarl.data import schema
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


class MLPActorCritic(Policy):
    """MLP actor (categorical or tanh-normal) with an optional value head.

    The actor is decentralised: each row acts on its own observation. The critic is
    ``centralized`` (MAPPO, Yu et al. 2022: one network reading every agent of the group,
    TorchRL's ``MultiAgentMLP(centralized=True, share_params=True)``), ``local`` (IPPO,
    de Witt et al. 2020: each agent's own observation) or ``none``.

    Args:
        group: the agent group this policy acts for.
        hidden_sizes: widths of the hidden layers of actor and critic.
        activation: hidden activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
        critic: ``centralized``, ``local`` or ``none``.
    """

    def __init__(
        self,
        group: GroupSpec,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh",
        critic: Literal["centralized", "local", "none"] = "centralized",
    ) -> None:
        super().__init__(group)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"policy_kwargs.activation: {activation!r} is not one of {sorted(_ACTIVATIONS)}")
        if critic not in ("centralized", "local", "none"):
            raise ValueError(f"policy_kwargs.critic: {critic!r} is not one of ['centralized', 'local', 'none']")
        if len(group.observation_shape) != 1:
            raise ValueError(
                f"MLPActorCritic needs flat (1-D) observations; group {group.name!r} has shape {group.observation_shape}"
            )
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.critic_kind = critic
        self.has_critic = critic != "none"
        act = _ACTIVATIONS[activation]
        obs_dim = group.observation_shape[0]
        obs_key = self.key(schema.OBSERVATION)

        if group.action_kind == "discrete":
            net = MLP(obs_dim, group.num_actions, num_cells=list(self.hidden_sizes), activation_class=act)
            dist_in = {"logits": self.key(schema.LOGITS)}
            if group.has_action_mask:
                dist_in["mask"] = self.key(schema.ACTION_MASK)
            self.actor = ProbabilisticActor(
                TensorDictModule(net, in_keys=[obs_key], out_keys=[self.key(schema.LOGITS)]),
                in_keys=dist_in,
                out_keys=[self.key(schema.ACTION)],
                distribution_class=MaskedCategorical if group.has_action_mask else Categorical,
                return_log_prob=True,
                log_prob_key=self.key(schema.ACTION_LOG_PROB),
            )
        else:
            action_dim = int(torch.Size(group.action_shape).numel())
            net = nn.Sequential(
                MLP(obs_dim, 2 * action_dim, num_cells=list(self.hidden_sizes), activation_class=act),
                NormalParamExtractor(),
            )
            loc, scale = self.key("loc"), self.key("scale")
            self.actor = ProbabilisticActor(
                TensorDictModule(net, in_keys=[obs_key], out_keys=[loc, scale]),
                in_keys={"loc": loc, "scale": scale},
                out_keys=[self.key(schema.ACTION)],
                distribution_class=TanhNormal,
                distribution_kwargs={
                    "low": torch.tensor(group.action_low).view(group.action_shape),
                    "high": torch.tensor(group.action_high).view(group.action_shape),
                },
                return_log_prob=True,
                log_prob_key=self.key(schema.ACTION_LOG_PROB),
            )

        self.critic: TensorDictModule | None = None
        value_key = self.key(schema.STATE_VALUE)
        if critic == "centralized":
            self.critic = TensorDictModule(
                MultiAgentMLP(
                    n_agent_inputs=obs_dim,
                    n_agent_outputs=1,
                    n_agents=group.num_agents,
                    centralized=True,
                    share_params=True,
                    num_cells=list(self.hidden_sizes),
                    activation_class=act,
                ),
                in_keys=[obs_key],
                out_keys=[value_key],
            )
        elif critic == "local":
            self.critic = TensorDictModule(
                MLP(obs_dim, 1, num_cells=list(self.hidden_sizes), activation_class=act),
                in_keys=[obs_key],
                out_keys=[value_key],
            )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.actor(tensordict)
