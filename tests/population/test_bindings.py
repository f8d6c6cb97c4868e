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


# -- per-env overrides ---------------------------------------------------------------------
AB = [{"id": "a", "class_path": CLS}, {"id": "b", "class_path": CLS, "trainable": False}]


def test_per_env_map_overrides_the_default_in_the_named_env_copies(spread_config):
    t = BindingTable(
        AB, spread_config.spec(), {"default": ["a", "b", "a"], "per_env": {0: ["b", "b", "b"], 3: ["a", "a", "b"]}}
    )
    assert t.varies_per_env and t.map_of_env(3) == ["a", "a", "b"] and t.map_of_env(1) == ["a", "b", "a"]
    assert t.bindings_of_envs("agent", 4).tolist() == [[1, 1, 1], [0, 1, 0], [0, 1, 0], [0, 0, 1]]
    index = t.row_index("agent", (4,))
    assert index.flat and index.binding_of_agent.shape == (4, 3)
    # Flat positions over [env, agent]: e * 3 + a.
    assert index.agents_of_binding[0].tolist() == [3, 5, 6, 8, 9, 10]
    assert index.agents_of_binding[1].tolist() == [0, 1, 2, 4, 7, 11]
    # Without a default every copy not overridden maps to the first binding.
    t = BindingTable(AB, spread_config.spec(), {"per_env": {"2": ["b", "a", "b"]}})
    assert t.bindings_of_envs("agent", 3).tolist() == [[0, 0, 0], [0, 0, 0], [1, 0, 1]]


@pytest.mark.parametrize(
    ("agent_map", "num_envs", "message"),
    [
        (
            {"per_env": {4: ["a", "a", "a"]}},
            4,
            r"per_env: env index 4 is out of range; each process steps 4 env copies",
        ),
        ({"per_env": {0: ["a", "a"]}}, None, r"per_env\[0\]: expected one binding id per agent \(3 agents"),
        (
            {"per_env": {1: ["a", "ghost", "a"]}},
            None,
            r"per_env\[1\]: agent 'agent_1' is mapped to unknown binding 'ghost'",
        ),
        ({"per_env": {-1: ["a", "a", "a"]}}, None, r"keys are env copy indices .* got -1"),
        ({"default": ["a", "a", "a"]}, None, r"keys 'default' \(optional.*got keys \['default'\]"),
        ({"per_env": {}, "extra": 1}, None, r"got keys \['extra', 'per_env'\]"),
        ({"default": ["a", "a"], "per_env": {}}, None, r"agent_binding_map.default: expected one binding id per agent"),
    ],
)
def test_bad_per_env_maps_fail_with_a_message_naming_the_value(spread_config, agent_map, num_envs, message):
    with pytest.raises(ValueError, match=message):
        BindingTable(AB, spread_config.spec(), agent_map, num_envs=num_envs)


def test_per_env_index_is_checked_against_the_process_env_count(spread_config):
    t = BindingTable(AB, spread_config.spec(), {"per_env": {5: ["b", "b", "b"]}})
    with pytest.raises(
        ValueError, match=r"env index 5 is out of range; each process steps 4 env copies \(valid indices 0..3\)"
    ):
        t.check_num_envs(4)
    t.check_num_envs(6)
    assert t.num_envs == 6


def test_per_env_override_cannot_make_a_binding_span_two_groups():
    from lightmarl.envs import PettingZooEnvConfig

    spec = PettingZooEnvConfig(env_fn="mpe2.simple_tag_v3.parallel_env").spec()  # 3 adversaries + 1 agent
    bindings = [{"id": "pred", "class_path": CLS}, {"id": "prey", "class_path": CLS}]
    with pytest.raises(ValueError, match=r"binding 'pred' controls agents of groups 'adversary' and 'agent'.*per_env"):
        BindingTable(bindings, spec, {"default": ["pred"] * 3 + ["prey"], "per_env": {1: ["pred"] * 4}})


# -- the cache -----------------------------------------------------------------------------
def test_row_index_cache_is_rebuilt_on_map_change_and_not_otherwise(spread_config):
    t = BindingTable(AB, spread_config.spec(), {"per_env": {1: ["b", "a", "b"]}})
    first, version = t.row_index("agent", (4,)), t.version
    assert t.row_index("agent", (4,)) is first and t.bindings_of_envs("agent", 4) is t.bindings_of_envs("agent", 4)
    t.set_agent_binding_map(["b", "b", "a"])
    assert t.version == version + 1 and not t.varies_per_env
    assert t.row_index("agent", (4,)) is t.groups["agent"]
    assert t.groups["agent"].binding_of_agent.tolist() == [1, 1, 0]
    flat = t.row_index("agent", (4,), flat=True)
    assert flat is not first and flat.agents_of_binding[0].tolist() == [2, 5, 8, 11]
    # A rejected map leaves the table as it was.
    with pytest.raises(ValueError, match="unknown binding 'ghost'"):
        t.set_agent_binding_map(["ghost", "a", "a"])
    assert t.version == version + 1 and t.row_index("agent", (4,), flat=True) is flat


def test_row_index_on_another_device_is_built_once_and_dropped_with_the_map(spread_config):
    # Rows collected on a GPU are indexed there; "meta" stands in for it on a CPU-only machine.
    t = BindingTable(AB, spread_config.spec(), {"per_env": {1: ["b", "a", "b"]}})
    on_cpu = t.row_index("agent", (4,))
    assert t.row_index("agent", (4,), device="cpu") is on_cpu
    moved = t.row_index("agent", (4,), device="meta")
    assert moved is t.row_index("agent", (4,), device=torch.device("meta"))
    assert moved.binding_of_agent.is_meta and all(rows.is_meta for rows in moved.agents_of_binding.values())
    assert moved.padded.gather.is_meta and moved.padded.slots is not None and moved.padded.slots.is_meta
    assert moved.covers_group == on_cpu.covers_group and moved.flat == on_cpu.flat
    t.set_agent_binding_map(["b", "b", "a"])
    assert t.row_index("agent", (4,), device="meta") is not moved
    assert t.row_index("agent", (4,), device="meta").binding_of_agent.is_meta


def test_padded_layout_pads_short_bindings_and_scatters_only_real_rows(spread_config):
    t = BindingTable(AB, spread_config.spec(), ["a", "b", "a"])
    padded = t.row_index("agent", (2,), flat=True).padded
    assert padded.bindings == (0, 1)
    assert padded.gather.tolist() == [[0, 2, 3, 5], [1, 4, 1, 1]]
    assert padded.slots is not None and padded.slots.tolist() == [0, 1, 2, 3, 4, 5]
    assert padded.scatter.tolist() == [0, 2, 3, 5, 1, 4]


# -- policy_mapping_fn ---------------------------------------------------------------------
@pytest.fixture
def mapping_module(tmp_path, monkeypatch):
    (tmp_path / "lm_test_mapping.py").write_text(
        "def assign(agent):\n    return 'b' if agent.endswith('_0') else 'a'\n\n"
        "def ghost(agent):\n    return 'ghost'\n\nNOT_CALLABLE = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "lm_test_mapping"


def test_policy_mapping_fn_resolves_by_import_path(spread_config, mapping_module):
    t = BindingTable(AB, spread_config.spec(), policy_mapping_fn=f"{mapping_module}.assign")
    assert t.agent_binding_map == ["b", "a", "a"]
    assert t.groups["agent"].binding_of_agent.tolist() == [1, 0, 0]
    t.set_agent_binding_map(policy_mapping_fn=lambda agent: "a")
    assert t.agent_binding_map == ["a", "a", "a"]


@pytest.mark.parametrize(
    ("agent_map", "fn", "message"),
    [
        (["a", "a", "a"], "{m}.assign", r"agent_binding_map and policy_mapping_fn are alternatives; set one of them"),
        (None, "{m}.ghost", r"policy_mapping_fn: '.*ghost' mapped agent 'agent_0' to unknown binding 'ghost'"),
        (None, "no_such_pkg_xyz.assign", r"policy_mapping_fn: cannot import 'no_such_pkg_xyz.assign'"),
        (None, "{m}.missing", r"module 'lm_test_mapping' has no attribute 'missing'"),
        (None, "{m}.NOT_CALLABLE", r"is a int, not a callable"),
        (None, "assign", r"expected an import path"),
    ],
)
def test_policy_mapping_fn_errors(spread_config, mapping_module, agent_map, fn, message):
    with pytest.raises(ValueError, match=message):
        BindingTable(AB, spread_config.spec(), agent_map, policy_mapping_fn=fn.format(m=mapping_module))
