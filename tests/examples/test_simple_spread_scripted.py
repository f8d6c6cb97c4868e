"""The example scripted policies of mpe2 simple_spread (``lightmarl_examples.simple_spread``)."""

from __future__ import annotations

import itertools

import pytest
import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from expectations import policy_rows as rows
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation import evaluate_episodes
from lightmarl.policies import MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl_examples.simple_spread import SpreadByAssignmentPolicy, SpreadToLandmarkPolicy

SPREAD = "mpe2.simple_spread_v3.parallel_env"


def test_spread_policy_heads_for_its_own_landmark(spread_config):
    group = spread_config.spec().groups["agent"]
    policy = SpreadToLandmarkPolicy(group)
    obs = torch.zeros(4, 18)
    obs[:, 4:6] = torch.tensor([1.0, 0.0])  # landmark 0 to the right (+x)
    obs[:, 6:8] = torch.tensor([0.0, -1.0])  # landmark 1 below (-y)
    obs[:, 8:10] = torch.tensor([-1.0, 0.0])  # landmark 2 to the left (-x)
    agent_id = torch.tensor([0, 1, 2, 3])  # agent 3 -> landmark 3 % 3 = 0
    assert policy.act(obs, agent_id=agent_id).tolist() == [2, 3, 1, 2]
    # Already rushing at its landmark: brake (push against the velocity), do not overshoot.
    rushing = obs[:1].clone()
    rushing[:, 0:2] = torch.tensor([2.0, 0.0])
    rushing[:, 4:6] = torch.tensor([0.1, 0.0])
    assert policy.act(rushing, agent_id=torch.tensor([0])).item() == 1
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        out = policy(rows(group, batch=3))["agent"]
    assert torch.equal(out["action"], out["logits"].argmax(-1))


def test_spread_policy_rejects_other_envs():
    tag = PettingZooEnvConfig(env_fn="mpe2.simple_tag_v3.parallel_env").spec().groups["agent"]
    with pytest.raises(ValueError, match="num_landmarks"):
        SpreadToLandmarkPolicy(tag)
    continuous = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "continuous_actions": True}).spec()
    with pytest.raises(ValueError, match="discrete actions"):
        SpreadToLandmarkPolicy(continuous.groups["agent"])


def test_spread_policy_beats_uniform_random_by_a_wide_margin():
    config = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 25}, num_envs=8)
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding("p", class_path="x.y", trainable=False)], spec)
    scores = {
        name: evaluate_episodes(MultiAgentPolicy({"p": policy}, table), config, num_episodes=16, seed=10_000)["p"][
            "episode_return"
        ]
        for name, policy in (("script", SpreadToLandmarkPolicy(group)), ("random", UniformRandomPolicy(group, seed=0)))
    }
    # Measured (64 episodes): script about -10.7, uniform random about -27.
    assert scores["script"] > scores["random"] + 10, scores
    assert scores["script"] > -14, scores


def spread_observations(agents: torch.Tensor, landmarks: torch.Tensor) -> torch.Tensor:
    """What simple_spread_v3 shows each agent at rest: ``[vel, pos, landmarks - pos, others - pos, comm]``."""
    rows = []
    for i, position in enumerate(agents):
        others = torch.cat([agents[:i], agents[i + 1 :]]) - position
        rows.append(
            torch.cat(
                [
                    torch.zeros(2),
                    position,
                    (landmarks - position).flatten(),
                    others.flatten(),
                    torch.zeros(others.numel()),
                ]
            )
        )
    return torch.stack(rows)


def cheapest_assignment(agents: torch.Tensor, landmarks: torch.Tensor) -> list[int]:
    """Brute force, independent of the policy: landmark of each agent in the least-total-distance assignment."""
    best = min(
        itertools.permutations(range(len(landmarks))),
        key=lambda order: sum(float((agents[a] - landmarks[k]).norm()) for a, k in enumerate(order)),
    )
    return list(best)


@pytest.mark.parametrize("n", [1, 3, 4])
def test_assignment_policy_agents_agree_on_the_cheapest_assignment(n):
    group = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": n}).spec().groups["agent"]
    policy = SpreadByAssignmentPolicy(group)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        agents, landmarks = torch.rand(2, n, 2, generator=generator).mul(2).sub(1)
        observations = spread_observations(agents, landmarks)
        targets = policy.target_landmark(observations, agent_id=torch.arange(n))
        # Every agent computed the same assignment from its own view: each landmark taken once.
        assert targets.tolist() == cheapest_assignment(agents, landmarks)
        assert sorted(targets.tolist()) == list(range(n))
        # Only the observation matters: not the agent's id, not the order its view lists the others in.
        assert torch.equal(policy.target_landmark(observations, agent_id=torch.zeros(n, dtype=torch.int64)), targets)
        others = observations[:, 4 + 2 * n : 4 + 4 * n - 2].unflatten(-1, (n - 1, 2)).flip(-2).flatten(-2)
        shuffled = torch.cat([observations[:, : 4 + 2 * n], others, observations[:, 4 + 4 * n - 2 :]], -1)
        assert torch.equal(policy.target_landmark(shuffled, agent_id=None), targets)


def test_assignment_policy_moves_each_agent_to_its_assigned_landmark(spread_config):
    policy = SpreadByAssignmentPolicy(spread_config.spec().groups["agent"])
    agents = torch.tensor([[0.0, 0.0], [1.0, 1.0], [-1.0, 1.0]])
    # Cheapest: agent 0 -> landmark 1 (+x), agent 1 -> landmark 2 (-y), agent 2 -> landmark 0 (-y);
    # agent i -> landmark i would send agent 0 left (-x).
    landmarks = torch.tensor([[-1.0, 0.6], [0.5, 0.0], [1.0, 0.8]])
    observations = spread_observations(agents, landmarks)
    assert policy.act(observations, agent_id=torch.arange(3)).tolist() == [2, 3, 3]
    assert SpreadToLandmarkPolicy(policy.group).act(observations, agent_id=torch.arange(3))[0].item() == 1


def test_assignment_policy_beats_the_fixed_assignment_on_the_same_episodes():
    config = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 25}, num_envs=8)
    spec = config.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding("p", class_path="x.y", trainable=False)], spec)
    scores = {
        name: evaluate_episodes(MultiAgentPolicy({"p": policy}, table), config, num_episodes=32, seed=10_000)["p"][
            "episode_return"
        ]
        for name, policy in (
            ("assignment", SpreadByAssignmentPolicy(group)),
            ("fixed", SpreadToLandmarkPolicy(group)),
            ("random", UniformRandomPolicy(group, seed=0)),
        )
    }
    # Measured (64 episodes, greedy): assignment -8.1, fixed agent i -> landmark i -10.8, random about -27.
    assert scores["assignment"] > scores["fixed"] + 1.0, scores
    assert scores["assignment"] > scores["random"] + 12, scores


def test_assignment_policy_rejects_what_it_cannot_solve(spread_config):
    group = spread_config.spec().groups["agent"]
    with pytest.raises(ValueError, match="full observations"):
        SpreadByAssignmentPolicy(group, num_landmarks=2)
    big = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 8}).spec().groups["agent"]
    with pytest.raises(ValueError, match="N <= 7"):
        SpreadByAssignmentPolicy(big)
