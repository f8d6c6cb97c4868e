"""QMIX / VDN UnitTrainers and the env's global state: contract, mixing, joint replay, targets, checkpoints."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch import Trainer, seed_everything

from lightmarl import keys
from lightmarl.algorithms import PPO, QMIX, VDN, IndependentMARLTrainer, PlainStepper
from lightmarl.algorithms.value_decomposition import ValueDecompositionUnitTrainer
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.evaluation import evaluate_episodes
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, UniformRandomPolicy
from lightmarl.policies.qnet import QNetworkPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl.training import MARLModule

# simple_tag: group "adversary" (3 agents, 16-dim observations) and group "agent" (1 agent, 14-dim);
# the env's global state (62) is every agent's observation, so it is not the adversaries' side by side.
TAG = "mpe2.simple_tag_v3.parallel_env"


def tag_config(state: bool = True, num_workers: int = 0) -> PettingZooEnvConfig:
    return PettingZooEnvConfig(
        env_fn=TAG, env_kwargs={"max_cycles": 5}, num_envs=4, state=state, num_workers=num_workers
    )


def tag_team(algorithm, state: bool = True, steps: int = 10, loss_profiles=None, team_profile="default"):
    """QMIX/VDN binding ``team`` on the adversaries, PPO binding ``runner`` on the good agent."""
    config = tag_config(state)
    spec = config.spec()
    table = BindingTable(
        [PolicyBinding("team", class_path="x.y", loss_profile=team_profile), PolicyBinding("runner", class_path="x.y")],
        spec,
        ["team", "team", "team", "runner"],
        loss_profiles,
    )
    policies = {
        "team": QNetworkPolicy(spec.groups["adversary"], hidden_sizes=(32,)),
        "runner": MLPActorCritic(spec.groups["agent"], hidden_sizes=(16,)),
    }
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy(policies, table), steps)
    trainer = IndependentMARLTrainer(table, policies, {"team": algorithm, "runner": PPO(minibatch_size=8)})
    unit = trainer.unit_trainers["team"]
    assert isinstance(unit, ValueDecompositionUnitTrainer)
    return table, policies, collector, unit


def small(cls, **kwargs):
    return cls(**{"batch_size": 16, "learning_starts": 16, "updates_per_iteration": 1, **kwargs})


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return copy.deepcopy(module.state_dict())


# -- the env's global state ---------------------------------------------------------------------
@pytest.mark.parametrize("num_workers", [0, 2], ids=["in-process", "worker processes"])
def test_env_state_is_recorded_at_the_experience_root(num_workers):
    config = tag_config(state=True, num_workers=num_workers)
    spec = config.spec()
    assert spec.state_shape == (62,)
    table = BindingTable(
        [PolicyBinding("a", class_path="x.y"), PolicyBinding("b", class_path="x.y")], spec, ["a", "a", "a", "b"]
    )
    policies = {"a": QNetworkPolicy(spec.groups["adversary"]), "b": QNetworkPolicy(spec.groups["agent"])}
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy(policies, table), 7)
    try:
        experience = collector.collect()
    finally:
        collector.close()
    state, next_state = experience[keys.STATE], experience["next", keys.STATE]
    assert state.shape == next_state.shape == (4, 7, 62) and state.dtype == torch.float32
    # mpe2's state is every agent's observation in possible_agents order: check it row by row,
    # including the final state of the episodes that ended (max_cycles=5) and the reset one after.
    for key, where in ((state, ()), (next_state, ("next",))):
        observations = torch.cat(
            [
                experience[(*where, "adversary", "observation")].flatten(2),
                experience[(*where, "agent", "observation")].flatten(2),
            ],
            dim=-1,
        )
        assert torch.equal(key, observations)
    assert not torch.equal(next_state[:, 4], state[:, 5])  # episode end: final state, then a new episode


def test_env_state_is_off_by_default_and_refused_where_the_env_has_none():
    spec = tag_config(state=False).spec()
    assert spec.state_shape is None
    experience = RolloutCollector(
        tag_config(state=False).make_vector(0),
        MultiAgentPolicy(
            {"a": QNetworkPolicy(spec.groups["adversary"]), "b": QNetworkPolicy(spec.groups["agent"])},
            BindingTable(
                [PolicyBinding("a", class_path="x.y"), PolicyBinding("b", class_path="x.y")], spec, ["a", "a", "a", "b"]
            ),
        ),
        2,
    ).collect()
    assert keys.STATE not in experience.keys() and keys.STATE not in experience["next"].keys()
    memory = PettingZooEnvConfig(env_fn="lightmarl.envs.testing.memory.parallel_env", num_envs=1, state=True)
    with pytest.raises(ValueError, match=r"env.state: env 'memory' has no global state"):
        memory.spec()


# -- mixing ---------------------------------------------------------------------------------------
def test_mixers_give_one_team_value_per_env_step():
    _, _, collector, qmix = tag_team(small(QMIX, mixing_embed_dim=8))
    transitions = qmix.transitions(collector.collect())
    assert transitions.batch_size == (40,)  # 4 envs x 10 steps, one joint transition each
    assert transitions["adversary", keys.OBSERVATION].shape == (40, 3, 16)
    assert transitions[keys.STATE].shape == transitions["next", keys.STATE].shape == (40, 62)
    assert qmix.team_action_value(transitions).shape == (40,)

    _, policies, collector, vdn = tag_team(small(VDN), state=False)
    transitions = vdn.transitions(collector.collect())
    assert keys.STATE not in transitions.keys()  # VDN reads no state
    team = vdn.team_action_value(transitions)
    values = policies["team"].qvalue(transitions.clone(recurse=False))["adversary", "action_value"]
    utilities = values.gather(-1, transitions["adversary", keys.ACTION].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(team, utilities.sum(-1))  # VDN: the sum of the agents' utilities
    # An absent agent's utility enters the mix as 0.
    transitions["adversary", keys.VALID][:, 1] = False
    assert torch.allclose(vdn.team_action_value(transitions), utilities[:, [0, 2]].sum(-1))


def test_qmix_without_env_state_mixes_on_the_groups_observations():
    _, _, collector, unit = tag_team(small(QMIX), state=False)
    assert unit.state_shape == (3 * 16,)
    transitions = unit.transitions(collector.collect())
    assert torch.equal(transitions[keys.STATE], transitions["adversary", keys.OBSERVATION].flatten(1))
    assert torch.equal(transitions["next", keys.STATE], transitions["next", "adversary", keys.OBSERVATION].flatten(1))


# -- the contract every algorithm passes ------------------------------------------------------------
@pytest.mark.parametrize("algorithm", [QMIX, VDN])
def test_one_update_changes_the_bindings_network_and_mixer_only_and_the_loss_is_finite(algorithm):
    _, policies, collector, unit = tag_team(small(algorithm, tau=0.1))
    optimizer = unit.make_optimizer()
    assert {id(p) for p in optimizer.param_groups[0]["params"]} == {id(p) for p in unit.parameters()}
    mixer_params = list(unit.mixer.parameters())
    assert {id(p) for p in mixer_params} <= {id(p) for p in unit.parameters()}
    assert bool(mixer_params) == (algorithm is QMIX)  # VDN's sum has no parameters
    before = {b: snapshot(p) for b, p in policies.items()}
    mixer_before = snapshot(unit.mixer)
    target_before = [t.clone() for t in unit.target_parameters()]
    metrics = unit.update(collector.collect(), optimizer, PlainStepper())
    assert metrics["grad_steps"] == 1 and metrics["rows"] == 40
    for name in ("loss", "td_error", "q_team"):
        assert math.isfinite(metrics[name]), (name, metrics)
    changed = [k for k, v in policies["team"].state_dict().items() if not torch.equal(v, before["team"][k])]
    assert any(k.startswith("qvalue.") for k in changed), changed
    if algorithm is QMIX:
        assert all(not torch.equal(v, mixer_before[k]) for k, v in unit.mixer.state_dict().items())
    for key, value in policies["runner"].state_dict().items():
        assert torch.equal(value, before["runner"][key]), key
    # Targets (utility network and mixer) moved by the soft update only.
    online = [
        p
        for name in ("local_value_network_params", "mixer_network_params")
        for p in getattr(unit.loss, name).values(True, True)
    ]
    assert len(online) == len(unit.target_parameters()) == len(target_before)
    for t, old, p in zip(unit.target_parameters(), target_before, online):
        assert t.data_ptr() != p.data_ptr()
        assert torch.allclose(t, 0.9 * old + 0.1 * p.detach(), atol=1e-6)


def test_loss_keys_follow_the_env_group_name():
    _, _, _, unit = tag_team(small(QMIX))
    accepted = unit.loss.tensor_keys
    assert accepted.action == ("adversary", "action") and accepted.local_value == ("adversary", "chosen_action_value")
    assert accepted.action_value == ("adversary", "action_value") and accepted.global_value == keys.TEAM_ACTION_VALUE
    assert unit.mixer_module.in_keys == [
        ("adversary", "chosen_action_value"),
        ("adversary", keys.VALID),
        keys.STATE,
    ]


@pytest.mark.parametrize("double_dqn", [True, False])
def test_loss_is_the_td_error_of_the_mixed_value(double_dqn):
    gamma = 0.9
    _, policies, collector, unit = tag_team(small(QMIX, gamma=gamma, double_dqn=double_dqn, loss_function="l2"))
    with torch.no_grad():  # targets different from the online networks, so double Q matters
        for t in unit.target_parameters():
            t.add_(0.1 * torch.randn_like(t))
    batch = unit.transitions(collector.collect())
    batch["next", keys.TERMINATED][::3] = True
    loss = unit.loss(batch.clone())["loss"]

    qvalue, g = policies["team"].qvalue, "adversary"
    online_mixer = unit.mixer_module
    target_utilities = copy.deepcopy(unit.loss.local_value_network)  # the Q-network (+ double Q's bootstrap)
    target_mixer = copy.deepcopy(online_mixer)
    unit.loss.target_local_value_network_params.to_module(target_utilities)
    unit.loss.target_mixer_network_params.to_module(target_mixer)
    with torch.no_grad():
        nxt = batch["next"].clone(recurse=False)
        target_values = target_utilities(nxt.clone(recurse=False))[g, "action_value"]
        greedy = qvalue(nxt.clone(recurse=False))[g, "action"] if double_dqn else target_values.argmax(-1)
        nxt.set((g, "chosen_action_value"), target_values.gather(-1, greedy.unsqueeze(-1)))
        next_team = target_mixer(nxt)[keys.TEAM_ACTION_VALUE]
        target = batch["next", "reward"] + gamma * (~batch["next", "terminated"]) * next_team
    now = batch.clone(recurse=False)
    values = qvalue(now)[g, "action_value"]
    now.set((g, "chosen_action_value"), values.gather(-1, batch[g, "action"].unsqueeze(-1)))
    expected = (online_mixer(now)[keys.TEAM_ACTION_VALUE] - target).pow(2).mean()
    assert torch.allclose(loss, expected, atol=1e-5), (loss, expected)


def test_state_dict_round_trip_restores_mixer_targets_counters_and_epsilon():
    _, _, collector, unit = tag_team(small(QMIX, eps_decay_frames=100))
    optimizer = unit.make_optimizer()
    unit.update(collector.collect(), optimizer, PlainStepper())
    state = copy.deepcopy(unit.state_dict())
    assert state["frames"] == 40 and state["grad_steps"] == 1
    assert any(k.startswith("mixer_network_params.") for k in state["networks"])

    _, _, _, fresh = tag_team(small(QMIX, eps_decay_frames=100))
    assert not all(torch.equal(a, b) for a, b in zip(fresh.target_parameters(), unit.target_parameters()))
    fresh.load_state_dict(state)
    assert fresh.frames == 40 and fresh.grad_steps == 1 and fresh.epsilon == pytest.approx(unit.epsilon)
    for name, value in unit.mixer.state_dict().items():
        assert torch.equal(fresh.mixer.state_dict()[name], value), name
    assert all(torch.equal(a, b) for a, b in zip(fresh.target_parameters(), unit.target_parameters()))
    with pytest.raises(ValueError, match=r"binding 'team': the saved trainer state lacks"):
        fresh.load_state_dict({**state, "networks": {}})


# -- setup errors ---------------------------------------------------------------------------------
def test_the_binding_must_control_every_agent_of_its_group():
    spec = tag_config().spec()
    bindings = [PolicyBinding(b, class_path="x.y") for b in ("team", "other", "runner")]
    policy = QNetworkPolicy(spec.groups["adversary"])
    table = BindingTable(bindings, spec, ["team", "other", "team", "runner"])
    with pytest.raises(
        ValueError, match=r"binding 'team': algorithm QMIX .* agent_binding_map gives 'adversary_1' to 'other'"
    ):
        QMIX().make_unit_trainer("team", policy, table)
    per_env = {"default": ["team", "team", "team", "runner"], "per_env": {2: ["team", "team", "other", "runner"]}}
    table = BindingTable(bindings, spec, per_env, num_envs=4)
    with pytest.raises(ValueError, match=r"agent_binding_map.per_env\[2\] gives 'adversary_2' to 'other'"):
        VDN().make_unit_trainer("team", policy, table)


def test_the_policy_must_have_utilities_and_discrete_actions():
    spec = tag_config().spec()
    with pytest.raises(
        ValueError, match=r"binding 'team': algorithm VDN needs a policy with Q-values .*MLPActorCritic lacks it"
    ):
        VDN().check_policy("team", MLPActorCritic(spec.groups["adversary"]))
    with pytest.raises(ValueError, match=r"algorithm.team_reward"):
        QMIX(team_reward="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"algorithm.mixing_embed_dim"):
        QMIX(mixing_embed_dim=0)


# -- the joint replay -------------------------------------------------------------------------------
def test_replay_holds_only_valid_joint_transitions_with_team_reward_and_done():
    _, _, collector, unit = tag_team(small(QMIX, learning_starts=10**6))
    experience = collector.collect()
    rows = experience["adversary"]
    rows[keys.VALID][0, 3] = False  # env 0, step 3: no adversary present
    rows[keys.VALID][1, 2, 0] = False  # env 1, step 2: adversary_0 absent
    metrics = unit.update(experience, unit.make_optimizer(), PlainStepper())
    stored = unit.replay[:]
    assert len(unit.replay) == metrics["rows"] == 4 * 10 - 1 and "loss" not in metrics  # still filling
    assert stored["adversary"][keys.VALID].any(-1).all()
    assert (stored["adversary", keys.BINDING_ID] == unit.table.index["team"]).all()
    # Joint transitions keep the annotations: each is traceable to its env copy, step and agents.
    assert stored["adversary", keys.AGENT_ID].tolist() == [[0, 1, 2]] * 39
    partial = (stored["adversary", keys.ENV_INDEX][:, 0] == 1) & ~stored["adversary", keys.VALID][:, 0]
    assert int(partial.sum()) == 1
    reward = experience["next", "adversary", "reward"][1, 2].squeeze(-1)
    assert torch.allclose(stored["next", "reward"][partial].squeeze(), reward[1:].mean())  # mean over present agents
    assert not stored["next", "adversary", keys.VALID][partial][0, 0]  # absent: out of the bootstrap too
    # Team done: the steps at the end of an episode (max_cycles=5), bootstrapped (time limit, not terminated).
    ends = experience["next", "adversary", "done"].squeeze(-1).all(-1)
    assert int(stored["next", "done"].sum()) == int(ends.sum()) - int(ends[0, 3])
    assert not stored["next", "terminated"].any()


def test_a_loss_profile_without_the_loss_stores_nothing():
    profiles = {"default": ["ppo"], "qmix_only": ["qmix"]}
    _, _, collector, unit = tag_team(small(VDN), loss_profiles=profiles, team_profile="qmix_only")
    assert unit.transitions(collector.collect()).batch_size == (0,)


def test_team_reward_sums_when_asked():
    _, _, collector, unit = tag_team(small(VDN, team_reward="sum"))
    experience = collector.collect()
    transitions = unit.transitions(experience)
    expected = experience["next", "adversary", "reward"].squeeze(-1).sum(-1).reshape(-1, 1)
    assert torch.allclose(transitions["next", "reward"], expected)


# -- learning -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_qmix_beats_random_within_its_recipe_budget(tmp_path):
    """``recipes/qmix_simple_spread.yaml`` as written (100k frames), evaluated like its ``validate``."""
    recipe = yaml.safe_load((Path(__file__).resolve().parents[2] / "recipes/qmix_simple_spread.yaml").read_text())
    model = recipe["model"]
    assert model["algorithm"]["class_path"] == "lightmarl.algorithms.QMIX"
    seed_everything(recipe["seed_everything"])
    env = PettingZooEnvConfig(**model["env"])
    module = MARLModule(
        env=env,
        policy_bindings=model["policy_bindings"],
        algorithm=QMIX(**model["algorithm"]["init_args"]),
        rollout_steps=model["rollout_steps"],
        max_frames=model["max_frames"],
        seed=recipe["seed_everything"],
    )
    Trainer(
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
    ).fit(module)
    assert module.frames >= model["max_frames"]
    episodes = {"num_episodes": recipe["evaluation"]["validation"]["episodes"], "seed": 10_000}
    trained = evaluate_episodes(module.population, env, **episodes)["main"]["episode_return"]
    random_population = MultiAgentPolicy(
        {"main": UniformRandomPolicy(module.env_spec.groups["agent"], seed=0)}, module.table
    )
    baseline = evaluate_episodes(random_population, env, **episodes)["main"]["episode_return"]
    # Measured: about -22.8 against -26.8 for uniform-random actions on these 32 episodes.
    assert trained > baseline + 2.0, (trained, baseline)
