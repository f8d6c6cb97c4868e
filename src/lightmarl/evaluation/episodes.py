"""Evaluation episodes: per-binding returns of a population on fresh, seeded env copies."""

from __future__ import annotations

import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.data import schema
from lightmarl.envs.pettingzoo import PettingZooEnvConfig
from lightmarl.policies.multi_agent import MultiAgentPolicy


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
    start states: scores of different policies (or checkpoints) are comparable.

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
                        for index, agents in table.groups[g.name].agents_of_binding.items():
                            results[table.ids[index]].append(
                                (float(returns[g.name][e, agents].mean()), int(lengths[g.name][e, agents].max()))
                            )
                        returns[g.name][e] = 0
                        lengths[g.name][e] = 0
    finally:
        env.close()
    summary = {}
    for binding, episodes in results.items():
        r = torch.tensor([x[0] for x in episodes])
        summary[binding] = {
            "episode_return": float(r.mean()),
            "episode_return_std": float(r.std()) if len(r) > 1 else 0.0,
            "episode_length": float(sum(x[1] for x in episodes) / len(episodes)),
            "episodes": float(len(episodes)),
        }
    return summary
