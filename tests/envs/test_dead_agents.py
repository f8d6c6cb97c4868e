"""Agents that leave (and join) mid-episode: validity, episode ends, PPO updates and episode metrics.

Two envs: ``StaggeredEnv`` below, whose agents are present over fixed step intervals (so every
expected row is known), and butterfly ``knights_archers_zombies``, whose agents die when a
zombie touches them or they touch a border.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from gymnasium import spaces

from expectations import assert_finite_metrics
from lightmarl import keys
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation import evaluate_episodes
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding

#: agent -> (first step present, step at which it has left): agent_2 joins after one step
PRESENT = {"agent_0": (0, 2), "agent_1": (0, 4), "agent_2": (1, 6)}
EPISODE = max(stop for _, stop in PRESENT.values())


class StaggeredEnv:
    """Agents present over the fixed intervals of :data:`PRESENT`, each paid 1 per step present.

    An agent is terminated on its last step and leaves ``agents``; the episode ends when the
    last one has left. So an agent's episode return is its number of steps present.
    """

    metadata = {"name": "staggered_v0", "render_modes": []}
    possible_agents = list(PRESENT)

    def __init__(self):
        self.agents = []
        self.t = 0

    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _present(self):
        return [a for a, (start, stop) in PRESENT.items() if start <= self.t < stop]

    def _observe(self, agent):
        return np.array([self.t / EPISODE, self.possible_agents.index(agent) / 2, 1.0], np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = self._present()
        return {a: self._observe(a) for a in self.agents}, {}

    def step(self, actions):
        acting = self.agents
        self.t += 1
        self.agents = self._present()
        # The agents that acted (final observation where they left) and any that joined.
        observations = {a: self._observe(a) for a in dict.fromkeys([*acting, *self.agents])}
        terminations = {a: self.t >= PRESENT[a][1] for a in acting}
        return observations, dict.fromkeys(acting, 1.0), terminations, dict.fromkeys(acting, False), {}

    def close(self):
        pass


STAGGERED = PettingZooEnvConfig(env_fn=f"{__name__}.StaggeredEnv", num_envs=2)


def expected_presence(steps: int) -> torch.Tensor:
    """``[steps, agents]``: whether each agent acts at each step (episodes back to back)."""
    t = torch.arange(steps) % EPISODE
    return torch.stack([(start <= t) & (t < stop) for start, stop in PRESENT.values()], dim=-1)


def random_bindings(config: PettingZooEnvConfig, ids: list[str], agent_map: list[str] | None = None):
    spec = config.spec()
    table = BindingTable([PolicyBinding(b, class_path="x.y") for b in ids], spec, agent_map)
    group = spec.groups["agent"]
    return MultiAgentPolicy({b: UniformRandomPolicy(group, seed=i) for i, b in enumerate(ids)}, table)


def test_rows_of_absent_agents_are_invalid_and_each_agents_last_row_is_terminated():
    collector = RolloutCollector(STAGGERED.make_vector(seed=0), random_bindings(STAGGERED, ["main"]), 2 * EPISODE)
    rows = collector.collect()
    valid = rows["agent", keys.VALID]
    presence = expected_presence(2 * EPISODE).expand(2, -1, -1)
    assert torch.equal(valid, presence)
    t = torch.arange(2 * EPISODE) % EPISODE
    last = torch.stack([t == stop - 1 for _, stop in PRESENT.values()], dim=-1).expand(2, -1, -1)
    nxt = rows["next", "agent"]
    assert torch.equal(nxt[keys.TERMINATED].squeeze(-1), last)
    assert not nxt[keys.TRUNCATED].any()
    assert torch.equal(nxt[keys.DONE].squeeze(-1), last)
    # Absent rows carry nothing: no reward, no episode end, zero observations.
    assert torch.equal(nxt[keys.REWARD].squeeze(-1), presence.float())
    assert not rows["agent", keys.OBSERVATION][~valid].any()
    # Each env copy played two episodes: its episode id changes exactly when the last agent has left.
    ids = rows["agent", keys.EPISODE_ID][..., 0]
    assert torch.equal(ids[:, :EPISODE], ids[:, :1].expand(-1, EPISODE))
    assert (ids[:, EPISODE:] != ids[:, :1]).all()


def test_episode_metrics_count_each_agents_own_episode():
    ids = ["a0", "a1", "a2"]
    population = random_bindings(STAGGERED, ids, ids)
    collector = RolloutCollector(STAGGERED.make_vector(seed=0), population, 2 * EPISODE)
    collector.collect()
    summary = collector.episode_summary()
    results = evaluate_episodes(population, STAGGERED, num_episodes=3, seed=0)
    for binding, (start, stop) in zip(ids, PRESENT.values()):
        present = float(stop - start)
        assert summary[binding] == {"episode_return": present, "episode_length": present, "episodes": 4.0}
        assert results[binding]["episode_return"] == present and results[binding]["episode_length"] == present
        assert results[binding]["episodes"] == 3.0
    # One binding for all three agents: the mean of their returns, the longest stay among them.
    together = RolloutCollector(STAGGERED.make_vector(seed=0), random_bindings(STAGGERED, ["main"]), EPISODE)
    together.collect()
    stays = [stop - start for start, stop in PRESENT.values()]
    assert together.episode_summary()["main"]["episode_return"] == pytest.approx(sum(stays) / 3)
    assert together.episode_summary()["main"]["episode_length"] == max(stays)


def ppo_update(experience, table, group, critic: str):
    """One PPO update from fixed initial weights and minibatch order: its metrics and the new weights."""
    torch.manual_seed(0)
    policy = MLPActorCritic(group, hidden_sizes=(16,), critic=critic)
    unit = PPO(epochs=2, minibatch_size=6).make_unit_trainer("main", policy, table)
    torch.manual_seed(1)
    metrics = unit.update(experience, unit.make_optimizer(), PlainStepper())
    return metrics, torch.cat([p.detach().flatten() for p in policy.parameters()])


@pytest.mark.parametrize("critic", ["local", "centralized"])
def test_ppo_learns_nothing_from_the_rows_of_absent_agents(critic):
    spec = STAGGERED.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    torch.manual_seed(0)
    actor = MLPActorCritic(group, hidden_sizes=(16,), critic=critic)
    collector = RolloutCollector(STAGGERED.make_vector(seed=0), MultiAgentPolicy({"main": actor}, table), 9)
    clean = collector.collect()
    absent = ~clean["agent", keys.VALID]
    assert absent.any() and (~absent).any()
    metrics, weights = ppo_update(clean, table, group, critic)
    assert_finite_metrics(metrics)
    assert metrics["rows"] == float((~absent).sum())

    # Garbage in every absent row: huge rewards, other actions, impossible log-probs. Advantage
    # normalization, value targets, the clipped objective, entropy and value loss must ignore it.
    scrambled = clean.clone()
    rows, nxt = scrambled["agent"], scrambled["next", "agent"]
    rows[keys.ACTION][absent] = 1 - rows[keys.ACTION][absent]
    rows[keys.ACTION_LOG_PROB][absent] = -20.0
    nxt[keys.REWARD][absent] = 1e4
    if critic == "local":
        # A centralized critic reads every agent's observation (absent ones' are zeros): only the
        # local critic and the actor must be blind to what absent rows hold.
        rows[keys.OBSERVATION][absent] = 50.0 * torch.randn_like(rows[keys.OBSERVATION][absent])
        nxt[keys.OBSERVATION][absent] = 50.0
    garbage_metrics, garbage_weights = ppo_update(scrambled, table, group, critic)
    assert torch.allclose(garbage_weights, weights, atol=1e-6)
    for name in ("loss_objective", "loss_critic", "loss_entropy", "value_target_mean"):
        assert garbage_metrics[name] == pytest.approx(metrics[name], rel=1e-5, abs=1e-6), name


# -- knights_archers_zombies: agents that die ------------------------------------------------------

KAZ = PettingZooEnvConfig(
    env_fn="pettingzoo.butterfly.knights_archers_zombies_v11.parallel_env",
    # Zombies every 2 cycles and deadly borders: random agents die within a few dozen steps.
    env_kwargs={"max_cycles": 40, "line_death": True, "spawn_delay": 2, "max_zombies": 6, "max_arrows": 6},
    num_envs=3,
)
needs_kaz = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("pygame", "pymunk")),
    reason="needs pettingzoo[butterfly]: pip install 'lightmarl[butterfly]'",
)


@needs_kaz
def test_knights_archers_zombies_dead_agents_stay_invalid_and_ppo_updates_stay_finite():
    torch.manual_seed(0)
    spec = KAZ.spec()
    table = BindingTable(
        [PolicyBinding("archer", class_path="x.y"), PolicyBinding("knight", class_path="x.y")],
        spec,
        ["archer", "archer", "knight", "knight"],
    )
    policies = {b: MLPActorCritic(spec.groups[b], hidden_sizes=(32,), critic="local") for b in ("archer", "knight")}
    collector = RolloutCollector(KAZ.make_vector(seed=0), MultiAgentPolicy(policies, table), 80)
    experience = collector.collect()

    deaths = 0
    for group in ("archer", "knight"):
        rows, nxt = experience[group], experience["next", group]
        valid, episode = rows[keys.VALID], rows[keys.EPISODE_ID]
        done, terminated = nxt[keys.DONE].squeeze(-1), nxt[keys.TERMINATED].squeeze(-1)
        assert not (done & ~valid).any() and not nxt[keys.REWARD].squeeze(-1)[~valid].any()
        E, T, A = valid.shape
        for e in range(E):
            for a in range(A):
                for t in range(T - 1):
                    same_episode = bool(episode[e, t + 1, a] == episode[e, t, a])
                    if valid[e, t, a] and done[e, t, a]:
                        # An agent that is done stays absent until its env copy starts a new episode.
                        assert (
                            not same_episode
                            or not valid[e, t + 1 :, a][episode[e, t + 1 :, a] == episode[e, t, a]].any()
                        )
                        deaths += int(bool(terminated[e, t, a]) and same_episode)
                    if valid[e, t, a] and not same_episode:
                        assert done[e, t, a], "an agent present at its episode's end has a done last row"
                    if not valid[e, t, a] and same_episode:
                        assert not valid[e, t + 1, a], "an absent agent does not come back within the episode"
    assert deaths > 0, "agents must die before their episode ends for this test to mean anything"

    trainer = IndependentMARLTrainer(table, policies, {b: PPO(epochs=1, minibatch_size=60) for b in policies})
    metrics = trainer.update(experience, trainer.make_optimizers(), PlainStepper())
    for binding, values in metrics.items():
        assert values["rows"] == float(experience[binding, keys.VALID].sum())
        assert_finite_metrics(values)

    # The running episode metrics match the rows: per episode, the binding's agents' mean return
    # over their valid rows and the longest stay among them.
    # An env copy's episode ends at a step where every agent present is done.
    ended = torch.ones(experience.batch_size, dtype=torch.bool)
    for group in ("archer", "knight"):
        ended &= (experience["next", group, keys.DONE].squeeze(-1) | ~experience[group, keys.VALID]).all(-1)
    expected: dict[str, list[tuple[float, int]]] = {"archer": [], "knight": []}
    for group in ("archer", "knight"):
        rows = experience[group]
        reward = experience["next", group, keys.REWARD].squeeze(-1) * rows[keys.VALID]
        for e in range(KAZ.num_envs):
            episode = rows[keys.EPISODE_ID][e, :, 0]
            for finished in episode.unique().tolist():
                steps = episode == finished
                if not ended[e, torch.nonzero(steps).max()]:
                    continue  # still running at the end of the rollout
                expected[group].append(
                    (float(reward[e, steps].sum(0).mean()), int(rows[keys.VALID][e, steps].sum(0).max()))
                )
    for binding, episodes in expected.items():
        stats = collector.stats[binding]
        assert stats.finished == len(episodes) > 0
        assert sorted(stats.lengths) == sorted(length for _, length in episodes)
        assert sorted(stats.returns) == pytest.approx(sorted(r for r, _ in episodes))
