from __future__ import annotations

import numpy as np
import pytest
import torch

from lightmarl.envs import PettingZooEnvConfig


def test_spec_groups_agents_by_name_prefix(spread_config):
    spec = spread_config.spec()
    assert list(spec.groups) == ["agent"]
    group = spec.groups["agent"]
    assert group.agents == ("agent_0", "agent_1", "agent_2")
    assert group.observation_shape == (18,)
    assert group.action_kind == "discrete" and group.num_actions == 5


def test_groups_follow_spaces_in_a_mixed_env():
    spec = PettingZooEnvConfig(env_fn="mpe2.simple_tag_v3.parallel_env", env_kwargs={"max_cycles": 5}).spec()
    assert set(spec.groups) == {"adversary", "agent"}
    assert spec.groups["adversary"].num_agents == 3 and spec.groups["agent"].num_agents == 1
    assert spec.groups["adversary"].observation_shape != spec.groups["agent"].observation_shape


def test_step_shapes_rewards_and_auto_reset(spread_config):
    env = spread_config.make_vector(seed=0)
    first = env.reset()
    assert first["agent"]["observation"].shape == (4, 3, 18)
    assert first["agent"]["valid"].all()
    actions = {"agent": torch.zeros(4, 3, dtype=torch.int64)}
    for step in range(5):
        nxt, ended = env.step(actions)
        assert nxt["agent"]["reward"].shape == (4, 3)
        assert torch.isfinite(nxt["agent"]["reward"]).all()
        if step < 4:
            assert not ended.any() and not nxt["agent"]["done"].any()
    # max_cycles=5: every copy truncates on the 5th step and is reset in place.
    assert ended.all()
    assert nxt["agent"]["truncated"].all() and not nxt["agent"]["terminated"].any()
    # The step reports the final observation; `current` holds the fresh episode's.
    assert not torch.equal(nxt["agent"]["observation"], env.current["agent"]["observation"])
    assert env.current["agent"]["valid"].all()
    env.close()


def test_seeds_reproduce_trajectories(spread_config):
    def rollout(seed):
        env = spread_config.make_vector(seed=seed)
        obs = [env.reset()["agent"]["observation"].clone()]
        gen = torch.Generator().manual_seed(1)
        for _ in range(7):
            env.step({"agent": torch.randint(0, 5, (4, 3), generator=gen)})
            obs.append(env.current["agent"]["observation"].clone())
        env.close()
        return torch.stack(obs)

    a, b, c = rollout(3), rollout(3), rollout(4)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # Copies get different seeds (seed + i): their first observations differ.
    assert not torch.equal(a[0, 0], a[0, 1])


def test_bad_import_path_names_the_field():
    with pytest.raises(ValueError, match=r"env.env_fn.*nosuchpackage"):
        PettingZooEnvConfig(env_fn="nosuchpackage.env").spec()
    with pytest.raises(ValueError, match=r"env.env_fn.*has no attribute 'nope'"):
        PettingZooEnvConfig(env_fn="mpe2.simple_spread_v3.nope").spec()


def test_constructor_errors_name_the_env():
    with pytest.raises(ValueError, match=r"simple_spread_v3.parallel_env.*raised TypeError"):
        PettingZooEnvConfig(env_kwargs={"not_a_kwarg": 1}).spec()


def test_aec_env_is_stepped_one_turn_at_a_time():
    # AEC envs are accepted (docs/turn_based.md): only the acting agent's row is valid.
    config = PettingZooEnvConfig(env_fn="mpe2.simple_spread_v3.env", num_envs=2)
    assert config.spec().groups == PettingZooEnvConfig().spec().groups
    vec = config.make_vector(seed=0)
    assert vec.reset()["agent"]["valid"].sum(-1).tolist() == [1, 1]
    vec.close()


def test_num_envs_must_be_positive():
    with pytest.raises(ValueError, match="num_envs"):
        PettingZooEnvConfig(num_envs=0)


class _Liar:
    """A parallel env that reports an observation for an agent it never declared."""

    possible_agents = ["agent_0"]
    agents = ["agent_0"]

    def observation_space(self, agent):
        from gymnasium.spaces import Box

        return Box(-1, 1, (2,), np.float32)

    def action_space(self, agent):
        from gymnasium.spaces import Discrete

        return Discrete(2)

    def reset(self, seed=None, options=None):
        return {"agent_0": np.zeros(2, np.float32)}, {}

    def step(self, actions):
        return {"stranger": np.zeros(2, np.float32)}, {"agent_0": 0.0}, {"agent_0": False}, {"agent_0": False}, {}

    def close(self):
        pass


def test_observation_for_unknown_agent_names_env_copy_and_seed():
    env = PettingZooEnvConfig(env_fn=f"{__name__}._Liar", num_envs=2).make_vector(seed=7)
    env.reset()
    with pytest.raises(RuntimeError, match=r"copy 0, seed 7.*unknown agent 'stranger'"):
        env.step({"agent": torch.zeros(2, 1, dtype=torch.int64)})


def test_one_hot_parallel_env_takes_a_callable_or_an_import_path():
    from pettingzoo.classic import rps_v2

    from lightmarl.envs.pettingzoo.one_hot import one_hot_parallel_env

    for env_fn in (rps_v2.parallel_env, "pettingzoo.classic.rps_v2.parallel_env"):
        env = one_hot_parallel_env(env_fn, max_cycles=1)
        observations, _ = env.reset(seed=0)
        assert observations["player_0"].tolist() == [0.0, 0.0, 0.0, 1.0]  # "no move yet", one-hot
    with pytest.raises(ValueError, match=r"env_kwargs\.env_fn"):
        one_hot_parallel_env("pettingzoo.classic.no_such_env")
