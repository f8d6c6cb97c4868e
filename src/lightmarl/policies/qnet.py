"""A Q-network policy for discrete actions: epsilon-greedy while collecting, greedy when evaluating.

The action values come from an MLP (one per row, decentralised); TorchRL's
`QValueModule` takes the (masked) argmax. The network is exposed as
`QNetworkPolicy.qvalue` for `DQNLoss`
(see [`lightmarl.algorithms.dqn.DQN`][lightmarl.algorithms.dqn.DQN]).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.envs.utils import ExplorationType, exploration_type
from torchrl.modules import MLP, QValueModule

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy
from lightmarl.policies.encoders import (
    ACTIVATIONS,
    Encoded,
    activation_class,
    build_encoder,
    hidden_widths,
    out_features_of,
)


class QNetworkPolicy(Policy):
    """MLP Q-network over a discrete action set, acting epsilon-greedily (Mnih et al. 2015).

    ``forward`` writes ``(group, "action_value")`` (``[*batch, num_actions]``), ``(group, "action")``
    and ``(group, "action_log_prob")``. Under ``ExplorationType.RANDOM`` (collection) the action
    is uniformly random among the legal ones with probability `epsilon`, else the greedy
    one, and the log-probability is that of the epsilon-greedy distribution
    (``log(eps / n_legal + (1 - eps) * [a is greedy])``). Under any other exploration type
    (evaluation) the action is greedy and its log-probability 0. Illegal actions
    (``(group, "action_mask")`` False) are never chosen.

    ``epsilon`` is a buffer (saved with the policy) that [`lightmarl.algorithms.dqn.DQN`][lightmarl.algorithms.dqn.DQN]
    anneals during training.

    Args:
        group: the agent group this policy acts for (discrete actions).
        hidden_sizes: widths of the hidden layers.
        activation: hidden activation: ``tanh``, ``relu``, ``elu`` or ``gelu``.
        epsilon: exploration rate until a trainer sets it.
        encoder: observation -> features before the MLP (see `lightmarl.policies.encoders`;
            default: flatten), e.g. one shared with other bindings.
    """

    has_critic = False
    epsilon: torch.Tensor

    def __init__(
        self,
        group: GroupSpec,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Literal["tanh", "relu", "elu", "gelu"] = "relu",
        epsilon: float = 1.0,
        encoder: nn.Module | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(group)
        activation_class(activation, "policy_kwargs.activation")
        if group.action_kind != "discrete":
            raise ValueError(
                f"QNetworkPolicy needs discrete actions; group {group.name!r} has {group.action_kind} actions"
            )
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"policy_kwargs.epsilon: expected a value in [0, 1], got {epsilon!r}")
        self.hidden_sizes = hidden_widths(hidden_sizes, "policy_kwargs.hidden_sizes")
        self.register_buffer("epsilon", torch.tensor(float(epsilon)))
        encoder_module = build_encoder(group, encoder, field="policy_kwargs.encoder")
        net = Encoded(
            encoder_module,
            MLP(
                out_features_of(encoder_module),
                group.num_actions,
                num_cells=list(self.hidden_sizes),
                activation_class=ACTIVATIONS[activation],
            ),
        )
        self.__dict__["_encoder"] = encoder_module  # registered once, inside qvalue
        mask_key = self.key(keys.ACTION_MASK) if group.has_action_mask else None
        #: observation -> action values -> greedy action; what `DQNLoss` trains.
        self.qvalue = TensorDictSequential(
            TensorDictModule(net, in_keys=[self.key(keys.OBSERVATION)], out_keys=[self.key(keys.ACTION_VALUE)]),
            QValueModule(
                action_space="categorical",
                action_value_key=self.key(keys.ACTION_VALUE),
                action_mask_key=mask_key,
                out_keys=[self.key(keys.ACTION), self.key(keys.ACTION_VALUE), self.key(keys.CHOSEN_ACTION_VALUE)],
            ),
        )

    @property
    def encoder(self) -> nn.Module:
        """observation -> features before the Q-network's MLP (shareable)."""
        return self.__dict__["_encoder"]

    def set_epsilon(self, value: float) -> None:
        """Set the exploration rate in place (keeps the buffer's device)."""
        self.epsilon.fill_(float(value))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.qvalue(tensordict)
        greedy = tensordict.get(self.key(keys.ACTION))
        if exploration_type() != ExplorationType.RANDOM:
            tensordict.set(self.key(keys.ACTION_LOG_PROB), torch.zeros(greedy.shape, device=greedy.device))
            return tensordict
        values = tensordict.get(self.key(keys.ACTION_VALUE))
        mask = tensordict.get(self.key(keys.ACTION_MASK), None)
        legal = torch.ones_like(values, dtype=torch.bool) if mask is None else mask.bool()
        eps = self.epsilon.to(values.dtype)
        # Epsilon-greedy distribution over the legal actions.
        probs = legal.to(values.dtype) * (eps / legal.sum(-1, keepdim=True).clamp_min(1))
        probs = probs + (1 - eps) * nn.functional.one_hot(greedy, self.group.num_actions).to(values.dtype)
        flat = probs.reshape(-1, self.group.num_actions)
        action = torch.multinomial(flat, 1).view(greedy.shape) if flat.shape[0] else greedy
        log_prob = probs.gather(-1, action.unsqueeze(-1)).squeeze(-1).clamp_min(1e-30).log()
        tensordict.set(self.key(keys.ACTION), action)
        tensordict.set(self.key(keys.ACTION_LOG_PROB), log_prob)
        return tensordict

    def extra_repr(self) -> str:
        return f"epsilon={float(self.epsilon):.3g}"
