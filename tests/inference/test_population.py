"""`load_population`'s Population: the same actions as the training stack's evaluation vector (transforms
inside), masks required and respected, recurrent state per agent reset by `reset()`, versioned and
allow-listed files."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest
import torch
from mpe2 import simple_spread_v3
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.spec import GroupSpec
from lightmarl.envs.transforms import FrameStack, ObservationNorm
from lightmarl.inference import Population, SavedPopulation, load_population, read_artifact
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, PolicyDict, RecurrentActorCritic
from lightmarl.population import BindingTable

SPREAD = {"N": 3, "max_cycles": 6}


def artifact_of(policy, env_spec=None, transforms=(), base_groups=None, **fields) -> SavedPopulation:
    group = policy.group
    return SavedPopulation(
        bindings={"main": {**policy.origin, "group": group.name}},
        groups={group.name: dataclasses.asdict(group)},
        state={f"main.{k}": v for k, v in policy.state_dict().items()},
        transforms=[{**t.describe(), "state": t.state_dict()} for t in transforms],
        env={"possible_agents": list(group.agents), **({"base_groups": base_groups} if base_groups else {})},
        agent_binding_map={"default": dict.fromkeys(group.agents, "main"), "per_env": {}},
        source="test",
        **fields,
    )


def test_transforms_inside_act_match_the_evaluation_vector():
    """ObservationNorm then FrameStack, run by Population on raw PettingZoo dicts and by an evaluation
    vector of the same transforms: the same greedy actions at every step."""
    norm, stack = ObservationNorm(clip=5.0), FrameStack(num_frames=3)
    config = PettingZooEnvConfig(env_kwargs=SPREAD, num_envs=1, transforms=[norm, stack])
    base = config.base_spec()
    spec = config.spec()
    norm.load_state_dict(
        {
            "statistics": {
                "agent": {
                    "mean": torch.randn(18, dtype=torch.float64),
                    "var": torch.rand(18, dtype=torch.float64) + 0.1,
                    "count": 5,
                }
            }
        }
    )
    policy = MLPActorCritic(spec.groups["agent"], hidden_sizes=[32])
    policy.origin = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [32]}}
    base_groups = {n: dataclasses.asdict(g) for n, g in base.groups.items()}
    population = Population(artifact_of(policy, transforms=[norm, stack], base_groups=base_groups))
    vector = config.make_vector(seed=7, num_envs=1, evaluation=True)
    acting = MultiAgentPolicy({"main": policy}, BindingTable(None, spec))
    env = simple_spread_v3.parallel_env(**SPREAD)
    observations, _ = env.reset(seed=7)
    vector.reset()
    steps = 0
    while env.agents:
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            expected = acting(vector.observation_td())["agent", "action"][0]
        actions = population.act(observations)
        assert [actions[a] for a in env.possible_agents] == expected.tolist(), steps
        observations, *_ = env.step(actions)
        vector.step({"agent": expected[None]})
        steps += 1
    assert steps == 6


def masked_group() -> GroupSpec:
    return GroupSpec("player", ("player_0", "player_1"), (0, 1), (5,), "discrete", num_actions=4, has_action_mask=True)


def masked_population(tmp_path) -> Population:
    policy = MLPActorCritic(masked_group(), hidden_sizes=[16], critic="local")
    policy.origin = {
        "class_path": "lightmarl.policies.MLPActorCritic",
        "policy_kwargs": {"hidden_sizes": [16], "critic": "local"},
    }
    PolicyDict({"main": policy}).export(tmp_path / "masked")
    return load_population(tmp_path / "masked")


def test_a_masked_binding_without_its_mask_names_the_key_and_the_binding(tmp_path):
    population = masked_population(tmp_path)
    with pytest.raises(ValueError, match=r"binding 'main' \(group 'player'\).*'action_mask'"):
        population.act_turn("player_0", np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match=r"binding 'main'.*'action_mask'"):
        population.act({"player_1": {"observation": np.zeros(5, dtype=np.float32)}})


def test_act_turn_keeps_to_the_mask(tmp_path):
    population = masked_population(tmp_path)
    rng = np.random.default_rng(0)
    chosen = set()
    for _ in range(200):
        mask = rng.random(4) < 0.4
        mask[rng.integers(4)] = True
        observation = {"observation": rng.normal(size=5).astype(np.float32), "action_mask": mask.astype(np.int8)}
        for greedy in (True, False):
            action = population.act_turn("player_1", observation, greedy=greedy)
            assert mask[action], (mask, action)
            chosen.add(action)
    assert len(chosen) == 4


@pytest.mark.parametrize(
    ("observation", "mask", "expected"),
    [
        (np.full(5, np.nan, dtype=np.float32), None, r"5 non-finite \(NaN or infinite\) of 5 values"),
        (np.array([0, 0, np.inf, 0, 0], dtype=np.float32), None, r"1 non-finite"),
        (np.zeros(7, dtype=np.float32), None, r"has shape \[7\]; group 'player' observes \[5\]"),
        (np.array(["a", "b", "c", "d", "e"]), None, r"<U1 values; expected numbers"),
        (np.zeros(5, dtype=np.float32), np.zeros(4, dtype=np.int8), r"allows no action"),
        (np.zeros(5, dtype=np.float32), np.ones(3, dtype=np.int8), r"shape \[3\]; expected \[4\]"),
    ],
    ids=["nan", "inf", "shape", "strings", "all-false-mask", "mask-shape"],
)
def test_bad_observations_and_masks_are_refused_naming_the_agent_and_binding(tmp_path, observation, mask, expected):
    """Never a silent action: NaN observations gave action 0 to every agent, an all-False mask a masked-out action."""
    population = masked_population(tmp_path)
    given = {"observation": observation, "action_mask": np.ones(4, dtype=np.int8) if mask is None else mask}
    with pytest.raises(
        ValueError, match=r"^act: agent 'player_1' \(binding 'main'\): the (observation|action_mask) (.* )?" + expected
    ):
        population.act_turn("player_1", given)
    with pytest.raises(
        ValueError, match=r"^act: agent 'player_0' \(binding 'main'\): the (observation|action_mask) (.* )?" + expected
    ):
        population.act({"player_0": given})


def test_recurrent_state_is_kept_per_agent_and_reset(tmp_path):
    group = GroupSpec("agent", ("agent_0", "agent_1"), (0, 1), (3,), "discrete", num_actions=3)
    policy = RecurrentActorCritic(group, hidden_size=8, encoder_sizes=[8])
    policy.origin = {
        "class_path": "lightmarl.policies.RecurrentActorCritic",
        "policy_kwargs": {"hidden_size": 8, "encoder_sizes": [8]},
    }
    population = Population(artifact_of(policy))
    inputs = [
        {"agent_0": np.random.randn(3).astype(np.float32), "agent_1": np.random.randn(3).astype(np.float32)}
        for _ in range(6)
    ]

    def play():
        return [population.act(obs) for obs in inputs]

    first = play()
    population.reset()
    assert play() == first, "reset() starts every agent's memory afresh"
    # By hand: the policy's own state carried between steps from zeros.
    state = torch.zeros(1, 2, *policy.state_shape)
    for step, obs in enumerate(inputs):
        rows = {
            "observation": torch.as_tensor(np.stack([obs["agent_0"], obs["agent_1"]]))[None],
            "recurrent_state": state,
            "is_init": torch.full((1, 2), step == 0),
        }
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            out = policy(TensorDict({"agent": TensorDict(rows, batch_size=[1, 2])}, batch_size=[1]))["agent"]
        assert [first[step]["agent_0"], first[step]["agent_1"]] == out["action"][0].tolist()
        state = out["next_recurrent_state"]


def test_the_description_is_versioned(tmp_path):
    masked_population(tmp_path)
    description = json.loads((tmp_path / "masked" / "population.json").read_text())
    assert description["format"] == "lightmarl.population/1"
    (tmp_path / "masked" / "population.json").write_text(
        json.dumps({**description, "format": "lightmarl.population/9"})
    )
    with pytest.raises(ValueError, match=r"of format 'lightmarl.population/1' \(found 'lightmarl.population/9'\)"):
        load_population(tmp_path / "masked")


def test_a_class_outside_lightmarl_is_not_imported_unless_allowed(tmp_path):
    masked_population(tmp_path)
    path = tmp_path / "masked" / "population.json"
    description = json.loads(path.read_text())
    description["bindings"]["main"]["class_path"] = "lightmarl_test_not_imported.Evil"
    path.write_text(json.dumps(description))
    with pytest.raises(
        ValueError,
        match=r"binding 'main'.class_path: .* names 'lightmarl_test_not_imported.Evil', which is neither a lightmarl",
    ):
        load_population(tmp_path / "masked")
    assert "lightmarl_test_not_imported" not in sys.modules
    for elsewhere in ("lightmarl.training.module.MARLModule", "lightmarl.envs.spec.GroupSpec"):
        description["bindings"]["main"]["class_path"] = elsewhere  # lightmarl's, but no policy
        path.write_text(json.dumps(description))
        with pytest.raises(ValueError, match=rf"names '{elsewhere}', which is neither a lightmarl"):
            read_artifact(tmp_path / "masked").check_classes()
    description["bindings"]["main"]["class_path"] = "lightmarl.policies.mlp.torch.load"  # torch's, through ours
    path.write_text(json.dumps(description))
    with pytest.raises(ValueError, match=r"which is not a class defined in lightmarl\.policies"):
        read_artifact(tmp_path / "masked").check_classes()
    # Named by the caller (allow) or trusted (trust_code): resolved, by the one loading rule (lightmarl.trust).
    description["bindings"]["main"]["class_path"] = "lightmarl.training.module.MARLModule"
    path.write_text(json.dumps(description))
    read_artifact(tmp_path / "masked").check_classes(["lightmarl.training.module.MARLModule"])
    read_artifact(tmp_path / "masked").check_classes(trust_code=True)
    # Allowed by the caller: imported and used.
    description["bindings"]["main"]["class_path"] = "lightmarl.policies.MLPActorCritic"
    path.write_text(json.dumps(description))
    assert load_population(tmp_path / "masked", allow=["lightmarl.policies.MLPActorCritic"]).bindings
