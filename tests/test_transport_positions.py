"""benchmarks/benchmarl/transport_positions.py: where a transport team's agents are, measured right."""

from __future__ import annotations

import pytest

from benchmark_scripts import load_benchmark

pytest.importorskip("vmas")


def test_the_scripted_team_ends_behind_the_package_pushing_it_to_the_goal():
    script = load_benchmark("benchmarl/transport_positions.py")
    from lightmarl.envs.vmas import VmasEnvConfig
    from lightmarl_examples.vmas_transport import TransportHeuristicPolicy

    group = VmasEnvConfig(scenario="transport", continuous_actions=True).spec().groups["agent"]
    report = script.positions(TransportHeuristicPolicy(group).act, num_envs=16, seed=1, package_mass=50)
    assert [r["step"] for r in report] == list(script.REPORT_STEPS)
    start, end = report[0], report[-1]
    assert start["touching_behind"] == start["return_so_far"] == 0.0
    assert end["behind"] > 0.8 and end["touching_behind"] > 10 * end["touching_in_front"]
    assert end["force_towards_goal"] > 0.3 and end["return_so_far"] > 2.0
    # A team that never moves: nobody touches the package (the spawns keep them apart), nothing is earned.
    still = script.positions(lambda obs: 0 * obs[..., :2], 16, 1, 50)
    assert still[-1]["behind"] == start["behind"] and still[-1]["touching_behind"] == 0
    assert still[-1]["force_towards_goal"] == still[-1]["return_so_far"] == 0


def test_a_policy_must_be_named():
    script = load_benchmark("benchmarl/transport_positions.py")
    with pytest.raises(SystemExit):
        script.main([])
    with pytest.raises(SystemExit):
        script.main(["--checkpoint", "no_label_or_path"])
