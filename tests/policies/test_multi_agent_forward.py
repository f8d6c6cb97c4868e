"""Grouped forward of MultiAgentPolicy: row grouping, per-env maps, the cache, the stacked path."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, Policy, ScriptedPolicy, StackableActor
from lightmarl.population import BindingTable, GroupBindingIndex, PolicyBinding

CONSTANTS = {"one": 1, "two": 2, "three": 3}


class ConstantPolicy(ScriptedPolicy):
    """Always plays `value` with log-prob -value: shows whose output landed where."""

    def __init__(self, group, value: int = 0) -> None:
        super().__init__(group)
        self.value = value
        self.calls: list[tuple[int, ...]] = []

    def act(self, observation, action_mask=None):
        self.calls.append(tuple(observation.shape[:-1]))
        return torch.full(observation.shape[:-1], self.value, dtype=torch.int64)

    def action_log_prob(self, action):
        return torch.full(action.shape, -float(self.value))


def obs_td(group, batch=(4,)):
    data = {"observation": torch.randn(*batch, group.num_agents, *group.observation_shape)}
    return TensorDict({group.name: TensorDict(data, [*batch, group.num_agents])}, list(batch))


def population(spread_config, agent_map, policies=None):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding(b, class_path="x.y") for b in CONSTANTS], spec, agent_map)
    policies = policies or {b: ConstantPolicy(group, v) for b, v in CONSTANTS.items()}
    return MultiAgentPolicy(policies, table), group


def test_per_env_map_puts_each_action_on_its_own_env_and_agent(spread_config):
    per_env = {0: ["three", "three", "three"], 2: ["two", "one", "three"]}
    pop, group = population(spread_config, {"default": ["one", "two", "one"], "per_env": per_env})
    td = pop(obs_td(group, (4,)))
    expected = [[3, 3, 3], [1, 2, 1], [2, 1, 3], [1, 2, 1]]
    assert td["agent", "action"].tolist() == expected
    assert td["agent", "action_log_prob"].tolist() == [[-float(v) for v in row] for row in expected]
    # One forward per binding, on exactly its rows (flat over [env, agent]).
    calls = {b: p.calls for b, p in pop.policies.items()}
    assert calls == {"one": [(5,)], "two": [(3,)], "three": [(4,)]}


def test_per_env_map_with_a_time_dim(spread_config):
    pop, group = population(spread_config, {"default": ["one", "one", "two"], "per_env": {1: ["three"] * 3}})
    td = pop(obs_td(group, (2, 5)))
    assert td["agent", "action"].shape == (2, 5, 3)
    assert td["agent", "action"][0].eq(torch.tensor([1, 1, 2])).all()
    assert td["agent", "action"][1].eq(3).all()


def test_same_map_everywhere_gathers_along_the_agent_dim(spread_config):
    pop, group = population(spread_config, ["two", "one", "two"])
    td = pop(obs_td(group, (5,)))
    assert td["agent", "action"].tolist() == [[2, 1, 2]] * 5
    assert pop.policies["two"].calls == [(5, 2)]


def test_one_binding_for_the_whole_group_skips_the_gather(spread_config):
    pop, group = population(spread_config, ["two", "two", "two"])
    td = obs_td(group, (4,))
    pop(td)
    assert pop.policies["two"].calls == [(4, 3)] and td["agent", "action"].eq(2).all()


def test_cached_index_is_reused_until_the_map_changes(spread_config, monkeypatch):
    builds = []
    original = GroupBindingIndex.build.__func__

    def counting_build(cls, binding_of_agent, flat):
        builds.append(flat)
        return original(cls, binding_of_agent, flat)

    monkeypatch.setattr(GroupBindingIndex, "build", classmethod(counting_build))
    pop, group = population(spread_config, {"per_env": {1: ["two", "two", "three"]}})
    built_at_init = len(builds)
    for _ in range(3):
        pop(obs_td(group, (4,)))
    assert len(builds) == built_at_init + 1  # the [4]-row index, once
    pop.table.set_agent_binding_map({"per_env": {3: ["three", "one", "one"]}})
    builds.clear()
    td = pop(obs_td(group, (4,)))
    assert builds == [True]
    assert td["agent", "action"].tolist() == [[1, 1, 1], [1, 1, 1], [1, 1, 1], [3, 1, 1]]


def test_a_map_change_to_a_binding_without_a_policy_fails_clearly(spread_config):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable([PolicyBinding(b, class_path="x.y") for b in CONSTANTS], spec, ["one", "one", "two"])
    pop = MultiAgentPolicy({"one": ConstantPolicy(group, 1), "two": ConstantPolicy(group, 2)}, table)
    table.set_agent_binding_map(["one", "three", "two"])
    with pytest.raises(ValueError, match=r"no policy was built for bindings \['three'\]"):
        pop(obs_td(group))


# -- the stacked path for same-shaped MLP actors ---------------------------------------------
def mlp_population(spread_config, agent_map, stack):
    group = spread_config.spec().groups["agent"]
    torch.manual_seed(1)
    policies = {b: MLPActorCritic(group, hidden_sizes=(16, 16), critic="none") for b in CONSTANTS}
    pop, _ = population(spread_config, agent_map, policies)
    pop.stack_same_shape = stack
    return pop, group


@pytest.mark.parametrize(
    "agent_map",
    [["two", "one", "two"], {"default": ["one", "two", "three"], "per_env": {1: ["three", "three", "one"]}}],
)
def test_stacked_forward_matches_separate_forwards(spread_config, agent_map):
    stacked, group = mlp_population(spread_config, agent_map, stack=True)
    separate, _ = mlp_population(spread_config, agent_map, stack=False)
    td = obs_td(group, (4,))
    a, b = stacked(td.clone()), separate(td.clone())
    assert stacked._stacks and all(s is not None for s in stacked._stacks.values())
    assert torch.equal(a["agent", "action"], b["agent", "action"])
    torch.testing.assert_close(a["agent", "action_log_prob"], b["agent", "action_log_prob"])


class LinearSoftmaxPolicy(Policy):
    """Not an MLPActorCritic: a policy of its own that offers its logits layers for stacking."""

    def __init__(self, group, offer: bool = True) -> None:
        super().__init__(group)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(group.observation_shape[-1], 8), torch.nn.ReLU(), torch.nn.Linear(8, group.num_actions)
        )
        self.offer = offer
        self.forwards = 0

    def stackable_actor(self):
        return (
            StackableActor(layers=tuple(self.net), default_mode=ExplorationType.DETERMINISTIC) if self.offer else None
        )

    def forward(self, td):
        self.forwards += 1
        log_p = self.net(td[self.key("observation")]).log_softmax(-1)
        action = log_p.argmax(-1)
        td.set(self.key("action"), action)
        td.set(self.key("action_log_prob"), log_p.gather(-1, action.unsqueeze(-1)).squeeze(-1))
        return td


@pytest.mark.parametrize("offer", [True, False])
def test_any_policy_that_offers_a_stackable_actor_is_stacked(spread_config, offer):
    """MultiAgentPolicy knows no concrete policy class: the protocol decides, and the stacked
    forward acts as the policies' own forwards do."""
    group = spread_config.spec().groups["agent"]
    torch.manual_seed(3)
    policies = {b: LinearSoftmaxPolicy(group, offer) for b in CONSTANTS}
    agent_map = {"default": ["one", "two", "three"], "per_env": {1: ["two", "two", "one"]}}
    stacked, _ = population(spread_config, agent_map, policies)
    separate, _ = population(spread_config, agent_map, {b: p for b, p in policies.items()})
    separate.stack_same_shape = False
    td = obs_td(group, (4,))
    a = stacked(td.clone())
    assert sum(p.forwards for p in policies.values()) == (0 if offer else 3)
    b = separate(td.clone())
    assert torch.equal(a["agent", "action"], b["agent", "action"])
    torch.testing.assert_close(a["agent", "action_log_prob"], b["agent", "action_log_prob"])


def test_stacked_sampling_reports_the_log_prob_of_the_owning_binding(spread_config):
    agent_map = {"default": ["one", "two", "three"], "per_env": {0: ["two", "two", "two"]}}
    stacked, group = mlp_population(spread_config, agent_map, stack=True)
    td = obs_td(group, (64,))
    with set_exploration_type(ExplorationType.RANDOM):
        out = stacked(td.clone())
    action = out["agent", "action"]
    assert len(action.unique()) > 1  # sampled, not the argmax everywhere
    of_env = stacked.table.bindings_of_envs("agent", 64)
    expected = torch.empty_like(out["agent", "action_log_prob"])
    for binding_id, policy in stacked.policies.items():
        logits = policy.actor.module[0](td.clone())["agent", "logits"]
        log_p = logits.log_softmax(-1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        mine = of_env == stacked.table.index[binding_id]
        expected[mine] = log_p[mine]
    torch.testing.assert_close(out["agent", "action_log_prob"], expected)


def test_stacked_weights_follow_in_place_parameter_updates(spread_config):
    stacked, group = mlp_population(spread_config, ["two", "one", "two"], stack=True)
    separate, _ = mlp_population(spread_config, ["two", "one", "two"], stack=False)
    td = obs_td(group, (8,))
    with torch.no_grad():  # collection: stacked weights are cached between calls
        before = stacked(td.clone())["agent", "action"]
        for pop in (stacked, separate):
            for p in pop.policies["one"].parameters():
                p.mul_(-3.0)  # an optimizer step changes parameters in place
        after = stacked(td.clone())["agent", "action"]
        assert torch.equal(after, separate(td.clone())["agent", "action"])
    assert not torch.equal(before[:, 1], after[:, 1])  # the update did change binding one's actions


# -- one binding for the whole group: the lean forward ----------------------------------------
def test_one_mlp_binding_takes_the_lean_forward_with_the_actors_outputs(spread_config):
    lean, group = mlp_population(spread_config, ["two", "two", "two"], stack=True)
    actor, _ = mlp_population(spread_config, ["two", "two", "two"], stack=False)  # TorchRL's actor itself
    td = obs_td(group, (6,))
    for mode in (ExplorationType.DETERMINISTIC, ExplorationType.MODE):
        with set_exploration_type(mode):
            a, b = lean(td.clone()), actor.policies["two"](td.clone())
        assert "logits" not in a["agent"].keys() and "logits" in b["agent"].keys()  # the lean path ran
        assert torch.equal(a["agent", "action"], b["agent", "action"])
        torch.testing.assert_close(a["agent", "action_log_prob"], b["agent", "action_log_prob"])


def test_one_mlp_binding_samples_from_the_actors_distribution(spread_config):
    lean, group = mlp_population(spread_config, ["two", "two", "two"], stack=True)
    td = obs_td(group, (1,)).expand(20000).clone()  # one observation per agent, many draws
    with set_exploration_type(ExplorationType.RANDOM):
        out = lean(td.clone())
    logits = lean.policies["two"].actor.module[0](td[:1].clone())["agent", "logits"][0]  # [agents, actions]
    probs = logits.softmax(-1)
    counts = torch.stack([torch.bincount(out["agent", "action"][:, a], minlength=5) for a in range(3)])
    torch.testing.assert_close(counts / 20000, probs, atol=0.015, rtol=0)  # ~4.5 standard errors at p=0.5
    expected = probs.log().gather(-1, out["agent", "action"].T).T
    torch.testing.assert_close(out["agent", "action_log_prob"], expected)


def test_lean_sampling_never_draws_an_action_of_probability_zero(spread_config):
    from lightmarl.policies.multi_agent import _StackedActors

    lean, _ = mlp_population(spread_config, ["two", "two", "two"], stack=True)
    stack = _StackedActors.build([lean.policies["two"]])
    # exp(-1e4) underflows to 0: actions 1 and 3 are impossible, action 4 is the last one.
    logits = torch.tensor([0.0, -1e4, 1.0, -1e4, 2.0]).expand(50000, 5)
    with set_exploration_type(ExplorationType.RANDOM):
        action, log_prob = stack._act(logits)
    counts = torch.bincount(action.view(-1), minlength=5)
    assert len(counts) == 5 and counts[1] == 0 and counts[3] == 0
    torch.testing.assert_close(counts / 50000, logits[0].softmax(-1), atol=0.01, rtol=0)
    torch.testing.assert_close(log_prob, logits.log_softmax(-1).gather(-1, action))
