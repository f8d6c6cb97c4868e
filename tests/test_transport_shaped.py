"""benchmarks/benchmarl/transport_shaped.py: the shaping telescopes and the task reward is untouched."""

from __future__ import annotations

import pytest
import torch

from benchmark_scripts import load_benchmark

vmas = pytest.importorskip("vmas")

SETTINGS = {"n_agents": 4, "n_packages": 1, "package_width": 0.15, "package_length": 0.15, "package_mass": 5}


@pytest.mark.parametrize("around_package", [False, True])
def test_shaped_transport_adds_a_potential_difference_and_reports_the_task_return(around_package):
    from vmas.scenarios.transport import Scenario

    shaped_module = load_benchmark("benchmarl/transport_shaped.py")
    scenario = shaped_module.ShapedTransport()
    make = dict(num_envs=6, continuous_actions=True, seed=3, max_steps=None)
    # Each reset right after its env is made: VMAS seeds the global generator when it makes one.
    shaped = vmas.make_env(scenario=scenario, behind_factor=10.0, around_package=around_package, **make, **SETTINGS)
    observations = shaped.reset()
    plain = vmas.make_env(scenario=Scenario(), **make, **SETTINGS)
    assert all(torch.equal(a, b) for a, b in zip(observations, plain.reset()))
    start = torch.stack([scenario.behind_distance(a) for a in shaped.agents])
    plain_sum = torch.zeros(6)
    shaped_sum = torch.zeros(4, 6)
    for _ in range(40):
        # Full force towards the package (observation 6:8 is package - agent): it moves, so the task pays.
        actions = [(obs[:, 6:8] * 10).clamp(-1, 1) for obs in observations]
        observations, shaped_rewards, _, infos = shaped.step(actions)
        _, plain_rewards, _, _ = plain.step(actions)
        plain_sum += plain_rewards[0]
        shaped_sum += torch.stack(shaped_rewards)
        for info in infos:
            assert torch.allclose(info["package_return"], plain_sum, atol=1e-4)
    assert plain_sum.abs().max() > 0.1  # the package moved: the task reward was not zero throughout
    end = torch.stack([scenario.behind_distance(a) for a in shaped.agents])
    assert torch.allclose(shaped_sum - plain_sum, 10.0 * (start - end), atol=1e-3)


def test_the_path_around_the_package_is_never_shorter_than_the_straight_one():
    scenario = load_benchmark("benchmarl/transport_shaped.py").ShapedTransport()
    env = vmas.make_env(
        scenario=scenario, around_package=True, num_envs=64, continuous_actions=True, seed=0, **SETTINGS
    )
    env.reset()
    routed = torch.stack([scenario.behind_distance(a) for a in env.agents])
    scenario.around_package = False
    direct = torch.stack([scenario.behind_distance(a) for a in env.agents])
    assert (routed >= direct - 1e-6).all() and (routed > direct + 1e-3).any()


def test_behind_offset_places_the_target_that_far_behind_the_package_centre():
    scenario = load_benchmark("benchmarl/transport_shaped.py").ShapedTransport()
    env = vmas.make_env(scenario=scenario, behind_offset=0.0, num_envs=16, continuous_actions=True, seed=0, **SETTINGS)
    env.reset()
    package = scenario.packages[0]
    for agent in env.agents:  # offset 0: the target is the package's centre
        assert torch.allclose(scenario.behind_distance(agent), (agent.state.pos - package.state.pos).norm(dim=-1))
    assert scenario.behind_offset == 0.0
    default = load_benchmark("benchmarl/transport_shaped.py").ShapedTransport()
    vmas.make_env(scenario=default, num_envs=2, continuous_actions=True, seed=0, **SETTINGS)
    assert default.behind_offset == pytest.approx(0.15 / 2 + 0.03)  # touching the far face
