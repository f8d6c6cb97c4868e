"""Observation / reward normalization and frame stacking on every kind of vector, and their statistics as state."""

from __future__ import annotations

import io

import pytest
import torch

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.checks import check_same_trajectories, check_vec_env, random_actions
from lightmarl.envs.spec import EnvSpec, GroupSpec
from lightmarl.envs.transforms import (
    FrameStack,
    ObservationNorm,
    RewardNorm,
    RunningMeanStd,
    TransformedVecEnv,
    load_transforms_state_dict,
    transforms_state_dict,
)
from lightmarl.evaluation.scenarios import EvaluationConfig, ValidationConfig
from lightmarl.policies import MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population.bindings import BindingTable, PolicyBinding

pytestmark = pytest.mark.timeout(120)

SPREAD = "mpe2.simple_spread_v3.parallel_env"
MATCH = "lightmarl.envs.testing.match.parallel_env"


class ScriptedVec:
    """A two-agent VecEnv whose observations, rewards, presence and episode ends follow a script.

    At time ``t`` agent ``a`` of copy ``e`` observes ``source(t)[e, a]`` (``[num_envs, agents, *shape]``);
    ``valid[t]`` says who is present. An agent present at ``t`` and absent at ``t + 1`` is done;
    copies in ``ends[t]`` end their episode at step ``t`` (every acting agent done) and restart with
    ``source(t + 1) + 0.5``. Rows of absent agents keep whatever ``source`` gives (unlike real
    vectors, which zero them): the transforms must not rely on it.
    """

    def __init__(self, source, valid, ends=None, rewards=None, shape=(3,)):
        self.source, self.valid = source, valid
        self.ends = ends or {}
        self.rewards = rewards
        self.num_envs, agents = valid[0].shape
        group = GroupSpec(
            "agent", tuple(f"agent_{i}" for i in range(agents)), tuple(range(agents)), shape, "discrete", 2
        )
        self.spec = EnvSpec("scripted", group.agents, {"agent": group})
        self.seeds = list(range(self.num_envs))
        self.t = 0
        self.current = {}

    def _current(self, t, restarted):
        observation = self.source(t)
        observation = observation + 0.5 * restarted.view(-1, *[1] * (observation.dim() - 1))
        return {"agent": {"observation": observation, "valid": self.valid[t]}}

    def reset(self):
        self.t = 0
        self.current = self._current(0, torch.zeros(self.num_envs, dtype=torch.bool))
        return self.current

    def step(self, actions):
        t = self.t
        acted, present = self.valid[t], self.valid[t + 1]
        ended = torch.zeros(self.num_envs, dtype=torch.bool)
        ended[list(self.ends.get(t, []))] = True
        done = acted & (~present | ended.view(-1, 1))
        reward = (self.rewards(t) if self.rewards else torch.ones_like(acted, dtype=torch.float32)) * acted
        nxt = {
            "agent": {
                "observation": self.source(t + 1),
                "reward": reward,
                "terminated": done,
                "truncated": torch.zeros_like(done),
                "done": done,
            }
        }
        self.t += 1
        self.current = self._current(self.t, ended)
        return nxt, ended

    def observation_td(self):
        raise NotImplementedError

    def render(self, index=0):
        return None

    def close(self):
        pass


def counting_source(t):
    """Observation of copy e, agent a at time t: every entry is 100 t + 10 e + a."""
    e = torch.arange(2).view(2, 1, 1)
    a = torch.arange(2).view(1, 2, 1)
    return (100.0 * t + 10 * e + a).expand(2, 2, 3).clone()


def all_valid(steps):
    return [torch.ones(2, 2, dtype=torch.bool) for _ in range(steps + 1)]


# -- ObservationNorm ------------------------------------------------------------------------


def test_running_mean_std_equals_the_statistics_of_everything_seen():
    stats = RunningMeanStd((3,))
    data = torch.randn(500, 3, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + torch.tensor([2.0, -3.0, 7.0])
    for chunk in data.split([1, 99, 0, 250, 150]):
        stats.update(chunk)
    assert stats.count == 500
    torch.testing.assert_close(stats.mean, data.mean(0))
    torch.testing.assert_close(stats.var, data.var(0, unbiased=False))


def test_observation_statistics_converge_to_the_data_and_normalize_it():
    generator = torch.Generator().manual_seed(0)
    mean, std = torch.tensor([5.0, -2.0, 0.0]), torch.tensor([3.0, 0.5, 10.0])
    samples = [mean + std * torch.randn(2, 2, 3, generator=generator) for _ in range(401)]
    norm = ObservationNorm(clip=None)
    vec = TransformedVecEnv(ScriptedVec(lambda t: samples[t], all_valid(400)), [norm])
    vec.reset()
    seen = []
    for _ in range(400):
        vec.step({})
        seen.append(vec.current["agent"]["observation"])
    stats = norm.statistics["agent"]
    assert stats.count == 401 * 4
    torch.testing.assert_close(stats.mean.float(), mean, atol=0.15 * 3, rtol=0)
    torch.testing.assert_close(stats.var.sqrt().float(), std, rtol=0.08, atol=0)
    late = torch.stack(seen[200:]).reshape(-1, 3)
    torch.testing.assert_close(late.mean(0), torch.zeros(3), atol=0.1, rtol=0)
    torch.testing.assert_close(late.std(0), torch.ones(3), atol=0.1, rtol=0)


def test_only_present_agents_update_the_statistics_and_absent_ones_stay_zero():
    valid = all_valid(6)
    for t in range(2, 5):
        valid[t] = torch.tensor([[True, False], [True, True]])  # agent_1 of copy 0 is away for three steps

    def source(t):
        x = counting_source(t)
        x[~valid[t]] = 1e6  # what an env might leave in an absent agent's row
        return x

    norm = ObservationNorm(clip=None)
    vec = TransformedVecEnv(ScriptedVec(source, valid), [norm])
    vec.reset()
    for t in range(6):
        nxt, _ = vec.step({})
        away = ~vec.current["agent"]["valid"]
        assert vec.current["agent"]["observation"][away].eq(0).all()
        assert nxt["agent"]["observation"][~valid[t]].eq(0).all()  # rows that did not act
    present = torch.cat([counting_source(t)[valid[t]] for t in range(7)]).double()
    stats = norm.statistics["agent"]
    assert stats.count == len(present) == 7 * 4 - 3
    torch.testing.assert_close(stats.mean, present.mean(0))
    torch.testing.assert_close(stats.var, present.var(0, unbiased=False))


def test_evaluation_vectors_read_the_statistics_frozen(spread_config):
    spread_config.transforms = [ObservationNorm(), RewardNorm()]
    spec = spread_config.spec()
    train = spread_config.make_vector(seed=0)
    check_vec_env(train, num_steps=12)
    norm, reward_norm = spread_config.transforms
    before = [t.state_dict() for t in spread_config.transforms]
    assert norm.statistics["agent"].count == 4 * 3 * 13 and reward_norm.statistics["agent"].count == 4 * 3 * 12

    evaluation = spread_config.make_vector(seed=5, evaluation=True)
    raw = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs=spread_config.env_kwargs, num_envs=4).make_vector(seed=5)
    assert evaluation.spec == spec
    current, raw_current = evaluation.reset(), raw.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(8):
        expected = norm.normalize("agent", raw_current["agent"]["observation"], raw_current["agent"]["valid"])
        torch.testing.assert_close(current["agent"]["observation"], expected)
        actions = random_actions(spec, current, generator)
        (nxt, _), (raw_nxt, _) = evaluation.step(actions), raw.step(actions)
        torch.testing.assert_close(nxt["agent"]["reward"], raw_nxt["agent"]["reward"])  # the env's own rewards
        current, raw_current = evaluation.current, raw.current
    after = [t.state_dict() for t in spread_config.transforms]
    for b, a in zip(before, after):
        for group in b["statistics"]:
            assert b["statistics"][group]["count"] == a["statistics"][group]["count"]
            assert torch.equal(b["statistics"][group]["mean"], a["statistics"][group]["mean"])
    train.close(), evaluation.close(), raw.close()


# -- RewardNorm -----------------------------------------------------------------------------


def test_rewards_are_scaled_by_the_std_of_discounted_returns():
    generator = torch.Generator().manual_seed(1)
    rewards = [torch.rand(2, 2, generator=generator) * 4 for _ in range(30)]
    valid = all_valid(30)
    valid[10] = torch.tensor([[True, True], [False, True]])  # copy 1 agent_0 leaves (done at step 9) ...
    ends = {19: [0]}  # ... and copy 0 ends its episode at step 19
    scaling = RewardNorm(gamma=0.9, clip=None)
    vec = TransformedVecEnv(ScriptedVec(counting_source, valid, ends=ends, rewards=lambda t: rewards[t]), [scaling])
    vec.reset()
    returns = torch.zeros(2, 2, dtype=torch.float64)
    history = []
    for t in range(30):
        nxt, _ = vec.step({})
        acted = valid[t]
        returns = 0.9 * returns + rewards[t].double() * acted
        history.append(returns[acted])
        expected_var = torch.cat(history).var(unbiased=False)
        torch.testing.assert_close(scaling.statistics["agent"].var, expected_var)
        torch.testing.assert_close(nxt["agent"]["reward"], rewards[t] * acted / float((expected_var + 1e-8).sqrt()))
        returns[nxt["agent"]["done"]] = 0.0
    assert nxt["agent"]["reward"].abs().max() < rewards[29].abs().max()  # returns spread wider than one reward


def test_reward_clipping_keeps_zero_rewards_zero():
    rewards = torch.tensor([[0.0, 1e4], [-1e4, 0.0]])
    vec = TransformedVecEnv(
        ScriptedVec(counting_source, all_valid(5), rewards=lambda t: rewards), [RewardNorm(clip=0.1)]
    )
    vec.reset()
    for _ in range(5):
        nxt, _ = vec.step({})
    assert torch.equal(nxt["agent"]["reward"], torch.tensor([[0.0, 0.1], [-0.1, 0.0]]))


def test_training_episode_returns_are_the_envs_own_under_reward_normalization(spread_config):
    """The collector learns from scaled rewards but reports episode returns in the env's units."""
    spec = spread_config.spec()
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)

    def collector(transforms):
        spread_config.transforms = transforms
        policy = MultiAgentPolicy({"main": UniformRandomPolicy(spec.groups["agent"], seed=3)}, table)
        return RolloutCollector(spread_config.make_vector(seed=0), policy, rollout_steps=10)

    plain, scaled = collector([]), collector([RewardNorm(gamma=0.9)])
    plain_rows, scaled_rows = plain.collect(), scaled.collect()
    torch.testing.assert_close(plain_rows["agent", "action"], scaled_rows["agent", "action"])  # same trajectories
    reward = ("next", "agent", "reward")
    assert not torch.allclose(plain_rows[reward], scaled_rows[reward])  # the learner sees scaled rewards ...
    assert scaled.stats["main"].finished == plain.stats["main"].finished == 2 * spread_config.num_envs
    torch.testing.assert_close(list(scaled.stats["main"].returns), list(plain.stats["main"].returns))  # ... logs raw
    plain.close(), scaled.close()


# -- FrameStack -----------------------------------------------------------------------------


def frames_of(stacked, k=3, size=3):
    """Per row the first entry of each frame of a stacked ``[2, 2, k * size]`` observation."""
    return stacked.view(2, 2, k, size)[..., 0]


def test_frame_stack_widens_the_spec_and_keeps_the_last_frames_oldest_first():
    vec = TransformedVecEnv(ScriptedVec(counting_source, all_valid(5)), [FrameStack(num_frames=3)])
    assert vec.spec.groups["agent"].observation_shape == (9,)
    current = vec.reset()
    assert frames_of(current["agent"]["observation"])[1, 0].tolist() == [10.0, 10.0, 10.0]  # padded with the first
    nxt, _ = vec.step({})
    assert frames_of(nxt["agent"]["observation"])[1, 0].tolist() == [10.0, 10.0, 110.0]
    vec.step({})
    nxt, _ = vec.step({})
    assert frames_of(nxt["agent"]["observation"])[1, 1].tolist() == [111.0, 211.0, 311.0]
    assert torch.equal(vec.current["agent"]["observation"], nxt["agent"]["observation"])


def test_frame_stack_restarts_at_episode_ends():
    vec = TransformedVecEnv(ScriptedVec(counting_source, all_valid(5), ends={1: [0]}), [FrameStack(3)])
    vec.reset()
    vec.step({})
    nxt, ended = vec.step({})
    assert ended.tolist() == [True, False]
    assert frames_of(nxt["agent"]["observation"])[0, 0].tolist() == [0.0, 100.0, 200.0]  # the final observation
    assert frames_of(vec.current["agent"]["observation"])[0, 0].tolist() == [200.5] * 3  # a fresh stack
    assert frames_of(vec.current["agent"]["observation"])[1, 0].tolist() == [10.0, 110.0, 210.0]  # goes on


def test_frame_stack_forgets_agents_that_leave_and_restarts_those_that_return():
    valid = all_valid(5)
    valid[2] = valid[3] = torch.tensor([[True, False], [True, True]])  # copy 0 agent_1 away at t = 2, 3
    vec = TransformedVecEnv(ScriptedVec(counting_source, valid), [FrameStack(3, padding="zeros")])
    current = vec.reset()
    assert frames_of(current["agent"]["observation"])[0, 1].tolist() == [0.0, 0.0, 1.0]  # zero padding
    vec.step({})
    nxt, _ = vec.step({})  # agent_1 leaves: its last stack is reported, then it is forgotten
    assert frames_of(nxt["agent"]["observation"])[0, 1].tolist() == [1.0, 101.0, 201.0]
    assert vec.current["agent"]["observation"][0, 1].eq(0).all()
    nxt, _ = vec.step({})
    assert nxt["agent"]["observation"][0, 1].eq(0).all()  # absent: did not act
    vec.step({})  # back at t = 4 with a fresh stack
    assert frames_of(vec.current["agent"]["observation"])[0, 1].tolist() == [0.0, 0.0, 401.0]
    assert frames_of(vec.current["agent"]["observation"])[0, 0].tolist() == [200.0, 300.0, 400.0]


def test_frame_stack_of_images_concatenates_channels():
    def images(t):
        return counting_source(t)[..., :1, None, None].expand(2, 2, 4, 4, 2).clone()  # [E, A, H, W, C]

    vec = TransformedVecEnv(ScriptedVec(images, all_valid(3), shape=(4, 4, 2)), [FrameStack(2)])
    assert vec.spec.groups["agent"].observation_shape == (4, 4, 4)
    vec.reset()
    nxt, _ = vec.step({})
    pixel = nxt["agent"]["observation"][1, 1, 0, 0]
    assert pixel.tolist() == [11.0, 11.0, 111.0, 111.0]  # frame 0's channels, then frame 1's


def test_transforms_on_a_real_env_keep_the_vector_contract_with_leaving_agents_and_masks():
    config = PettingZooEnvConfig(
        env_fn=MATCH,
        env_kwargs={"num_agents": 3, "nvec": [3, 4], "leave_probability": 0.2, "max_cycles": 6},
        num_envs=3,
        transforms=[ObservationNorm(), RewardNorm(), FrameStack(num_frames=2)],
    )
    assert config.spec().groups["agent"].observation_shape == (14,)
    report = check_vec_env(config.make_vector(seed=0), num_steps=30)
    assert report.agent_exits > 0 and report.episode_ends > 0 and report.masked_rows > 0


def test_worker_processes_and_in_process_vectors_transform_alike():
    def config(num_workers):
        return PettingZooEnvConfig(
            env_fn=SPREAD,
            env_kwargs={"N": 3, "max_cycles": 5},
            num_envs=3,
            num_workers=num_workers,
            transforms=[ObservationNorm(), RewardNorm(), FrameStack(num_frames=3)],
        )

    check_same_trajectories(config(0).make_vector(seed=2), config(2).make_vector(seed=2), num_steps=12)


# -- configuration and checkpoints ----------------------------------------------------------


def test_bad_transform_settings_name_the_field():
    with pytest.raises(ValueError, match=r"env.transforms\[FrameStack\].num_frames"):
        FrameStack(num_frames=0)
    with pytest.raises(ValueError, match=r"env.transforms\[RewardNorm\].gamma"):
        RewardNorm(gamma=1.5)
    with pytest.raises(
        ValueError, match=r"env.transforms\[ObservationNorm\].groups: env 'simple_spread_v3' has no group \['pilot'\]"
    ):
        PettingZooEnvConfig(env_fn=SPREAD, transforms=[ObservationNorm(groups=["pilot"])]).spec()
    with pytest.raises(ValueError, match=r"env.transforms\[FrameStack\].dim: 1 is out of range"):
        PettingZooEnvConfig(env_fn=SPREAD, transforms=[FrameStack(dim=1)]).spec()
    with pytest.raises(ValueError, match=r"env.transforms\[0\]: expected a lightmarl.envs.transforms.VecTransform"):
        PettingZooEnvConfig(env_fn=SPREAD, transforms=[{"num_frames": 2}])  # type: ignore[list-item]


def test_groups_limit_a_transform_to_some_groups():
    config = PettingZooEnvConfig(
        env_fn="mpe2.simple_tag_v3.parallel_env",
        env_kwargs={"max_cycles": 5},
        num_envs=2,
        transforms=[FrameStack(2, groups=["agent"]), ObservationNorm(groups=["adversary"])],
    )
    spec = config.spec()
    assert spec.groups["agent"].observation_shape == (28,) and spec.groups["adversary"].observation_shape == (16,)
    assert list(config.transforms[1].statistics) == ["adversary"]
    check_vec_env(config.make_vector(seed=0), num_steps=6)


def test_statistics_round_trip_through_a_checkpoint_file(spread_config):
    spread_config.transforms = [ObservationNorm(), FrameStack(2), RewardNorm()]
    check_vec_env(spread_config.make_vector(seed=0), num_steps=8)
    buffer = io.BytesIO()
    torch.save({"env_transforms": transforms_state_dict(spread_config.transforms)}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)["env_transforms"]
    fresh = [ObservationNorm(), FrameStack(2), RewardNorm()]
    load_transforms_state_dict(fresh, saved)
    for old, new in zip(spread_config.transforms, fresh):
        for group, stats in getattr(old, "statistics", {}).items():
            assert new.statistics[group].count == stats.count > 0
            assert torch.equal(new.statistics[group].mean, stats.mean)
            assert torch.equal(new.statistics[group].var, stats.var)
    with pytest.raises(ValueError, match=r"trained with transforms \['ObservationNorm', 'FrameStack', 'RewardNorm'\]"):
        load_transforms_state_dict([ObservationNorm()], saved)


def test_the_module_checkpoints_the_statistics_and_evaluates_with_them():
    from lightmarl.evaluation.episodes import evaluate_episodes
    from lightmarl.training import MARLModule

    def module():
        env = PettingZooEnvConfig(
            env_fn=SPREAD,
            env_kwargs={"N": 3, "max_cycles": 10},
            num_envs=4,
            transforms=[ObservationNorm(), FrameStack(2)],
        )
        return MARLModule(env=env, evaluation=EvaluationConfig(validation=ValidationConfig(episodes=4)))

    trained = module()
    assert trained.env_spec.groups["agent"].observation_shape == (36,)  # policies see the stacked frames
    check_vec_env(trained.env_config.make_vector(seed=0), num_steps=20)  # as training would: statistics move
    checkpoint: dict = {}
    trained.on_save_checkpoint(checkpoint)
    checkpoint["state_dict"] = trained.state_dict()

    def score(m):
        return evaluate_episodes(m.population, m.env_config, num_episodes=4, seed=3)["main"]["episode_return"]

    restored, unrestored = module(), module()
    for m in (restored, unrestored):
        m.load_state_dict(checkpoint["state_dict"])
    restored.on_load_checkpoint(checkpoint)
    stats = restored.env_config.transforms[0].statistics["agent"]
    assert stats.count == trained.env_config.transforms[0].statistics["agent"].count > 0
    assert score(restored) == score(trained)
    assert score(unrestored) != score(trained)  # the same weights on unnormalized observations
    assert stats.count == trained.env_config.transforms[0].statistics["agent"].count  # evaluation froze them
