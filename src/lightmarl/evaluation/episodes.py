"""Evaluation episodes: per-binding returns of a population on fresh, seeded env copies."""

from __future__ import annotations

import logging

import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.data import schema
from lightmarl.envs.pettingzoo import PettingZooEnvConfig
from lightmarl.policies.multi_agent import MultiAgentPolicy

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_episodes(
    policy: MultiAgentPolicy,
    env_config: PettingZooEnvConfig,
    num_episodes: int,
    seed: int,
    num_envs: int | None = None,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
) -> dict[str, dict[str, float]]:
    """Play ``num_episodes`` episodes and report metrics grouped by binding.

    Env copy ``i`` is reset with ``seed + i``, so two calls with the same seed see the same
    start states: scores of different policies (or checkpoints) are comparable. Copy ``i``
    plays the map of training env copy ``i`` (its ``per_env`` override, if any).

    Args:
        policy: the population to evaluate.
        env_config: the env to play in.
        num_episodes: complete episodes to play (the first ones to finish count).
        seed: base seed of the env copies.
        num_envs: env copies played at once (default ``min(num_episodes, env_config.num_envs)``).
        deterministic: take each policy's mode action instead of sampling.
        device: where the policies run.

    Returns:
        binding id -> ``episode_return`` (mean over episodes of the mean over the binding's
        agents), ``episode_return_std``, ``episode_length`` and ``episodes``.
    """
    count = num_envs or min(num_episodes, env_config.num_envs)
    env = env_config.make_vector(seed=seed, num_envs=count)
    table = policy.table
    unplayed = [i for i in table.per_env_maps if i >= count]
    if unplayed:
        log.warning(
            "evaluation plays %d env copies: the agent_binding_map.per_env overrides of copies %s are not played",
            count,
            unplayed,
        )
    groups = list(env.spec.groups.values())
    returns = {g.name: torch.zeros(count, g.num_agents) for g in groups}
    lengths = {g.name: torch.zeros(count, g.num_agents, dtype=torch.int64) for g in groups}
    results: dict[str, list[tuple[float, int]]] = {b: [] for b in table.active_ids}
    finished = 0
    try:
        env.reset()
        mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
        with set_exploration_type(mode):
            while finished < num_episodes:
                td = env.observation_td().to(device)
                policy(td)
                nxt, ended = env.step({g.name: td.get((g.name, schema.ACTION)).cpu() for g in groups})
                for g in groups:
                    valid = td.get((g.name, schema.VALID)).cpu()
                    returns[g.name] += nxt[g.name]["reward"] * valid
                    lengths[g.name] += valid.long()
                for e in torch.nonzero(ended).flatten().tolist():
                    if finished >= num_episodes:
                        break
                    finished += 1
                    for g in groups:
                        binding_of = table.bindings_of_envs(g.name, count)[e]
                        for index in binding_of.unique().tolist():
                            agents = binding_of == index
                            results[table.ids[index]].append(
                                (float(returns[g.name][e, agents].mean()), int(lengths[g.name][e, agents].max()))
                            )
                        returns[g.name][e] = 0
                        lengths[g.name][e] = 0
    finally:
        env.close()
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
    return summary
