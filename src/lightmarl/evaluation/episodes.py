"""Evaluation episodes: per-binding returns of a population on fresh, seeded env copies."""

from __future__ import annotations

import logging
from typing import Literal

import torch
from torchrl.envs.utils import ExplorationType

from lightmarl import keys
from lightmarl.data.rollout import RolloutLoop, RolloutStep
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.population import BindingTable

WinRule = Literal["none", "highest_return", "positive_return"]

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_episodes(
    policy: MultiAgentPolicy,
    env_config: EnvConfig,
    num_episodes: int,
    seed: int,
    num_envs: int | None = None,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
    winner: WinRule = "none",
) -> dict[str, dict[str, float]]:
    """Play ``num_episodes`` episodes and report metrics grouped by binding.

    Env copy ``i`` is reset with ``seed + i``, so two calls with the same seed see the same
    start states: scores of different policies (or checkpoints) are comparable. Copy ``i``
    plays the map of training env copy ``i`` (its ``per_env`` override, if any).

    Args:
        policy: the population to evaluate.
        env_config: the env to play in (its transforms apply, with frozen statistics: see
            ``EnvConfig.make_vector(evaluation=True)``).
        num_episodes: complete episodes to play (the first ones to finish count).
        seed: base seed of the env copies.
        num_envs: env copies played at once (default ``min(num_episodes, env_config.num_envs)``).
        deterministic: take each policy's mode action instead of sampling.
        device: where the policies run.
        winner: how an episode's winner is decided, for ``win_rate`` / ``draw_rate``:
            ``highest_return`` (head-to-head: the binding whose agents' mean return is
            strictly highest wins; a tie for highest is a draw for the tied bindings),
            ``positive_return`` (games that pay a positive return for a win, e.g. +1 / -1),
            or ``none``.

    Returns:
        binding id -> ``episode_return`` (mean over episodes of the mean over the binding's
        agents), ``episode_return_std``, ``episode_length``, ``episodes`` and, with a
        ``winner`` rule, ``win_rate`` and ``draw_rate``.
    """
    if winner not in ("none", "highest_return", "positive_return"):
        raise ValueError(f"winner: {winner!r} is not one of ['none', 'highest_return', 'positive_return']")
    count = num_envs or min(num_episodes, env_config.num_envs)
    env = env_config.make_vector(seed=seed, num_envs=count, evaluation=True)
    table = policy.table
    unplayed = [i for i in table.per_env_maps if i >= count]
    if unplayed:
        log.warning(
            "evaluation plays %d env copies: the agent_binding_map.per_env overrides of copies %s are not played",
            count,
            unplayed,
        )
    mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
    scorer = EpisodeScorer(table, list(env.spec.groups.values()), count, num_episodes, winner)
    loop = RolloutLoop(env, policy, mode, device)
    try:
        loop.run(scorer)
    finally:
        loop.close()
    results, outcomes = scorer.results, scorer.outcomes
    summary = {}
    for binding, episodes in results.items():
        if not episodes:  # plays only in env copies that finished no counted episode
            continue
        r = torch.tensor([x[0] for x in episodes])
        summary[binding] = {
            "episode_return": float(r.mean()),
            "episode_return_std": float(r.std()) if len(r) > 1 else 0.0,
            "episode_length": float(sum(x[1] for x in episodes) / len(episodes)),
            "episodes": float(len(episodes)),
        }
        if winner != "none":
            played = outcomes[binding]
            summary[binding]["win_rate"] = played.count("win") / len(played)
            summary[binding]["draw_rate"] = played.count("draw") / len(played)
    return summary


class EpisodeScorer:
    """The :class:`~lightmarl.data.rollout.StepRecorder` of evaluation: per-binding returns, lengths and outcomes.

    Counts the first ``num_episodes`` episodes to finish (in env copy order within a step).

    Args:
        table: the population's binding table.
        groups: the env's agent groups.
        num_envs: env copies stepped.
        num_episodes: episodes to count.
        winner: the win rule of :func:`evaluate_episodes`.
    """

    def __init__(
        self, table: BindingTable, groups: list[GroupSpec], num_envs: int, num_episodes: int, winner: WinRule
    ) -> None:
        self.table = table
        self.groups = groups
        self.num_envs = num_envs
        self.num_episodes = num_episodes
        self.winner = winner
        self.returns = {g.name: torch.zeros(num_envs, g.num_agents) for g in groups}
        self.lengths = {g.name: torch.zeros(num_envs, g.num_agents, dtype=torch.int64) for g in groups}
        #: binding id -> ``(return, length)`` per counted episode it played.
        self.results: dict[str, list[tuple[float, int]]] = {b: [] for b in table.active_ids}
        #: binding id -> ``win`` / ``draw`` / ``loss`` per counted episode (with a ``winner`` rule).
        self.outcomes: dict[str, list[str]] = {b: [] for b in table.active_ids}
        self.finished = 0

    @property
    def done(self) -> bool:
        return self.finished >= self.num_episodes

    def record(self, step: RolloutStep) -> None:
        envs = step.envs
        for g in self.groups:
            valid = step.td.get((g.name, keys.VALID)).cpu()
            # Every reward counts, also one arriving on an agent's invalid row (a turn-based
            # game's loss lands on the winner's turn); absent agents of parallel envs get 0.
            self.returns[g.name][envs] += step.next[g.name][keys.REWARD]
            self.lengths[g.name][envs] += valid.long()
        for e in (torch.nonzero(step.ended).flatten() + envs.start).tolist():
            if self.done:
                break
            self.finished += 1
            episode: dict[str, float] = {}
            for g in self.groups:
                returns, lengths = self.returns[g.name], self.lengths[g.name]
                binding_of = self.table.bindings_of_envs(g.name, self.num_envs)[e]
                for index in binding_of.unique().tolist():
                    agents = binding_of == index
                    binding_id = self.table.ids[index]
                    episode[binding_id] = float(returns[e, agents].mean())
                    self.results[binding_id].append((episode[binding_id], int(lengths[e, agents].max())))
                returns[e] = 0
                lengths[e] = 0
            for binding_id, outcome in _outcomes(episode, self.winner).items():
                self.outcomes[binding_id].append(outcome)


def _outcomes(episode_returns: dict[str, float], winner: WinRule) -> dict[str, str]:
    """``win`` / ``draw`` / ``loss`` of each binding that played one episode."""
    if winner == "none":
        return {}
    if winner == "positive_return":
        # Board games pay +1 / 0 / -1: a zero return is a draw, never a loss for both sides.
        return {b: "win" if r > 0 else "draw" if r == 0 else "loss" for b, r in episode_returns.items()}
    best = max(episode_returns.values())
    leaders = [b for b, r in episode_returns.items() if r == best]
    return {b: ("draw" if len(leaders) > 1 else "win") if b in leaders else "loss" for b in episode_returns}
