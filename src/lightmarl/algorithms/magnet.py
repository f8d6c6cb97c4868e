"""Magnetic mirror descent as a PPO loss option: a reverse-KL pull towards a slowly moving magnet policy.

Sokota et al. 2022, "A Unified Approach to Reinforcement Learning, Quantal Response Equilibria, and
Two-Player Zero-Sum Games" (arXiv:2206.05825). MMD's update is mirror descent with an extra proximal
term towards a *magnet* policy ``rho``: the policy ascends its advantage while paying
``alpha * KL(pi || rho)``; with an entropy bonus (a uniform magnet) the iterates converge to a
quantal response equilibrium in the last iterate, and a magnet that itself moves towards the
iterates (the paper's ``rho_{t+1} ∝ rho_t^{1 - eta} pi_{t+1}^eta``) carries them towards a Nash
equilibrium. [`Magnet`][lightmarl.algorithms.magnet.Magnet] is the setting PPO takes
(``algorithm.init_args.magnet``); [`MagnetLoss`][lightmarl.algorithms.magnet.MagnetLoss] the auxiliary
loss of PPO's update that holds the magnet network (a copy of the binding's policy, moved by
parameter mixing once per update) and adds the exact KL over the action set on each minibatch.

With ``mixing: 1`` and ``update_every: 1`` the magnet is the policy that collected the rollout, so the
term is the proximal KL of mirror descent, as the MMD of Rudolph et al. 2025 ("Reevaluating Policy
Gradient Methods for Imperfect-Information Games", github ``nathanlct/IIG-RL-Benchmark``, its
``kl_coef``) uses it; a smaller ``mixing`` makes it an exponential moving average of the policy, a
larger ``update_every`` with ``mixing: 1`` resets it periodically (R-NaD's schedule).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase
from torch.nn import functional as F

from lightmarl import keys
from lightmarl.algorithms.base import check_hyperparameters, loss_row_mask
from lightmarl.algorithms.on_policy import AuxiliaryLoss, AuxiliaryRows
from lightmarl.algorithms.rollout_rows import UpdateRows
from lightmarl.errors import ConfigError
from lightmarl.policies.base import Policy, masked_logits
from lightmarl.policies.contracts import Recurrent
from lightmarl.population import BindingTable

#: name of the magnet term in a PPO update's metrics (``loss_magnet``, ``kl_policy_magnet``).
MAGNET_LOSS = "magnet"


@dataclass(kw_only=True)
class Magnet:
    """The magnet of magnetic mirror descent (Sokota et al. 2022) for a PPO binding.

    Each minibatch adds ``coeff * KL(pi || magnet)`` over the binding's PPO rows (the exact KL of the
    two action distributions, legal actions only); the magnet is a frozen copy of the policy whose
    parameters move towards the policy's, ``magnet <- (1 - mixing) * magnet + mixing * policy``, at the
    start of every ``update_every``-th update. Needs discrete actions and a feed-forward policy.

    Examples:
        >>> from lightmarl.algorithms import PPO
        >>> PPO(entropy_coeff=0.05, magnet=Magnet(coeff=0.05, mixing=1.0)).magnet.coeff
        0.05
    """

    coeff: float = 0.05
    """Weight alpha of ``KL(pi || magnet)`` in the policy loss (next to ``entropy_coeff``, MMD's uniform magnet)."""
    mixing: float = 1.0
    """Share of the policy's parameters mixed into the magnet's at each magnet update (1: the magnet becomes
    the policy as it was before the update, the proximal term of mirror descent; smaller: a moving average)."""
    update_every: int = 1
    """Move the magnet at every k-th update of the binding (with ``mixing: 1``: reset it every k updates)."""

    def __post_init__(self) -> None:
        check_hyperparameters(
            ("magnet.coeff", self.coeff, self.coeff > 0, "magnet.coeff > 0"),
            ("magnet.mixing", self.mixing, 0 < self.mixing <= 1, "0 < magnet.mixing <= 1"),
            ("magnet.update_every", self.update_every, self.update_every >= 1, "magnet.update_every >= 1"),
        )

    def make_loss(self, binding_id: str, policy: Policy, table: BindingTable, loss_name: str) -> MagnetLoss:
        """The magnet term for ``policy``, gated by the rows of its main loss ``loss_name``.

        Raises:
            ConfigError: a group without discrete actions, or a recurrent policy.
        """
        field = f"binding {binding_id!r}: algorithm.magnet"
        if policy.group.action_kind != "discrete":
            raise ConfigError(
                f"{field}: magnetic mirror descent needs discrete actions (an exact KL over the action set); "
                f"group {policy.group.name!r} has {policy.group.action_kind} actions"
            )
        if isinstance(policy, Recurrent) and policy.is_recurrent:
            raise ConfigError(
                f"{field}: the magnet supports feed-forward policies; {type(policy).__name__} is recurrent"
            )
        return MagnetLoss(self, binding_id, policy, table, loss_name)


class MagnetLoss(AuxiliaryLoss):
    """The magnet term of a PPO update (an [`AuxiliaryLoss`][lightmarl.algorithms.on_policy.AuxiliaryLoss]).

    `rows` moves the magnet when its schedule says so (before any gradient step of the update, so the
    magnet never holds weights of the update it regularises) and picks the binding's PPO rows; `loss`
    gives ``loss_magnet = coeff * mean KL(pi || magnet)`` on a minibatch and, as diagnostics,
    ``kl_policy_magnet`` (the unweighted mean).

    Args:
        config: the magnet settings.
        binding_id: the learning binding.
        policy: its policy (the magnet starts as a copy of it).
        table: the population (for the row filter).
        loss_name: the main loss whose rows the term shares (``ppo``).
    """

    name = MAGNET_LOSS

    def __init__(self, config: Magnet, binding_id: str, policy: Policy, table: BindingTable, loss_name: str) -> None:
        self.config = config
        self.binding_id = binding_id
        self.policy = policy
        self.table = table
        self.loss_name = loss_name
        self.group = policy.group.name
        self.magnet = copy.deepcopy(policy).requires_grad_(False)
        self.magnet_updates = 0

    @torch.no_grad()
    def move_magnet(self) -> None:
        """``magnet <- (1 - mixing) * magnet + mixing * policy``, parameters and buffers alike."""
        rate = self.config.mixing
        source = self.policy.state_dict()
        for name, value in self.magnet.state_dict().items():
            if value.is_floating_point():
                value.lerp_(source[name].to(value.dtype), rate)
            else:
                value.copy_(source[name])
        self.magnet_updates += 1

    def rows(self, rows: UpdateRows, *, updates: int, fraction_done: float) -> AuxiliaryRows:
        del fraction_done
        if updates % self.config.update_every == 0:
            self.move_magnet()
        group_rows = rows.data.get(self.group)
        # The PPO rows: the term regularises PPO's policy loss and learns from no other row.
        mask = rows.learnable(loss_row_mask(group_rows, self.table, self.loss_name, binding_id=self.binding_id))
        return AuxiliaryRows(
            metric=f"{self.name}_rows",
            mask=mask,
            entries={(self.group, "magnet_mask"): mask},
            coeff=self.config.coeff,
        )

    def loss(self, batch: TensorDictBase, prepared: AuxiliaryRows) -> dict[str, torch.Tensor]:
        mask = batch.get((self.group, "magnet_mask"))
        inputs = self._inputs(batch)
        policy_log_probs = self._log_probs(self.policy, inputs)
        with torch.no_grad():
            magnet_log_probs = self._log_probs(self.magnet, inputs)
        kl = reverse_kl(policy_log_probs, magnet_log_probs)
        count = mask.sum().clamp_min(1)
        mean_kl = (kl * mask).sum() / count
        return {f"loss_{self.name}": prepared.coeff * mean_kl, "kl_policy_magnet": mean_kl.detach()}

    def to(self, device: torch.device) -> None:
        self.magnet.to(device)

    def state_dict(self) -> dict:
        """The magnet's weights and schedule count (a resumed run continues from the same magnet)."""
        return {"weights": copy.deepcopy(self.magnet.state_dict()), "updates": self.magnet_updates}

    def load_state_dict(self, state: dict) -> None:
        self.magnet.load_state_dict(state["weights"])
        self.magnet_updates = int(state.get("updates", 0))

    def _inputs(self, batch: TensorDictBase) -> TensorDict:
        """A fresh TensorDict with only what a policy reads, so the forward passes leave the batch untouched."""
        rows = batch.get(self.group)
        entries = {keys.OBSERVATION: rows.get(keys.OBSERVATION)}
        for name in (keys.ACTION_MASK, keys.AGENT_ID):
            value = rows.get(name, None)
            if value is not None:
                entries[name] = value
        inner = TensorDict(entries, batch_size=rows.batch_size)
        return TensorDict({self.group: inner}, batch_size=batch.batch_size)

    def _log_probs(self, policy: Policy, inputs: TensorDict) -> torch.Tensor:
        logits = policy(inputs.copy()).get((self.group, keys.LOGITS))
        return F.log_softmax(masked_logits(logits, inputs.get((self.group, keys.ACTION_MASK), None)), dim=-1)


def reverse_kl(policy_log_probs: torch.Tensor, magnet_log_probs: torch.Tensor) -> torch.Tensor:
    """``KL(pi || magnet)`` per row from log-probabilities; illegal actions (probability 0) add nothing."""
    p = policy_log_probs.exp()
    terms = torch.where(p > 0, p * (policy_log_probs - magnet_log_probs), torch.zeros_like(p))
    return terms.sum(-1)
