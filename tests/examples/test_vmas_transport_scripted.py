"""examples' TransportHeuristicPolicy: VMAS's own transport script, played through lightmarl's VMAS adapter."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vmas")

from lightmarl.envs.vmas import VmasEnvConfig
from lightmarl.policies import UniformRandomPolicy
from lightmarl_examples.vmas_transport import TransportHeuristicPolicy

LIGHT_PACKAGE = {"n_agents": 4, "n_packages": 1, "package_width": 0.15, "package_length": 0.15, "package_mass": 5}


def episode_return(policy_class, num_envs=32, steps=100) -> float:
    config = VmasEnvConfig(
        scenario="transport", scenario_kwargs=LIGHT_PACKAGE, num_envs=num_envs, max_steps=steps, continuous_actions=True
    )
    vector = config.make_base_vector(seed=0, num_envs=num_envs)
    group = vector.spec.groups["agent"]
    policy = policy_class(group)
    current = vector.reset()
    total = torch.zeros(num_envs)
    for _ in range(steps):
        action = policy.act(current["agent"]["observation"])
        assert action.shape == (num_envs, 4, 2) and action.abs().max() <= 1.0
        step, _ = vector.step({"agent": action})
        total += step["agent"]["reward"].mean(dim=1).reshape(-1)
        current = vector.current
    vector.close()
    return float(total.mean())


def test_the_script_pushes_the_package_to_the_goal_where_random_forces_do_not():
    # The light package of docs/vmas.md (mass 5): VMAS's script earns about 34 per agent in 100 steps.
    assert episode_return(TransportHeuristicPolicy) > 15.0
    assert abs(episode_return(lambda group: UniformRandomPolicy(group, seed=0))) < 1.0


def test_the_script_refuses_another_scenario():
    navigation = VmasEnvConfig(scenario="navigation", num_envs=2, continuous_actions=True).spec().groups["agent"]
    with pytest.raises(ValueError, match="transport's 11-value observation"):
        TransportHeuristicPolicy(navigation)
    discrete = VmasEnvConfig(scenario="transport", num_envs=2, continuous_actions=False).spec().groups["agent"]
    with pytest.raises(ValueError, match="continuous_actions: true"):
        TransportHeuristicPolicy(discrete)
