from __future__ import annotations

import pytest
import torch

from lightmarl.population import BindingTable, PolicyBinding

CLS = "lightmarl.policies.MLPActorCritic"


def table(spread_config, bindings=None, agent_map=None, profiles=None):
    return BindingTable(bindings, spread_config.spec(), agent_map, profiles)


def test_no_bindings_synthesizes_main_for_every_agent(spread_config):
    t = table(spread_config)
    assert t.ids == ["main"] and t.binding("main").trainable
    assert t.agent_binding_map == ["main"] * 3
    assert t.groups["agent"].covers_group == {0: True}


def test_map_builds_cached_row_indices(spread_config):
    bindings = [{"id": "a", "class_path": CLS}, {"id": "b", "class_path": CLS, "trainable": False}]
    t = table(spread_config, bindings, ["b", "a", "b"])
    index = t.groups["agent"]
    assert index.binding_of_agent.tolist() == [1, 0, 1]
    assert index.agents_of_binding[0].tolist() == [1]
    assert index.agents_of_binding[1].tolist() == [0, 2]
    assert t.trainable.tolist() == [True, False]


@pytest.mark.parametrize(
    ("bindings", "agent_map", "message"),
    [
        ([{"id": "a", "class_path": CLS}, {"id": "a", "class_path": CLS}], None, r"duplicate binding id 'a'"),
        ([{"id": "a"}], None, r"exactly one of class_path / policy_uri"),
        ([{"id": "a", "class_path": CLS, "policy_uri": "x.ckpt"}], None, r"exactly one of"),
        ([{"id": "a", "class_path": CLS}], ["a", "a"], r"one binding id per agent \(3 agents"),
        (
            [{"id": "a", "class_path": CLS}],
            ["a", "a", "ghost"],
            r"agent 'agent_2' is mapped to unknown binding 'ghost'",
        ),
        ([{"id": "a", "class_path": CLS, "loss_profile": "nope"}], None, r"loss_profile: 'nope' is not a loss profile"),
        ([{"id": "", "class_path": CLS}], None, r"\.id: expected a non-empty string"),
        ([{"id": "a", "class_path": CLS, "bogus": 1}], None, r"invalid binding"),
    ],
)
def test_bad_populations_fail_with_a_message_naming_the_value(spread_config, bindings, agent_map, message):
    with pytest.raises(ValueError, match=message):
        table(spread_config, bindings, agent_map)


def test_training_needs_a_trainable_binding_that_acts(spread_config):
    frozen = table(spread_config, [PolicyBinding("npc", class_path=CLS, trainable=False)])
    with pytest.raises(ValueError, match="trainable: true"):
        frozen.require_trainable()
    # A trainable binding mapped to no agent does not count.
    idle = table(
        spread_config,
        [PolicyBinding("npc", class_path=CLS, trainable=False), PolicyBinding("learner", class_path=CLS)],
    )
    with pytest.raises(ValueError, match="trainable: true"):
        idle.require_trainable()


def test_a_binding_cannot_span_two_groups():
    from lightmarl.envs import PettingZooEnvConfig

    spec = PettingZooEnvConfig(env_fn="mpe2.simple_tag_v3.parallel_env").spec()
    with pytest.raises(ValueError, match=r"binding 'main' controls agents of groups 'adversary' and 'agent'"):
        BindingTable([PolicyBinding("main", class_path=CLS)], spec)


def test_profiles_tag_rows_and_gate_losses(spread_config):
    t = table(
        spread_config,
        [{"id": "a", "class_path": CLS, "loss_profile": "rl"}, {"id": "b", "class_path": CLS, "loss_profile": "bc"}],
        ["a", "b", "a"],
        {"rl": ["ppo"], "bc": ["distill"]},
    )
    assert t.profile_of_binding.tolist() == [0, 1]
    assert t.profile_allows("a", "ppo") and not t.profile_allows("a", "distill")
    assert torch.equal(t.profile_of_binding[t.groups["agent"].binding_of_agent], torch.tensor([0, 1, 0]))
