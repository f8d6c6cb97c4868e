"""VMAS scenarios as a torch-native vector: the VecEnv contract, auto-reset, collection, bad input.

Skipped without the optional ``vmas`` package (``pip install 'lightmarl[vmas]'``).
"""

from __future__ import annotations

import pytest
import torch
from torchrl.envs.utils import ExplorationType

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs.checks import check_same_trajectories, check_vec_env, random_actions
from lightmarl.envs.transforms import FrameStack, ObservationNorm
from lightmarl.envs.vmas import VmasEnvConfig, VmasVecEnv
from lightmarl.evaluation.scenarios import EvaluationConfig, ValidationConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding

pytest.importorskip("vmas")  # lightmarl.envs.vmas imports vmas only when a scenario is built


def balance(**changes) -> VmasEnvConfig:
    settings = {"scenario": "balance", "scenario_kwargs": {"n_agents": 3}, "num_envs": 4, "max_steps": 5}
    return VmasEnvConfig(**{**settings, **changes})


def test_spec_groups_the_scenarios_agents():
    spec = balance().spec()
    assert spec.name == "balance" and spec.possible_agents == ("agent_0", "agent_1", "agent_2")
    group = spec.groups["agent"]
    assert group.action_kind == "discrete" and group.num_actions == 9 and group.observation_shape == (16,)
    moving = balance(continuous_actions=True).spec().groups["agent"]
    assert moving.action_kind == "continuous" and moving.action_shape == (2,)
    assert moving.action_low == (-1.0, -1.0) and moving.action_high == (1.0, 1.0)


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_vectors_keep_the_contract_and_seeds_reproduce_trajectories(continuous):
    config = balance(continuous_actions=continuous)
    report = check_vec_env(config.make_vector(seed=3), num_steps=12)
    assert report.episode_ends > 0  # max_steps=5: every copy is reset inside step()
    check_same_trajectories(config.make_vector(seed=3), config.make_vector(seed=3), num_steps=12)
    a, b = config.make_vector(seed=3), config.make_vector(seed=4)
    assert not torch.equal(a.reset()["agent"]["observation"], b.reset()["agent"]["observation"])


def test_copies_are_truncated_at_max_steps_and_reset_inside_step():
    env = balance().make_vector(seed=0)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    for step in range(5):
        before = env.current["agent"]["observation"].clone()
        nxt, ended = env.step(random_actions(env.spec, env.current, generator))
        assert nxt["agent"]["reward"].shape == (4, 3) and torch.isfinite(nxt["agent"]["reward"]).all()
        if step < 4:
            assert not ended.any() and not nxt["agent"]["done"].any()
            assert torch.equal(env.current["agent"]["observation"], nxt["agent"]["observation"])
    assert ended.all() and nxt["agent"]["truncated"].all() and not nxt["agent"]["terminated"].any()
    # The step reports each copy's final observation; the vector holds the reset one.
    assert not torch.equal(env.current["agent"]["observation"], nxt["agent"]["observation"])
    assert not torch.equal(env.current["agent"]["observation"], before)
    assert env.current["agent"]["valid"].all()


def test_vectors_draw_from_their_own_random_state():
    """An evaluation vector built mid-training leaves the training vector's episode starts alone."""
    config = balance()
    generator = torch.Generator().manual_seed(0)
    reference, probed = config.make_vector(seed=1), config.make_vector(seed=1)
    reference.reset()
    probed.reset()
    for step in range(12):
        actions = random_actions(reference.spec, reference.current, generator)
        if step == 2:
            other = config.make_vector(seed=9)
            other.reset()
            other.step(random_actions(other.spec, other.current, torch.Generator().manual_seed(1)))
        a, b = reference.step(actions), probed.step(actions)
        assert torch.equal(a[0]["agent"]["observation"], b[0]["agent"]["observation"]), step
    assert torch.equal(reference.current["agent"]["observation"], probed.current["agent"]["observation"])


def test_the_collector_rolls_out_a_vmas_vector_with_transforms():
    config = balance(transforms=[ObservationNorm(), FrameStack(num_frames=2)])
    spec = config.spec()
    assert spec.groups["agent"].observation_shape == (32,)
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    population = MultiAgentPolicy({"main": MLPActorCritic(spec.groups["agent"])}, table)
    collector = RolloutCollector(config.make_vector(seed=0), population, 8, exploration=ExplorationType.RANDOM)
    experience = collector.collect()
    assert experience.batch_size == (4, 8)
    assert experience["agent", "observation"].shape == (4, 8, 3, 32)
    assert experience["next", "agent", "done"][:, 4].all()  # every copy ends at step 5
    assert collector.episode_summary()["main"]["episodes"] == 4
    # The first observations, then each step's next ones (the reset ones where a copy ended).
    assert config.transforms[0].statistics["agent"].count == 4 * 3 * (1 + 8)
    check_vec_env(config.make_vector(seed=0, evaluation=True), num_steps=6)


def test_bad_scenarios_fail_when_the_recipe_is_built():
    with pytest.raises(ValueError, match=r"env.scenario: VMAS has no scenario 'no_such_scenario'"):
        balance(scenario="no_such_scenario").spec()
    with pytest.raises(ValueError, match=r"env.scenario: 'torch.nn.Linear' is not a vmas BaseScenario subclass"):
        balance(scenario="torch.nn.Linear").spec()
    with pytest.raises(ValueError, match=r"env.scenario_kwargs: VMAS scenario 'balance'.*no_such_kwarg.*not used"):
        balance(scenario_kwargs={"n_agents": 3, "no_such_kwarg": 1}).spec()
    with pytest.raises(ValueError, match=r"VMAS scenario 'balance' with scenario_kwargs .* failed to build"):
        balance(scenario_kwargs={"n_agents": "three"}).spec()
    with pytest.raises(ValueError, match=r"env.max_steps: expected a positive integer or null"):
        balance(max_steps=0)
    with pytest.raises(ValueError, match=r"env.device: 'gpu7' is not a torch device"):
        balance(device="gpu7")


def test_render_draws_rgb_frames_of_one_copy_without_a_display(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    env = balance(num_envs=2, transforms=[ObservationNorm()]).make_vector(seed=0)
    try:
        env.reset()
        first = env.render(0)
        assert first.dtype.name == "uint8"
        assert first.ndim == 3 and first.shape[2] == 3 and first.shape[0] >= 100
        assert len({tuple(pixel) for pixel in first.reshape(-1, 3)[::97]}) > 2  # not a blank canvas
        generator = torch.Generator().manual_seed(0)
        for _ in range(3):
            env.step(random_actions(env.spec, env.current, generator))
        assert env.render(0).shape == first.shape and (env.render(0) != first).any()  # the robots moved
        with pytest.raises(IndexError, match="env copy 2 out of range for 2 copies"):
            env.render(2)
    finally:
        env.close()


def test_evaluation_video_records_whole_vmas_episodes(monkeypatch, tmp_path):
    from lightning.pytorch import Trainer

    from lightmarl.evaluation.video import record_episodes
    from lightmarl.training import MARLModule

    monkeypatch.delenv("DISPLAY", raising=False)
    config = balance(num_envs=1, transforms=[ObservationNorm()])
    spec = config.spec()
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    population = MultiAgentPolicy({"main": MLPActorCritic(spec.groups["agent"])}, table)
    episodes, fps = record_episodes(population, config, num_episodes=2, seed=0, max_side=None)
    # max_steps=5: the start state and the state after each step, the final one kept before the auto-reset.
    assert [len(e) for e in episodes] == [6, 6] and fps == 10.0
    assert episodes[0][0].shape[2] == 3 and episodes[0][0].dtype.name == "uint8"
    assert not (episodes[0][-1] == episodes[1][0]).all(), "an episode ends on its final state, not the reset one"
    again, _ = record_episodes(population, config, num_episodes=1, seed=0, max_side=None)
    assert (again[0][0] == episodes[0][0]).all()  # the seed reproduces the start
    # The same from a recipe: `lightmarl validate` with evaluation.validation.video_episodes writes a GIF.
    module = MARLModule(
        env=balance(num_envs=2),
        policy_bindings=[{"id": "main", "class_path": "lightmarl.policies.MLPActorCritic"}],
        evaluation=EvaluationConfig(validation=ValidationConfig(episodes=2, video_episodes=1)),
    )
    Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path).validate(
        module
    )
    assert [v.name for v in (tmp_path / "videos").glob("*.gif")] == ["eval_iter0.gif"]


def test_render_failures_name_the_env(monkeypatch):
    env = balance(num_envs=1).make_vector(seed=0)
    assert isinstance(env, VmasVecEnv)
    env.reset()

    def no_opengl(*args, **kwargs):
        raise ImportError("Library 'GL' not found")

    monkeypatch.setattr(env._env, "render", no_opengl)
    with pytest.raises(RuntimeError, match=r"env 'balance': VMAS cannot render RGB frames here \(ImportError: Library"):
        env.render(0)


def test_info_fields_come_from_the_scenarios_info_per_agent_and_copy():
    config = VmasEnvConfig(
        scenario="navigation", scenario_kwargs={"n_agents": 2}, num_envs=3, max_steps=4, info_fields=["pos_rew", "nope"]
    )
    vector = config.make_vector(seed=0)
    vector.reset()
    nxt, _ = vector.step(random_actions(vector.spec, vector.current, torch.Generator().manual_seed(0)))
    shaping, missing = nxt["agent"]["info/pos_rew"], nxt["agent"]["info/nope"]
    assert shaping.shape == missing.shape == (3, 2)
    assert torch.isfinite(shaping).all() and shaping.abs().sum() > 0  # navigation reports its shaping every step
    assert missing.isnan().all()  # a field the scenario does not report


def test_info_fields_pass_the_specs_check_and_reach_the_spec():
    # base_spec (the path of a recipe's fit) checks the scenario's own layout, then adds the info fields.
    config = VmasEnvConfig(scenario="navigation", scenario_kwargs={"n_agents": 2}, num_envs=2, info_fields=["pos_rew"])
    assert config.base_spec().info_fields == ("pos_rew",)
    vector = config.make_vector(seed=0)
    vector.reset()
    nxt, _ = vector.step(random_actions(vector.spec, vector.current, torch.Generator().manual_seed(0)))
    assert nxt["agent"]["info/pos_rew"].shape == (2, 2)


@pytest.mark.parametrize(
    ("scenario", "kwargs"),
    [("navigation", {"n_agents": 3}), ("balance", {"n_agents": 3}), ("transport", {"n_agents": 4})],
)
def test_resetting_ended_copies_in_one_call_leaves_the_others_as_reset_at_would(scenario, kwargs):
    """reset_copies against VMAS's own reset_at loop: the copies that did not end continue exactly
    alike (same observations and rewards under the same actions); the ended ones start afresh."""
    import vmas

    from lightmarl.envs.vmas import reset_copies

    num_envs = 12

    def make():
        env = vmas.make_env(scenario, num_envs=num_envs, device="cpu", continuous_actions=False, max_steps=100,
                            seed=0, terminated_truncated=True, **kwargs)  # fmt: skip
        env.reset(seed=0)
        return env

    batched, looped = make(), make()
    generator = torch.Generator().manual_seed(1)
    actions = [[torch.randint(9, (num_envs, 1), generator=generator) for _ in batched.agents] for _ in range(16)]
    for step in actions[:6]:
        batched.step(step)
        looped.step(step)
    ended = torch.zeros(num_envs, dtype=torch.bool)
    ended[::3] = True
    before = [agent.state.pos.clone() for agent in batched.agents]
    assert reset_copies(batched, ended) == int(ended.sum())
    for index in ended.nonzero().flatten().tolist():
        looped.reset_at(index, return_observations=False)
    assert torch.equal(batched.steps, looped.steps) and not batched.steps[ended].any()
    moved = torch.stack([(agent.state.pos != old).any(-1) for agent, old in zip(batched.agents, before)]).any(0)
    assert moved[ended].all() and not moved[~ended].any()  # only the ended copies were put elsewhere
    for step in actions[6:]:
        observations, rewards, *_ = batched.step(step)
        expected_observations, expected_rewards, *_ = looped.step(step)
        for got, expected in zip([*observations, *rewards], [*expected_observations, *expected_rewards]):
            assert torch.equal(got[~ended], expected[~ended])


@pytest.mark.parametrize("batched", [True, False])
def test_batched_reset_can_be_turned_off_for_scenarios_with_state_outside_tensors(monkeypatch, batched):
    from lightmarl.envs import vmas as lightmarl_vmas

    calls = {"reset_copies": 0, "reset_at": 0}
    original = lightmarl_vmas.reset_copies

    def counted(env, ended):
        calls["reset_copies"] += 1
        return original(env, ended)

    monkeypatch.setattr(lightmarl_vmas, "reset_copies", counted)
    env = balance(num_envs=3, max_steps=2, batched_reset=batched).make_vector(seed=0)
    reset_at = env._env.reset_at

    def counted_reset_at(*args, **kwargs):
        calls["reset_at"] += 1
        return reset_at(*args, **kwargs)

    monkeypatch.setattr(env._env, "reset_at", counted_reset_at)
    try:
        env.reset()
        generator = torch.Generator().manual_seed(0)
        for _ in range(2):  # every copy is truncated at the second step
            _, ended = env.step(random_actions(env.spec, env.current, generator))
        assert ended.all()
        assert calls == ({"reset_copies": 2, "reset_at": 0} if batched else {"reset_copies": 0, "reset_at": 3})
    finally:
        env.close()
    with pytest.raises(TypeError, match=r"env.batched_reset: expected true or false, got 'yes'"):
        balance(batched_reset="yes")
