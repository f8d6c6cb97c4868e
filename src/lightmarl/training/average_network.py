"""The league's shown policy as one network: a mixture of snapshots distilled into a binding.

A `MetaStrategyPlayer` shows a mixture of its snapshots (a Nash
mixture, a linear average); an export or an ONNX graph holds one network per binding. NFSP
(Heinrich & Silver 2016) keeps an *average network* for this: a network trained by supervised
learning on the actions its past best responses took. `distill_mixture` does the same for
a league's mixture with the kickstarting loss of `lightmarl.algorithms.distillation`
(`KickstarterLoss`, ``KL(teacher || student)``): the
mixture plays against itself (one member per seat and episode, drawn with its meta weight), and
on every row the student learns the action probabilities of the member that acted. The
expected loss is least where, at each information state, the student plays the members weighted
by their meta weight times their own probability of reaching that state: the mixture's
realization-equivalent behaviour policy, the one OpenSpiel's exploitability measures
(`mixture_policy`).

`AverageNetworkConfig` is an entry of the league's ``average_networks``: the league keeps
a frozen binding ``<player>_average`` of the player's policy class and distils its shown mixture
into it every ``every_n_iterations`` iterations and after the last; the binding is saved in
checkpoints and exports like any other (``load_population``, ONNX).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict

from lightmarl import keys
from lightmarl.algorithms.distillation import KickstarterLoss
from lightmarl.data.collector import RolloutCollector
from lightmarl.data.rollout import RolloutStep
from lightmarl.envs.config import EnvConfig
from lightmarl.evaluation.exploitability import policy_probabilities
from lightmarl.policies.base import Policy, UniformRandomPolicy
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding


@dataclass
class AverageNetworkConfig:
    """One average network of a league (``league.average_networks``).

    Attributes:
        player: the binding of the meta-strategy player whose shown mixture is distilled.
        binding: id of the frozen binding that holds the network (default ``<player>_average``);
            same policy class and kwargs as the player's.
        every_n_iterations: distil every this many training iterations, and after the last.
        frames: env steps of the mixture playing itself collected for each distillation.
        num_envs: env copies of that play (default: the recipe's).
        epochs: passes over the collected rows. Too few gradient steps leave the network far
            from the mixture (on Leduc, 4 epochs of 60,000 frames left it 0.8 more exploitable
            than the mixture, 30 epochs within 0.03: ``benchmarks/average_network_offline.py``).
        minibatch_size: rows per gradient step.
        lr: Adam's learning rate.
        seed: seed of the member draws, env copies and minibatch order.
        explore: fraction of episodes in which one seat, drawn uniformly, plays uniformly random
            legal actions instead of a member; that seat's rows are not learned from. The mixture
            playing itself seldom reaches the states a best response steers into; an exploring
            opponent reaches them, and the acting member's probabilities stay the right target
            there (the opponent's reach is the same for every member, so it cancels).
    """

    player: str
    binding: str | None = None
    every_n_iterations: int = 100
    frames: int = 60_000
    num_envs: int | None = None
    epochs: int = 30
    minibatch_size: int = 1024
    lr: float = 0.001
    seed: int = 0
    explore: float = 0.0

    def __post_init__(self) -> None:
        for name in ("every_n_iterations", "frames", "epochs", "minibatch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"league.average_networks.{name}: expected a positive integer, got {value!r}")
        if self.num_envs is not None and (not isinstance(self.num_envs, int) or self.num_envs < 1):
            raise ValueError(f"league.average_networks.num_envs: expected a positive integer, got {self.num_envs!r}")
        if not self.lr > 0:
            raise ValueError(f"league.average_networks.lr: expected a positive number, got {self.lr!r}")
        if isinstance(self.explore, bool) or not isinstance(self.explore, int | float) or not 0 <= self.explore < 1:
            raise ValueError(f"league.average_networks.explore: expected a number in [0, 1), got {self.explore!r}")

    @property
    def binding_id(self) -> str:
        return self.binding or f"{self.player}_average"


EXPLORER = "explorer"


def draw_seats(
    rng: np.random.Generator, members: Sequence[str], weights: np.ndarray, seats: int, explore: float
) -> list[str]:
    """One episode's seating: a member per seat drawn with ``weights``; with probability ``explore``
    (and more than one seat) one seat, drawn uniformly, is the `EXPLORER` instead."""
    drawn = [members[int(k)] for k in rng.choice(len(members), size=seats, p=weights)]
    if seats > 1 and rng.random() < explore:
        drawn[int(rng.integers(seats))] = EXPLORER
    return drawn


class _MixtureSeating:
    """Every seat of every env copy plays one member, drawn with its weight when the copy's episode ends;
    in a fraction ``explore`` of episodes one seat plays the uniformly random `EXPLORER` instead."""

    def __init__(
        self,
        table: BindingTable,
        members: Sequence[str],
        weights: np.ndarray,
        seats: Sequence[Sequence[str]],
        num_envs: int,
        seed: int,
        explore: float = 0.0,
    ):
        self.table = table
        self.members = list(members)
        self.weights = weights
        self.explore = explore
        self.seats = [list(s) for s in seats]
        self.agents = list(table.env_spec.possible_agents)
        self.rng = np.random.default_rng(seed)
        # Copy i starts with member i on its first seat: every member acts from the start.
        self.drawn = {i: self._draw() for i in range(num_envs)}
        for i in range(min(num_envs, len(self.members))):
            self.drawn[i][0] = self.members[i]

    def _draw(self) -> list[str]:
        return draw_seats(self.rng, self.members, self.weights, len(self.seats), self.explore)

    def agent_binding_map(self) -> dict[str, Any]:
        per_env = {
            i: [next(m for m, seat in zip(drawn, self.seats) if agent in seat) for agent in self.agents]
            for i, drawn in self.drawn.items()
        }
        return {"default": per_env[0], "per_env": per_env}

    def __call__(self, step: RolloutStep) -> None:
        ended = torch.nonzero(step.ended).flatten().tolist()
        if not ended:
            return
        for j in ended:
            self.drawn[step.envs.start + j] = self._draw()
        self.table.set_agent_binding_map(cast(Any, self.agent_binding_map()))


def distill_mixture(
    student: Policy,
    members: Sequence[Policy],
    weights: Sequence[float],
    env_config: EnvConfig,
    seats: Sequence[Sequence[str]],
    config: AverageNetworkConfig,
    rollout_steps: int,
    seed: int = 0,
) -> dict[str, float]:
    """Train ``student`` (in place) towards the behaviour of the mixture ``members`` x ``weights``.

    Args:
        student: the average network (a policy of the members' class, acting for their group).
        members: the mixture's policies (frozen, read only).
        weights: each member's meta weight.
        env_config: the env the mixture plays.
        seats: the env's agents of each seat.
        config: frames, epochs, minibatch size, learning rate.
        rollout_steps: env steps per copy per rollout of the collection.
        seed: seed of the draws, env copies and minibatch order (added to ``config.seed``).

    Returns:
        ``kl``: the mean ``KL(member || student)`` over the collected rows after training,
        ``kl_before`` the same before it, and ``rows``: how many rows it learned from.
    """
    weights_array = np.asarray(weights, dtype=np.float64)
    weights_array = weights_array / weights_array.sum()
    seed = config.seed + seed
    num_envs = config.num_envs or env_config.num_envs
    group = student.group
    env_spec = env_config.spec()
    ids = [f"member_{k}" for k in range(len(members))]
    # The table is plain data: the members' policies are the objects passed in.
    kind = f"{type(members[0]).__module__}.{type(members[0]).__qualname__}"
    bindings = [PolicyBinding(id=b, class_path=kind, trainable=False) for b in ids]
    explorer = UniformRandomPolicy(group, seed=seed)
    bindings.append(
        PolicyBinding(id=EXPLORER, class_path=f"{UniformRandomPolicy.__module__}.UniformRandomPolicy", trainable=False)
    )
    table = BindingTable(bindings, env_spec, [ids[0]] * len(env_spec.possible_agents), num_envs=num_envs)
    table.reserve({b: group.name for b in [*ids, EXPLORER]})
    seating = _MixtureSeating(table, ids, weights_array, seats, num_envs, seed, config.explore)
    table.set_agent_binding_map(cast(Any, seating.agent_binding_map()))
    policies = {b: copy.deepcopy(m).eval().requires_grad_(False) for b, m in zip(ids, members)}
    population = MultiAgentPolicy({**policies, EXPLORER: explorer}, table)
    device = next(student.parameters()).device
    torch.manual_seed(seed)
    env = env_config.make_vector(seed=seed, num_envs=num_envs)
    collector = RolloutCollector(env, population, rollout_steps, device=device, on_step=seating)
    observations, masks, agent_ids, targets = [], [], [], []
    try:
        for _ in range(math.ceil(config.frames / (num_envs * rollout_steps))):
            experience = collector.collect()
            rows = experience.get(group.name)
            # The explorer's rows are not the mixture's play: they are left out.
            valid = rows.get(keys.VALID) & (rows.get(keys.BINDING_ID) != table.index[EXPLORER])
            binding = rows.get(keys.BINDING_ID)[valid]
            obs = rows.get(keys.OBSERVATION)[valid]
            mask = rows.get(keys.ACTION_MASK, None)
            mask = mask[valid] if mask is not None else torch.ones(len(obs), group.num_actions, dtype=torch.bool)
            agent = rows.get(keys.AGENT_ID)[valid]
            logp = torch.zeros(mask.shape, dtype=torch.float32, device=device)
            for b, policy in policies.items():
                where = binding == table.index[b]
                if bool(where.any()):
                    probs = policy_probabilities(policy, group.name, obs[where], mask[where], agent[where])
                    # Illegal actions have probability 0 (log -inf): the KL skips them, as for a neural teacher.
                    legal = mask[where]
                    logp[where] = torch.where(legal, probs.clamp_min(1e-30).log(), float("-inf")).float()
            observations.append(obs.clone())
            masks.append(mask.clone())
            agent_ids.append(agent.clone())
            targets.append(logp)
    finally:
        collector.close()
    data = {
        keys.OBSERVATION: torch.cat(observations).unsqueeze(1),
        keys.ACTION_MASK: torch.cat(masks).unsqueeze(1),
        keys.AGENT_ID: torch.cat(agent_ids).unsqueeze(1),
        "teacher_target": torch.cat(targets).unsqueeze(1),
    }
    n = len(data[keys.OBSERVATION])
    data[keys.ACTION] = torch.zeros(n, 1, dtype=torch.int64, device=device)
    data["distill_mask"] = torch.ones(n, 1, dtype=torch.bool, device=device)
    rows_td = TensorDict({group.name: TensorDict(data, batch_size=[n, 1])}, batch_size=[n])
    loss = KickstarterLoss(student, teacher=policies[ids[0]])
    optimizer = torch.optim.Adam(student.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(seed)
    student.train()

    def mean_kl() -> float:
        with torch.no_grad():
            return float(loss(rows_td)["loss_distill"])

    before = mean_kl()
    for _ in range(config.epochs):
        order = torch.randperm(n, generator=generator).to(device)
        for start in range(0, n, config.minibatch_size):
            batch = rows_td[order[start : start + config.minibatch_size]]
            optimizer.zero_grad()
            loss(batch)["loss_distill"].backward()
            optimizer.step()
    student.eval()
    return {"kl": mean_kl(), "kl_before": before, "rows": float(n)}
