"""Action distributions for the discrete action kinds, as TorchRL's ``ProbabilisticActor`` uses them.

A ``MultiDiscrete(nvec)`` action is ``len(nvec)`` independent choices; a policy emits their
logits side by side (``sum(nvec)`` numbers, `GroupSpec.num_actions`) and
[`MultiCategorical`][lightmarl.policies.distributions.MultiCategorical] turns them into one distribution over the action vector whose
``log_prob`` and ``entropy`` are sums over the sub-actions, so PPO's ratio and entropy bonus
(``[*batch]`` per row) work unchanged.

A policy head for any discrete group (what [`MLPActorCritic`][lightmarl.policies.mlp.MLPActorCritic] needs)::

    distribution_class, distribution_kwargs = discrete_distribution(group)
    in_keys = {"logits": (group.name, "logits")}
    if group.has_action_mask:
        in_keys["mask"] = (group.name, "action_mask")
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=[(group.name, "observation")], out_keys=[(group.name, "logits")]),
        in_keys=in_keys,  # net ends in group.num_actions logits
        out_keys=[(group.name, "action")],
        distribution_class=distribution_class,
        distribution_kwargs=distribution_kwargs,
        return_log_prob=True,
        log_prob_key=(group.name, "action_log_prob"),
    )
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import distributions as D
from torchrl.modules import MaskedCategorical

from lightmarl.envs.spec import GroupSpec


class MultiCategorical(D.Distribution):
    """Independent categoricals over consecutive slices of ``logits``: one per ``MultiDiscrete`` entry.

    Samples are ``[*batch, len(nvec)]`` int64; ``log_prob`` and ``entropy`` sum over the
    sub-actions (``[*batch]``); ``mode`` (and ``deterministic_sample``, which TorchRL's
    deterministic exploration reads) takes each sub-action's argmax.

    Args:
        logits: ``[*batch, sum(nvec)]`` unnormalised log-probabilities, sub-actions side by side.
        nvec: the number of choices of each sub-action.
        mask: optional bool ``[*batch, sum(nvec)]``; ``False`` choices get (finite) minimal
            logits, so they are never sampled and their log-probability and entropy terms vanish.

    Example:
        >>> dist = MultiCategorical(torch.zeros(2, 5), nvec=(2, 3))
        >>> dist.sample().shape
        torch.Size([2, 2])
        >>> dist.log_prob(torch.tensor([[0, 2], [1, 0]]))  # log(1/2) + log(1/3)
        tensor([-1.7918, -1.7918])
    """

    arg_constraints: dict[str, Any] = {}  # noqa: RUF012 -- torch's Distribution protocol
    has_rsample = False

    def __init__(self, logits: torch.Tensor, nvec: Sequence[int], mask: torch.Tensor | None = None) -> None:
        self.nvec = tuple(int(n) for n in nvec)
        if not self.nvec or min(self.nvec) < 1:
            raise ValueError(f"MultiCategorical: nvec must be positive choice counts, got {nvec!r}")
        if logits.shape[-1] != sum(self.nvec):
            raise ValueError(
                f"MultiCategorical: logits end in {logits.shape[-1]} entries, expected sum(nvec) = {sum(self.nvec)}"
            )
        if mask is not None:
            # Finite, not -inf: an all-masked slice stays a (uniform) distribution and no NaN appears.
            logits = logits.masked_fill(~mask.bool(), torch.finfo(logits.dtype).min)
        self.logits = logits
        self.categoricals = [D.Categorical(logits=part, validate_args=False) for part in logits.split(self.nvec, -1)]
        super().__init__(batch_shape=logits.shape[:-1], event_shape=torch.Size([len(self.nvec)]), validate_args=False)

    def sample(self, sample_shape: torch.Size | Sequence[int] = ()) -> torch.Tensor:
        with torch.no_grad():
            return torch.stack([c.sample(torch.Size(sample_shape)) for c in self.categoricals], dim=-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        parts = value.long().unbind(-1)
        return torch.stack([c.log_prob(v) for c, v in zip(self.categoricals, parts, strict=True)], dim=-1).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([c.entropy() for c in self.categoricals], dim=-1).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return torch.stack([c.logits.argmax(-1) for c in self.categoricals], dim=-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode

    @property
    def probs(self) -> torch.Tensor:
        """``[*batch, sum(nvec)]``: each sub-action's probabilities, side by side."""
        return torch.cat([c.probs for c in self.categoricals], dim=-1)


@D.register_kl(MultiCategorical, MultiCategorical)
def _kl_multi_categorical(p: MultiCategorical, q: MultiCategorical) -> torch.Tensor:
    if p.nvec != q.nvec:
        raise ValueError(f"KL between MultiCategoricals of different nvec: {p.nvec} and {q.nvec}")
    return torch.stack(
        [D.kl_divergence(a, b) for a, b in zip(p.categoricals, q.categoricals, strict=True)], dim=-1
    ).sum(-1)


#: logit of an illegal action (finite, so that an all-illegal row stays a valid distribution).
MASKED_LOGIT = -1e9


def discrete_distribution(group: GroupSpec) -> tuple[type[D.Distribution], dict[str, Any]]:
    """``(distribution_class, distribution_kwargs)`` of a ``ProbabilisticActor`` for a discrete group.

    The actor's network emits ``group.num_actions`` logits; pass ``mask`` in the actor's
    ``in_keys`` when ``group.has_action_mask``. ``Discrete``: TorchRL's ``Categorical`` /
    ``MaskedCategorical``; ``MultiDiscrete``: [`MultiCategorical`][lightmarl.policies.distributions.MultiCategorical] over ``group.action_nvec``.

    Raises:
        ValueError: for a continuous group, naming it.
    """
    if group.action_kind == "discrete":
        if group.has_action_mask:
            # A finite "minus infinity": rows of absent agents carry all-False masks, which give
            # NaN with -inf; with -1e9 they are uniform (and never enter a loss: they are invalid).
            return MaskedCategorical, {"neg_inf": MASKED_LOGIT}
        return D.Categorical, {}
    if group.action_kind == "multi_discrete":
        return MultiCategorical, {"nvec": group.action_nvec}
    raise ValueError(f"group {group.name!r} has {group.action_kind} actions; a categorical head needs discrete ones")
