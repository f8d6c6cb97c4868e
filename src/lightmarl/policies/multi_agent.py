"""Acting for the whole population: one forward per binding over its rows."""

from __future__ import annotations

from collections.abc import Hashable

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torch.nn import functional as F
from torchrl.envs.utils import ExplorationType, exploration_type

from lightmarl import keys
from lightmarl.envs.spec import EnvSpec
from lightmarl.errors import ConfigError
from lightmarl.policies.base import Policy, StackableActor
from lightmarl.population import BindingTable
from lightmarl.population.bindings import GroupBindingIndex


class MultiAgentPolicy(nn.Module):
    """Runs every binding's policy once on the rows of the agents it controls.

    Rows are grouped with the index tensors cached in the `BindingTable`
    (`BindingTable.row_index`; no per-agent Python loop). For each group:

    - a binding that controls every row runs on the group as is (no gather / scatter);
    - otherwise each binding gathers its rows with ``index_select``, runs one forward, and its
      actions / log-probs are copied back in place (``index_copy_``) into outputs allocated
      once per group. With the same map in every env copy rows are selected along the agent
      dim; with a per-env map they are flat positions over ``[*batch, agents]``.
    - when every binding of the group offers a ``StackableActor`` of the same shape
      (``Policy.stackable_actor()``; a discrete ``MLPActorCritic`` does) and
      ``stack_same_shape`` is on, their actors run as one stacked forward instead:
      rows padded to ``[bindings, rows]``, one ``baddbmm`` per layer with the bindings'
      weights stacked, one categorical sample. Per-call overhead of a TorchRL actor is far
      above the cost of a few hundred rows, so B separate forwards cost about B times one;
      the stacked forward costs about one (see ``benchmarks/README.md``).

    Args:
        policies: binding id -> policy.
        table: the population's binding table.
        stack_same_shape: run same-shaped stackable actors as one stacked
            forward (same distribution of outputs; ``False`` forwards each policy on its own).
    """

    #: entries copied back from each binding's forward into the group's rows.
    OUTPUT_KEYS = (keys.ACTION, keys.ACTION_LOG_PROB)

    def __init__(self, policies: dict[str, Policy], table: BindingTable, stack_same_shape: bool = True) -> None:
        super().__init__()
        self.policies = nn.ModuleDict(policies)
        self.table = table
        self.stack_same_shape = stack_same_shape
        self._stacks: dict[tuple[int, ...], _StackedActors | None] = {}
        self._table_version = -1
        self._check_table()

    @property
    def env_spec(self) -> EnvSpec:
        return self.table.env_spec

    def _check_table(self) -> None:
        """Every binding the map uses has a policy built for its group (re-checked after a map change)."""
        missing = [b for b in self.table.active_ids if b not in self.policies]
        if missing:
            raise ValueError(f"no policy was built for bindings {missing}")
        for binding_id in self.table.active_ids:
            group = getattr(self.policies[binding_id], "group", None)
            wanted = self.table.group_of_binding[binding_id]
            if group is not None and group.name != wanted:
                raise ValueError(
                    f"agent_binding_map: binding {binding_id!r} now controls agents of group {wanted!r}, but its "
                    f"policy was built for group {group.name!r}"
                )
        self._stacks.clear()
        self._table_version = self.table.version

    def forward(self, tensordict: TensorDictBase, env_start: int = 0) -> TensorDictBase:
        """``tensordict``: root batch ``[*batch]``, group entries ``[*batch, agents_in_group]``.

        With per-env maps the leading batch dim is the env copies ``env_start ..`` of the
        vector (a collector stepping a vector in parts passes where its part starts).
        """
        if self._table_version != self.table.version:
            self._check_table()
        for group_name in self.env_spec.groups:
            rows = tensordict.get(group_name)
            batch_shape = tuple(rows.batch_size[:-1])
            # Positions index the rows, so they live where the rows do (a GPU trainer collects there).
            device = rows.get(keys.OBSERVATION).device
            index = self.table.row_index(group_name, batch_shape, env_start=env_start, device=device)
            stack = self._stack_for(tuple(index.agents_of_binding)) if self.stack_same_shape else None
            if len(index.agents_of_binding) == 1:
                (binding,) = index.agents_of_binding
                if (
                    stack is not None
                    and stack.mode() is not None
                    and self.table.ids[binding] not in self.binding_devices
                ):
                    stack.forward(rows, None)  # the lean forward: TorchRL's actor costs ~1 ms per call here
                else:
                    self._run(binding, tensordict)
                    # Every path writes the same keys (the grouped and stacked ones write no logits), so
                    # that the steps of a rollout stack whether one binding or several acted at each.
                    if keys.LOGITS in rows.keys():
                        del rows[keys.LOGITS]
                continue
            if stack is not None and stack.mode() is not None:
                flat_index = self.table.row_index(
                    group_name, batch_shape, flat=True, env_start=env_start, device=device
                )
                stack.forward(rows, flat_index)
            else:
                self._grouped_forward(tensordict, rows, group_name, index)
        return tensordict

    def _policy(self, binding: int) -> nn.Module:
        return self.policies[self.table.ids[binding]]

    def _run(self, binding: int, tensordict: TensorDictBase) -> TensorDictBase:
        """Forward one binding's policy, on the binding's own ``device`` when it has one."""
        device = self.binding_devices.get(self.table.ids[binding])
        policy = self._policy(binding)
        home = next(iter(tensordict.values(include_nested=True, leaves_only=True))).device
        if device is None or device == home:
            return policy(tensordict)
        return tensordict.update(policy(tensordict.to(device)).to(home))

    def weights_of(self, binding_id: str) -> dict[str, torch.Tensor]:
        """A CPU copy of one binding's policy weights."""
        return {k: v.detach().cpu().clone() for k, v in self.policy_of(binding_id).state_dict().items()}

    def load_weights(self, binding_id: str, weights: dict[str, torch.Tensor]) -> None:
        """Load weights into one binding's policy; shapes must match."""
        try:
            self.policy_of(binding_id).load_state_dict(weights)
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"set_weights: the weights do not fit binding {binding_id!r}: {err}") from None

    def policy_of(self, binding_id: str) -> nn.Module:
        """The policy of ``binding_id`` (a KeyError naming the bindings with policies otherwise)."""
        if binding_id not in self.policies:
            raise KeyError(f"no policy for binding {binding_id!r}; bindings with policies are {list(self.policies)}")
        return self.policies[binding_id]

    @property
    def binding_devices(self) -> dict[str, torch.device]:
        """Bindings whose policy acts on a device of its own (``PolicyBinding.device``)."""
        return {
            b.id: torch.device(b.device) for b in self.table.bindings if b.device is not None and b.id in self.policies
        }

    def place_bindings(self, trainer_device: torch.device | None = None) -> None:
        """Move policies with their own ``device`` there (after the module was moved as a whole).

        Args:
            trainer_device: where the trainable policies learn: a trainable binding asking for
                another device is refused (its optimizer lives there; frozen and scripted bindings
                may act elsewhere, e.g. a large frozen NPC on the CPU).

        Raises:
            ConfigError: a trainable binding asks for another device than ``trainer_device``.
        """
        for binding_id, device in self.binding_devices.items():
            if trainer_device is not None and self.table.binding(binding_id).trainable and device != trainer_device:
                raise ConfigError(
                    f"policy_bindings: trainable binding {binding_id!r} asks for device {str(device)!r} but the "
                    f"trainer runs on {str(trainer_device)!r}; only frozen bindings may act on a device of their own"
                )
        for binding_id, device in self.binding_devices.items():
            self.policies[binding_id].to(device)

    def _stack_for(self, bindings: tuple[int, ...]) -> _StackedActors | None:
        policies = [self._policy(b) for b in bindings]
        # Keyed by the policy objects too, so a policy swapped into ``policies`` is picked up.
        key = tuple(id(p) for p in policies)
        if key not in self._stacks:
            self._stacks[key] = _StackedActors.build(policies)
        return self._stacks[key]

    def _grouped_forward(
        self, tensordict: TensorDictBase, rows: TensorDictBase, group_name: str, index: GroupBindingIndex
    ) -> None:
        group = self.env_spec.groups[group_name]
        batch = rows.batch_size
        if index.flat:
            dim, sub_root = 0, ()
            leaves = {k: v.reshape(batch.numel(), *v.shape[len(batch) :]) for k, v in rows.items()}
        else:
            dim, sub_root = len(batch) - 1, tuple(tensordict.batch_size)
            leaves = dict(rows.items())
        device = leaves[keys.OBSERVATION].device
        action = torch.empty(*batch, *group.action_shape, dtype=group.action_dtype, device=device)
        log_prob = torch.empty(batch, device=device)
        # Recurrent rows: bindings without a state pass theirs through unchanged (zeros).
        next_state = leaves[keys.RECURRENT_STATE].clone() if keys.RECURRENT_STATE in leaves else None
        # index_copy_ on views writes through to the [*batch, agents] outputs.
        flat_action = action.view(-1, *group.action_shape) if index.flat else action
        flat_log_prob = log_prob.view(-1) if index.flat else log_prob
        for binding, positions in index.agents_of_binding.items():
            picked = {k: v.index_select(dim, positions) for k, v in leaves.items()}
            sub_batch = (*sub_root, len(positions)) if index.flat else (*batch[:-1], len(positions))
            sub = TensorDict({group_name: TensorDict(picked, batch_size=sub_batch)}, batch_size=sub_root)
            result = self._run(binding, sub).get(group_name)
            flat_action.index_copy_(dim, positions, result.get(keys.ACTION).to(action))
            flat_log_prob.index_copy_(dim, positions, result.get(keys.ACTION_LOG_PROB).to(log_prob))
            if next_state is not None and keys.NEXT_RECURRENT_STATE in result.keys():
                next_state.index_copy_(dim, positions, result.get(keys.NEXT_RECURRENT_STATE))
        rows.set(keys.ACTION, action)
        rows.set(keys.ACTION_LOG_PROB, log_prob)
        if next_state is not None:
            rows.set(
                keys.NEXT_RECURRENT_STATE, next_state.view(*batch, *next_state.shape[1:]) if index.flat else next_state
            )


class _StackedActors:
    """The actors of same-shaped bindings (each a `StackableActor`) as one batched forward.

    Weights are stacked ``[bindings, ...]`` (re-stacked when a parameter changes in place, as
    an optimizer step does; every call when gradients are on, so they flow to each binding).
    The action rule follows TorchRL's: sample under ``ExplorationType.RANDOM``, argmax under
    ``DETERMINISTIC`` / ``MODE`` or when no exploration type is set.
    """

    def __init__(self, actors: list[StackableActor]) -> None:
        self.linears = [[m for m in actor.layers if isinstance(m, nn.Linear)] for actor in actors]
        # Parameter-free layers (activations) are shared: each is applied to all bindings at once.
        self.layers: list[nn.Module | int] = []
        count = 0
        for module in actors[0].layers:
            if isinstance(module, nn.Linear):
                self.layers.append(count)
                count += 1
            else:
                self.layers.append(module)
        self.default_mode = actors[0].default_mode
        self._params = [p for linears in self.linears for m in linears for p in m.parameters()]
        self._key: tuple[tuple[int, int], ...] | None = None
        self._weights: list[tuple[torch.Tensor, torch.Tensor]] = []

    @staticmethod
    def signature(policy: nn.Module) -> tuple[Hashable, ...] | None:
        """What must match for two policies to share a stacked forward; ``None``: cannot be stacked."""
        if not isinstance(policy, Policy) or (actor := policy.stackable_actor()) is None:
            return None
        if policy._forward_pre_hooks or policy._forward_hooks:
            return None  # e.g. a loaded NPC's own input normalization: its forward must run
        group = policy.group
        if len(group.observation_shape) != 1 or group.observation_dtype == "uint8":
            return None  # the stacked forward multiplies the observations as they are stored: float only
        layers: list[Hashable] = []
        for m in actor.layers:
            if isinstance(m, nn.Linear) and m.bias is not None:
                layers.append(("linear", m.in_features, m.out_features, m.weight.dtype, m.weight.device))
            elif isinstance(m, (nn.Tanh, nn.ReLU, nn.ELU, nn.GELU)):
                layers.append((type(m), repr(m)))
            else:
                return None
        return (group.name, tuple(layers), actor.default_mode)

    @classmethod
    def build(cls, policies: list[nn.Module]) -> _StackedActors | None:
        signatures = [cls.signature(p) for p in policies]
        if signatures[0] is None or any(s != signatures[0] for s in signatures):
            return None
        return cls([p.stackable_actor() for p in policies if isinstance(p, Policy)])  # type: ignore[misc]

    def mode(self) -> str | None:
        """``"sample"``, ``"argmax"``, or ``None`` for a rule the stacked forward does not implement."""
        mode = exploration_type() or self.default_mode
        if mode == ExplorationType.RANDOM:
            return "sample"
        if mode in (ExplorationType.DETERMINISTIC, ExplorationType.MODE):
            return "argmax"
        return None

    def _act(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[rows, actions]`` logits -> the action of each row (by the exploration rule) and its log-prob."""
        log_p = logits.log_softmax(-1)
        if self.mode() == "sample":
            # Inverse-CDF sampling: a third of torch.multinomial's cost on small batches. The
            # uniform is scaled to the CDF's last entry, so rounding never picks an action
            # past it, nor one whose probability is 0.
            cdf = log_p.exp().cumsum(-1)
            uniform = torch.rand(cdf.shape[0], 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
            action = torch.searchsorted(cdf, uniform, right=True)
        else:
            action = log_p.argmax(-1, keepdim=True)
        return action, log_p.gather(-1, action)

    def weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per linear layer: ``([bindings, in, out], [bindings, 1, out])``."""
        grad = torch.is_grad_enabled()
        key = tuple((id(p), p._version) for p in self._params)
        if grad or key != self._key:
            self._weights = [
                (
                    torch.stack([ls[i].weight for ls in self.linears]).transpose(1, 2),
                    torch.stack([ls[i].bias for ls in self.linears]).unsqueeze(1),
                )
                for i in range(len(self.linears[0]))
            ]
            self._key = None if grad else key
        return self._weights

    def forward(self, rows: TensorDictBase, index: GroupBindingIndex | None) -> None:
        """Write ``action`` and ``action_log_prob`` into ``rows``; ``index=None``: one binding owns every row."""
        observation = rows.get(keys.OBSERVATION)
        flat_obs = observation.reshape(-1, observation.shape[-1])
        batch = rows.batch_size
        if index is None:
            x = flat_obs
            for layer in self.layers:
                x = (
                    F.linear(x, self.linears[0][layer].weight, self.linears[0][layer].bias)
                    if isinstance(layer, int)
                    else layer(x)
                )
            action, log_prob = self._act(x)
            rows.set(keys.ACTION, action.view(batch))
            rows.set(keys.ACTION_LOG_PROB, log_prob.view(batch))
            return
        layout = index.padded
        x = flat_obs.index_select(0, layout.gather.view(-1)).view(*layout.gather.shape, -1)
        weights = self.weights()
        for layer in self.layers:
            if isinstance(layer, int):
                w, b = weights[layer]
                x = torch.baddbmm(b, x, w)
            else:
                x = layer(x)
        logits = x.reshape(-1, x.shape[-1])
        if layout.slots is not None:
            logits = logits.index_select(0, layout.slots)
        action, log_prob = self._act(logits)
        out_action = torch.empty(batch.numel(), dtype=torch.int64, device=flat_obs.device)
        out_log_prob = torch.empty(batch.numel(), dtype=log_prob.dtype, device=flat_obs.device)
        out_action.index_copy_(0, layout.scatter, action.view(-1))
        out_log_prob.index_copy_(0, layout.scatter, log_prob.view(-1))
        rows.set(keys.ACTION, out_action.view(batch))
        rows.set(keys.ACTION_LOG_PROB, out_log_prob.view(batch))
