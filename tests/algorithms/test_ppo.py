from __future__ import annotations

import copy
import math

import pytest
import torch

from expectations import assert_finite_metrics
from lightmarl import keys
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper, loss_row_mask
from lightmarl.data.collector import RolloutCollector
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding


def population(spread_config, npc_trainable=False, profiles=None, npc_profile="default"):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [
            PolicyBinding("learner", class_path="x.y", loss_profile="default"),
            PolicyBinding("npc", class_path="x.y", trainable=npc_trainable, loss_profile=npc_profile),
        ],
        spec,
        ["learner", "npc", "learner"],
        profiles,
    )
    policies = {"learner": MLPActorCritic(group), "npc": MLPActorCritic(group)}
    if not npc_trainable:
        policies["npc"].requires_grad_(False)
    return table, policies


def test_row_mask_is_valid_and_profile_and_trainable_and_binding(spread_config):
    table, policies = population(spread_config, profiles={"default": ["ppo"], "bc": ["distill"]}, npc_profile="bc")
    exp = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 3).collect()
    rows = exp["agent"]
    rows[keys.VALID][0, 0, 0] = False
    own = loss_row_mask(rows, table, "ppo", binding_id="learner")
    assert own[1, 1].tolist() == [True, False, True]
    assert not own[0, 0, 0]
    # The npc's rows carry profile "bc": a distill loss may read them, unless restricted to trainable rows.
    assert loss_row_mask(rows, table, "distill", binding_id=None, trainable_only=False)[1, 1].tolist() == [
        False,
        True,
        False,
    ]
    assert not loss_row_mask(rows, table, "distill", binding_id=None).any()


def test_update_changes_the_learner_and_leaves_the_frozen_binding_bit_identical(spread_config):
    table, policies = population(spread_config)
    frozen_before = copy.deepcopy(policies["npc"].state_dict())
    learner_before = copy.deepcopy(policies["learner"].state_dict())
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 10)
    trainer = IndependentMARLTrainer(table, policies, {"learner": PPO(minibatch_size=8, epochs=2)})
    assert list(trainer.unit_trainers) == ["learner"]
    optimizers = trainer.make_optimizers()
    for _ in range(2):
        metrics = trainer.update(collector.collect(), optimizers, PlainStepper())
    learner = metrics["learner"]
    assert learner["rows"] == 4 * 10 * 2  # only the learner's two agents
    assert_finite_metrics(learner)
    for key, value in policies["npc"].state_dict().items():
        assert torch.equal(value, frozen_before[key]), key
    changed = [k for k, v in policies["learner"].state_dict().items() if not torch.equal(v, learner_before[k])]
    assert changed, "the learner's parameters did not change"


def test_rows_outside_the_mask_produce_no_gradient(spread_config):
    table, policies = population(spread_config)
    exp = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5).collect()

    def learner_gradient(experience):
        trainer = IndependentMARLTrainer(table, policies, {"learner": PPO(minibatch_size=1000, epochs=1)})
        grads = []

        class Capture(PlainStepper):
            def step(self, optimizer, parameters, max_grad_norm):
                grads.append(torch.cat([p.grad.flatten() for p in parameters]).clone())
                optimizer.zero_grad()  # measure only: leave the weights as they are
                return 0.0

        trainer.update(experience, trainer.make_optimizers(), Capture())
        return grads[0]

    before = learner_gradient(exp)
    # Change everything the npc (agent 1) did: the learner's gradient must not move.
    scrambled = exp.clone()
    scrambled["agent", "action"][..., 1] = (scrambled["agent", "action"][..., 1] + 1) % 5
    scrambled["agent", "action_log_prob"][..., 1] -= 3.0
    scrambled["next", "agent", "reward"][..., 1, :] += 100.0
    assert torch.allclose(learner_gradient(scrambled), before, atol=1e-6)
    # Even a NaN in the npc's rows stays out (a masked-out NaN must not reach the gradient as 0 x NaN).
    scrambled["next", "agent", "reward"][..., 1, :] = float("nan")
    assert torch.allclose(learner_gradient(scrambled), before, atol=1e-6)
    # ... while changing the learner's own rewards does move it.
    own = exp.clone()
    own["next", "agent", "reward"][..., 0, :] += 1.0
    assert not torch.allclose(learner_gradient(own), before, atol=1e-6)


def test_ppo_needs_a_critic_and_says_which_binding(spread_config):
    group = spread_config.spec().groups["agent"]
    with pytest.raises(
        ValueError,
        match=r"binding 'npc': algorithm PPO needs a stochastic `actor` .* and a value `critic` .*UniformRandomPolicy lacks them",
    ):
        PPO().check_policy("npc", UniformRandomPolicy(group))
    with pytest.raises(
        ValueError, match=r"binding 'x': algorithm PPO needs a value `critic` .*; MLPActorCritic lacks it"
    ):
        PPO().check_policy("x", MLPActorCritic(group, critic="none"))


def test_critic_kind_selects_mappo_or_ippo(spread_config):
    table, policies = population(spread_config)
    assert PPO().make_unit_trainer("learner", policies["learner"], table).flavour == "MAPPO"
    group = spread_config.spec().groups["agent"]
    assert PPO().make_unit_trainer("learner", MLPActorCritic(group, critic="local"), table).flavour == "IPPO"


@pytest.mark.parametrize("field", ["lr", "epochs", "minibatch_size", "clip_epsilon"])
def test_bad_hyperparameters_are_named(field):
    with pytest.raises(ValueError, match=f"algorithm.{field}"):
        PPO(**{field: 0})


def test_the_entropy_bonus_follows_its_schedule_over_the_budget(spread_config):
    table, policies = population(spread_config)
    unit = PPO(entropy_coeff=0.2, final_entropy_coeff=0.05).make_unit_trainer("learner", policies["learner"], table)
    optimizer = torch.optim.Adam(policies["learner"].parameters())
    for done, expected in [(0.0, 0.2), (0.5, 0.125), (1.0, 0.05), (1.5, 0.05)]:
        unit.set_progress(optimizer, done)
        assert float(unit.loss.entropy_coeff) == pytest.approx(expected)
    constant = PPO(entropy_coeff=0.2).make_unit_trainer("learner", policies["learner"], table)
    constant.set_progress(optimizer, 0.9)
    assert float(constant.loss.entropy_coeff) == pytest.approx(0.2)
    with pytest.raises(ValueError, match=r"algorithm\.final_entropy_coeff"):
        PPO(final_entropy_coeff=-0.1)


def test_co_trained_bindings_step_on_their_own_schedules(spread_config):
    table, policies = population(spread_config, npc_trainable=True)
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5)
    trainer = IndependentMARLTrainer(
        table, policies, {"learner": PPO(minibatch_size=10), "npc": PPO(minibatch_size=10, update_every=2)}
    )
    optimizers = trainer.make_optimizers()
    assert list(optimizers) == ["learner", "npc"]  # by binding id
    assert {id(p) for p in optimizers["learner"].param_groups[0]["params"]} == {
        id(p) for p in policies["learner"].parameters()
    }
    assert {id(p) for p in optimizers["npc"].param_groups[0]["params"]} == {id(p) for p in policies["npc"].parameters()}
    stepped = []
    for iteration in range(4):
        npc_before = copy.deepcopy(policies["npc"].state_dict())
        metrics = trainer.update(collector.collect(), optimizers, PlainStepper(), iteration=iteration)
        npc_changed = any(not torch.equal(v, npc_before[k]) for k, v in policies["npc"].state_dict().items())
        stepped.append((sorted(metrics), npc_changed))
    assert stepped == [
        (["learner", "npc"], True),
        (["learner"], False),
        (["learner", "npc"], True),
        (["learner"], False),
    ]


def test_diagnostics_describe_the_bindings_own_rows_only(spread_config):
    """kl_approx, clip_fraction, entropy, the ratios and explained_variance are over the rows the loss learns from:
    the npc's rows (another policy's log-probs) must not show as a policy change of the learner."""
    table, policies = population(spread_config)
    exp = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5).collect()
    # The npc's stored log-probs far from what the learner's policy gives them: unmasked, a huge "KL".
    exp["agent", "action_log_prob"][..., 1] -= 3.0

    def first_step_metrics(experience):
        # One epoch of one minibatch: the loss is computed once, before any step, by the collecting policy.
        trainer = IndependentMARLTrainer(table, policies, {"learner": PPO(minibatch_size=1000, epochs=1)})

        class Measure(PlainStepper):
            def step(self, optimizer, parameters, max_grad_norm):
                optimizer.zero_grad()
                return 0.0

        return trainer.update(experience, trainer.make_optimizers(), Measure())["learner"]

    metrics = first_step_metrics(exp)
    assert abs(metrics["kl_approx"]) < 1e-6 and metrics["clip_fraction"] == 0.0
    assert metrics["max_ratio"] == pytest.approx(1.0, abs=1e-5) and metrics["mean_ratio"] == pytest.approx(
        1.0, abs=1e-5
    )
    # The npc's observations moved far away: the learner's policy on them (entropy included) must not count.
    scrambled = exp.clone()
    scrambled["agent", keys.OBSERVATION][..., 1, :] *= 1000.0
    moved = first_step_metrics(scrambled)
    for name in ("entropy", "kl_approx", "clip_fraction", "ESS", "max_ratio", "mean_ratio"):
        assert moved[name] == pytest.approx(metrics[name], abs=1e-6), name

    # Moving the learner's own stored log-probs does show.
    shifted = exp.clone()
    shifted["agent", "action_log_prob"][..., 0] += 0.5
    assert first_step_metrics(shifted)["kl_approx"] == pytest.approx(0.25, rel=1e-4)  # half its rows moved by 0.5


def test_explained_variance_describes_the_bindings_own_rows_only(spread_config):
    """The learner's critic also values the npc's rows of a minibatch; those values must not enter its explained variance."""
    table, policies = population(spread_config)
    group = spread_config.spec().groups["agent"]
    policies["learner"] = MLPActorCritic(group, critic="local")  # its values on its own rows ignore the npc's view
    exp = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5).collect()

    def explained_variance(experience):
        trainer = IndependentMARLTrainer(table, policies, {"learner": PPO(minibatch_size=1000, epochs=1)})

        class Measure(PlainStepper):
            def step(self, optimizer, parameters, max_grad_norm):
                optimizer.zero_grad()
                return 0.0

        return trainer.update(experience, trainer.make_optimizers(), Measure())["learner"]["explained_variance"]

    scrambled = exp.clone()
    scrambled["agent", keys.OBSERVATION][..., 1, :] *= 1000.0  # the learner's critic on the npc's rows: way off
    assert explained_variance(scrambled) == pytest.approx(explained_variance(exp), abs=1e-5)


def test_minibatches_hold_only_env_steps_where_the_binding_has_rows(spread_config):
    """A binding that plays two of four env copies learns from minibatches of its own steps only."""
    spec = spread_config.spec()
    group = spec.groups["agent"]
    agent_map = {"default": ["learner"] * 3, "per_env": {2: ["npc"] * 3, 3: ["npc"] * 3}}
    table = BindingTable(
        [PolicyBinding("learner", class_path="x.y"), PolicyBinding("npc", class_path="x.y", trainable=False)],
        spec,
        agent_map,
        num_envs=4,
    )
    policies = {"learner": MLPActorCritic(group), "npc": MLPActorCritic(group).requires_grad_(False)}
    experience = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5).collect()
    trainer = IndependentMARLTrainer(table, policies, {"learner": PPO(minibatch_size=4, epochs=2)})
    unit = trainer.unit_trainers["learner"]
    seen = []
    losses = unit.minibatch_losses

    def record(batch, **kwargs):
        seen.append(batch.get(("agent", keys.LOSS_MASK)).clone())
        return losses(batch, **kwargs)

    unit.minibatch_losses = record
    metrics = trainer.update(experience, trainer.make_optimizers(), PlainStepper())["learner"]
    assert metrics["rows"] == 2 * 5 * 3  # two copies, five steps, three agents
    # 10 env steps of its own per epoch, 4 per minibatch: 2 minibatches x 2 epochs, each step with its rows.
    assert len(seen) == 4 and all(mask.shape == (4, 3) and bool(mask.any(-1).all()) for mask in seen)


@pytest.mark.parametrize("clip_each_network", [False, True])
def test_clip_each_network_clips_the_actor_and_the_critic_apart(spread_config, clip_each_network):
    table, policies = population(spread_config)
    experience = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5).collect()
    algorithm = PPO(minibatch_size=40, epochs=1, max_grad_norm=1e-3, clip_each_network=clip_each_network)
    trainer = IndependentMARLTrainer(table, policies, {"learner": algorithm})
    optimizer = trainer.make_optimizers()["learner"]
    learner = policies["learner"]
    groups = [{id(p) for p in group["params"]} for group in optimizer.param_groups]
    if clip_each_network:
        assert groups == [{id(p) for p in learner.actor.parameters()}, {id(p) for p in learner.critic.parameters()}]
    else:
        assert groups == [{id(p) for p in learner.parameters()}]
    clipped_norms = []
    zero_grad = optimizer.zero_grad

    def read_clipped_norms_then_zero(set_to_none=True):
        # step_finite zeroes the gradients after its step: read each network's clipped norm first.
        for network in (learner.actor, learner.critic):
            grads = [p.grad for p in network.parameters() if p.grad is not None]
            clipped_norms.append(float(torch.nn.utils.get_total_norm(grads)))
        zero_grad(set_to_none=set_to_none)

    optimizer.zero_grad = read_clipped_norms_then_zero
    trainer.update(experience, {"learner": optimizer}, PlainStepper())
    assert len(clipped_norms) == 2  # one minibatch: the actor's norm, the critic's
    if clip_each_network:
        assert clipped_norms == pytest.approx([1e-3, 1e-3], rel=1e-3)
    else:
        assert math.hypot(*clipped_norms) == pytest.approx(1e-3, rel=1e-3)
