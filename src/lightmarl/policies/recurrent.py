"""Recurrent (GRU / LSTM) actor-critic policies.

The recurrent state of every row lives in the rollout: before each step the collector writes
``(group, "recurrent_state")`` (``[*batch, layers, hidden]``; LSTMs stack hidden and cell
state as ``[*batch, 2, layers, hidden]``) and ``(group, "is_init")`` (the row starts an
episode, so the state is reset to zeros); the policy writes the state after the step to
``(group, "next_recurrent_state")``. Training reruns whole rollouts in *sequence mode*:
each (env, agent) sequence restarts from the state stored at its first step and is reset
wherever ``is_init`` is set, so the state seen in training is the one seen at collection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Literal, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn
from torch.distributions import Categorical
from torchrl.modules import MLP, MultiAgentMLP, ProbabilisticActor

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import Policy


class RecurrentCore(nn.Module):
    """Observation -> MLP -> GRU/LSTM -> action logits, in step or sequence mode.

    Step mode (collection): ``observation [*B, D]``, ``state [*B, S, layers, H]``.
    Sequence mode (training): ``observation [N, T, A, D]`` with time at dim 1 and agents at
    dim 2 (the experience layout), ``state [N, T, A, S, layers, H]`` of which only ``t = 0``
    is used, ``is_init [N, T, A]``.
    """

    def __init__(
        self, obs_dim: int, num_actions: int, hidden_size: int, cell: str, pre_sizes: Sequence[int], layers: int
    ) -> None:
        super().__init__()
        self.cell = cell
        self.layers = layers
        self.hidden_size = hidden_size
        self.encoder = MLP(
            obs_dim, hidden_size, num_cells=list(pre_sizes), activation_class=nn.Tanh, activate_last_layer=True
        )
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(hidden_size, hidden_size, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden_size, num_actions)
        self.sequence_mode = False

    @property
    def state_slots(self) -> int:
        return 2 if self.cell == "lstm" else 1

    def _run(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x [M, T, H]; state [M, S, layers, H] -> torch's [layers, M, H] per slot.
        slots = state.permute(1, 2, 0, 3).contiguous()
        if self.cell == "lstm":
            out, (h, c) = self.rnn(x, (slots[0], slots[1]))
            new = torch.stack([h, c])
        else:
            out, h = self.rnn(x, slots[0])
            new = h.unsqueeze(0)
        return out, new.permute(2, 0, 1, 3)

    def forward(
        self, observation: torch.Tensor, is_init: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        features, new_state = self.features(observation, is_init, state)
        return self.head(features), new_state

    def features(
        self, observation: torch.Tensor, is_init: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Recurrent features of every row (``[*B, H]`` or ``[N, T, A, H]``) and the state after the step."""
        if not observation.is_floating_point():  # uint8 observations are stored as such
            observation = observation.to(torch.float32)
        if not self.sequence_mode:
            batch = observation.shape[:-1]
            state = torch.where(is_init.reshape(*batch, 1, 1, 1), torch.zeros_like(state), state)
            out, new = self._run(
                self.encoder(observation).reshape(-1, 1, self.hidden_size), state.reshape(-1, *state.shape[-3:])
            )
            return out[:, 0].reshape(*batch, -1), new.reshape(state.shape)
        n, t, a = observation.shape[:3]
        features = self.encoder(observation).permute(0, 2, 1, 3).reshape(n * a, t, self.hidden_size)
        resets = is_init.permute(0, 2, 1).reshape(n * a, t)
        current = state[:, 0].reshape(n * a, *state.shape[-3:])
        outputs = []
        # Runs of steps without a reset go through the RNN in one call.
        start = 0
        boundaries = sorted({0, *torch.nonzero(resets[:, 1:].any(0)).flatten().add(1).tolist(), t})
        for stop in boundaries[1:]:
            reset = resets[:, start].reshape(-1, 1, 1, 1)
            current = torch.where(reset, torch.zeros_like(current), current)
            out, current = self._run(features[:, start:stop], current)
            outputs.append(out)
            start = stop
        # Sequence mode returns the input state: training needs no state after the rollout.
        return torch.cat(outputs, dim=1).reshape(n, a, t, -1).permute(0, 2, 1, 3), state


class RecurrentValue(nn.Module):
    """A value head on a `RecurrentCore`'s features (a critic sharing the actor's memory)."""

    def __init__(self, core: RecurrentCore) -> None:
        super().__init__()
        self.core = core
        self.value = nn.Linear(core.hidden_size, 1)

    def forward(self, observation: torch.Tensor, is_init: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self.value(self.core.features(observation, is_init, state)[0])


class RecurrentActorCritic(Policy):
    """A GRU or LSTM actor (discrete actions) with a recurrent or feed-forward critic.

    ``critic: recurrent`` puts a value head on the actor's recurrent features (one memory for
    both, as in CleanRL's LSTM PPO); its values for GAE come from the states stored with each
    row (``("next", group, "recurrent_state")`` for the next observations), and its loss is
    trained through time on whole sequences like the actor's.

    Args:
        group: the agent group this policy acts for.
        hidden_size: width of the recurrent layer (and of the encoder's output).
        cell: ``gru`` or ``lstm``.
        layers: stacked recurrent layers.
        encoder_sizes: hidden widths of the MLP before the recurrent layer.
        critic: ``recurrent`` (a value head sharing the actor's memory), ``centralized`` (an MLP
            on all agents' observations, MAPPO) or ``local`` (an MLP on the agent's own, IPPO).
        critic_sizes: hidden widths of the critic MLP (feed-forward critics).
    """

    has_critic = True
    is_recurrent = True

    def __init__(
        self,
        group: GroupSpec,
        hidden_size: int = 64,
        cell: Literal["gru", "lstm"] = "gru",
        layers: int = 1,
        encoder_sizes: Sequence[int] = (64,),
        critic: Literal["recurrent", "centralized", "local"] = "local",
        critic_sizes: Sequence[int] = (64, 64),
    ) -> None:
        super().__init__(group)
        if group.action_kind != "discrete" or len(group.observation_shape) != 1:
            raise ValueError(
                f"RecurrentActorCritic supports flat observations and discrete actions; group {group.name!r} has "
                f"observations {group.observation_shape} and {group.action_kind} actions"
            )
        if cell not in ("gru", "lstm"):
            raise ValueError(f"policy_kwargs.cell: {cell!r} is not one of ['gru', 'lstm']")
        if critic not in ("recurrent", "centralized", "local"):
            raise ValueError(f"policy_kwargs.critic: {critic!r} is not one of ['recurrent', 'centralized', 'local']")
        self.critic_kind = critic
        obs_dim = group.observation_shape[0]
        self.core = RecurrentCore(obs_dim, group.num_actions, hidden_size, cell, encoder_sizes, layers)
        self.state_shape = (self.core.state_slots, layers, hidden_size)
        self.actor = ProbabilisticActor(
            TensorDictModule(
                self.core,
                in_keys=[self.key(keys.OBSERVATION), self.key(keys.IS_INIT), self.key(keys.RECURRENT_STATE)],
                out_keys=[self.key(keys.LOGITS), self.key(keys.NEXT_RECURRENT_STATE)],
            ),
            in_keys={"logits": self.key(keys.LOGITS)},
            out_keys=[self.key(keys.ACTION)],
            distribution_class=Categorical,
            return_log_prob=True,
            log_prob_key=self.key(keys.ACTION_LOG_PROB),
        )
        value = self.key(keys.STATE_VALUE)
        obs = self.key(keys.OBSERVATION)
        if critic == "recurrent":
            self.critic = TensorDictModule(
                RecurrentValue(self.core),
                in_keys=[obs, self.key(keys.IS_INIT), self.key(keys.RECURRENT_STATE)],
                out_keys=[value],
            )
            return
        if critic == "centralized":
            net: nn.Module = MultiAgentMLP(
                n_agent_inputs=obs_dim,
                n_agent_outputs=1,
                n_agents=group.num_agents,
                centralized=True,
                share_params=True,
                num_cells=list(critic_sizes),
            )
        else:
            net = MLP(obs_dim, 1, num_cells=list(critic_sizes))
        self.critic = TensorDictModule(net, in_keys=[obs], out_keys=[value])

    def initial_state(self, *batch: int) -> torch.Tensor:
        return torch.zeros(*batch, *self.state_shape, device=self.core.head.weight.device)

    @contextlib.contextmanager
    def sequence_mode(self) -> Iterator[None]:
        """Inside, the actor reads whole ``[N, T, A]`` rollouts (training) instead of one step."""
        self.core.sequence_mode = True
        try:
            yield
        finally:
            self.core.sequence_mode = False

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.actor(tensordict)


class RecurrentStates:
    """Carries the recurrent state of every (env, agent) row between steps.

    One state tensor per group that has recurrent bindings (their state shapes must agree);
    rows of non-recurrent bindings carry zeros. `prepare` writes the state and
    ``is_init`` into the policy's input before a step; `advance` keeps the policy's
    ``next_recurrent_state`` for the next step.

    Args:
        policies: binding id -> policy (the population's).
        group_of_binding: binding id -> group name.
        num_envs: env copies stepped together.
        agents_per_group: group name -> number of agents.
    """

    def __init__(
        self,
        policies: dict[str, nn.Module],
        group_of_binding: dict[str, str],
        num_envs: int,
        agents_per_group: dict[str, int],
    ) -> None:
        shapes: dict[str, tuple[tuple[int, ...], str]] = {}
        for binding_id, policy in policies.items():
            if not getattr(policy, "is_recurrent", False) or binding_id not in group_of_binding:
                continue
            group = group_of_binding[binding_id]
            shape = tuple(cast(RecurrentActorCritic, policy).state_shape)
            if group in shapes and shapes[group][0] != shape:
                raise ValueError(
                    f"recurrent bindings {shapes[group][1]!r} and {binding_id!r} control agents of group {group!r} "
                    f"with different state shapes {shapes[group][0]} and {shape}; give them the same hidden_size, "
                    "cell and layers"
                )
            shapes.setdefault(group, (shape, binding_id))
        self.states = {g: torch.zeros(num_envs, agents_per_group[g], *shape) for g, (shape, _) in shapes.items()}
        self._episode_start = torch.ones(num_envs, dtype=torch.bool)

    def __bool__(self) -> bool:
        return bool(self.states)

    def prepare(self, observation: TensorDictBase, envs: slice = slice(None)) -> None:
        """Write ``recurrent_state`` and ``is_init`` into the observation TensorDict of env copies ``envs``."""
        for group, state in self.states.items():
            rows = observation.get(group)
            # A copy: the stored rows must not change when advance() writes the next state in place.
            rows.set(keys.RECURRENT_STATE, state[envs].to(rows.device, copy=True))
            start = self._episode_start[envs].to(rows.device)
            rows.set(keys.IS_INIT, start.unsqueeze(-1).expand(rows.batch_size).clone())

    def advance(self, acted: TensorDictBase, episode_end: torch.Tensor, envs: slice = slice(None)) -> None:
        """Keep the state after the step of env copies ``envs``; those whose episode ended start the next from zeros."""
        for group in self.states:
            self.states[group][envs] = acted.get((group, keys.NEXT_RECURRENT_STATE)).detach().cpu()
        self._episode_start[envs] = episode_end

    def restart_all(self) -> None:
        """Reset every row at the next step (e.g. after the agent -> binding map changed)."""
        self._episode_start[:] = True

    def state_dict(self) -> dict[str, Any]:
        """The states and episode starts, for a resumed run."""
        return {"states": {g: s.clone() for g, s in self.states.items()}, "episode_start": self._episode_start.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state["states"]
        if set(saved) != set(self.states) or any(saved[g].shape != s.shape for g, s in self.states.items()):
            raise ValueError(
                f"recurrent states: the checkpoint has { ({g: tuple(s.shape) for g, s in saved.items()}) }, "
                f"this run { ({g: tuple(s.shape) for g, s in self.states.items()}) }"
            )
        self.states = {g: s.clone() for g, s in saved.items()}
        self._episode_start = state["episode_start"].clone()
