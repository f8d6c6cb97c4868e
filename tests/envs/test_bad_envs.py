"""Bad envs and populations fail before training, with an error that names the env (or binding) and the problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.errors import EnvContractError
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl.training.module import MARLModule

HERE = __name__  # the import path of this module, for env_fn


class ToyEnv:
    """A PettingZoo-style parallel env whose spaces and misbehaviour are chosen per test.

    Args:
        observation_spaces: agent -> observation space (``possible_agents`` in this order).
        action_spaces: agent -> action space (default ``Discrete(2)``).
        reset_extra: an agent name ``reset`` also reports an observation for.
        step_extra: an agent name ``step`` also reports an observation for.
        observation_shape: shape of the observations it actually returns (default: the declared one).
        old_reset_api: ``reset`` returns only the observations (PettingZoo < 1.22).
        step_raises: ``step`` raises this message.
    """

    def __init__(
        self,
        observation_spaces=None,
        action_spaces=None,
        reset_extra=None,
        step_extra=None,
        observation_shape=None,
        old_reset_api=False,
        step_raises=None,
    ):
        self._obs_spaces = observation_spaces or {"agent_0": spaces.Box(-1, 1, (2,), np.float32)}
        self._act_spaces = action_spaces or {}
        self.possible_agents = list(self._obs_spaces)
        self.agents = []
        self.reset_extra, self.step_extra = reset_extra, step_extra
        self.observation_shape, self.old_reset_api, self.step_raises = observation_shape, old_reset_api, step_raises

    def observation_space(self, agent):
        return self._obs_spaces[agent]

    def action_space(self, agent):
        return self._act_spaces.get(agent, spaces.Discrete(2))

    def _observe(self, extra):
        shape = self.observation_shape or self._obs_spaces[self.possible_agents[0]].shape
        names = [*self.agents, *([extra] if extra else [])]
        return {a: np.zeros(shape, np.float32) for a in names}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        observations = self._observe(self.reset_extra)
        return observations if self.old_reset_api else (observations, {})

    def step(self, actions):
        if self.step_raises:
            raise RuntimeError(self.step_raises)
        falses = dict.fromkeys(self.agents, False)
        return self._observe(self.step_extra), dict.fromkeys(self.agents, 0.0), falses, dict(falses), {}

    def close(self):
        pass


def box(*shape):
    return spaces.Box(-1, 1, shape, np.float32)


def toy(**kwargs) -> PettingZooEnvConfig:
    return PettingZooEnvConfig(env_fn=f"{HERE}.ToyEnv", env_kwargs=kwargs, num_envs=2)


# -- the env cannot be built -------------------------------------------------------------------


def test_import_paths_that_do_not_resolve_name_the_field_and_path(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"env\.env_fn: cannot import 'nosuchpackage\.envs\.make'"):
        PettingZooEnvConfig(env_fn="nosuchpackage.envs.make").spec()
    with pytest.raises(ValueError, match=r"env\.env_fn: module 'mpe2\.simple_spread_v3' has no attribute 'nope'"):
        PettingZooEnvConfig(env_fn="mpe2.simple_spread_v3.nope").spec()
    # A module that exists but fails on a dependency of its own: that dependency is named.
    (tmp_path / "broken_env_module.py").write_text("import not_installed_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"importing 'broken_env_module'.*not_installed_dependency"):
        PettingZooEnvConfig(env_fn="broken_env_module.parallel_env").spec()


def raising_constructor(**kwargs):
    raise RuntimeError("no display found")


def test_a_constructor_that_raises_is_reported_with_its_kwargs():
    config = PettingZooEnvConfig(env_fn=f"{HERE}.raising_constructor", env_kwargs={"size": 3})
    with pytest.raises(ValueError, match=r"raising_constructor\(\*\*\{'size': 3\}\) raised RuntimeError: no display"):
        config.spec()


def not_an_env(**kwargs):
    return object()


def test_constructors_that_return_no_pettingzoo_env_are_rejected():
    with pytest.raises(ValueError, match=r"did not return a PettingZoo env \(got object\)"):
        PettingZooEnvConfig(env_fn=f"{HERE}.not_an_env").spec()


# -- the env breaks the PettingZoo API: caught at spec time, before training ------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"reset_extra": "stranger"}, r"reset\(\) observations names unknown agent 'stranger'"),
        ({"step_extra": "stranger"}, r"step\(\) observations names unknown agent 'stranger'"),
        ({"observation_shape": (3,)}, r"reset\(\) observation of agent 'agent_0' has shape \(3,\).*says \(2,\)"),
        ({"old_reset_api": True}, r"reset\(\) must return \(observations, infos\)"),
        ({"step_raises": "boom"}, r"step\(\) raised RuntimeError: boom"),
    ],
    ids=["unknown agent at reset", "unknown agent at step", "wrong shape", "old reset API", "step raises"],
)
def test_api_violations_fail_at_spec_time_naming_the_env(kwargs, message):
    with pytest.raises(EnvContractError, match=r"env 'test_bad_envs' \(API check with seed 0\): " + message):
        toy(**kwargs).spec()


def test_the_check_runs_before_training_when_a_recipe_is_built():
    with pytest.raises(EnvContractError, match=r"unknown agent 'stranger'"):
        MARLModule(env=toy(step_extra="stranger"))


def test_api_violations_while_stepping_name_the_env_copy_and_seed():
    # Vectors built directly skip the spec-time check: the step that breaks the API names the copy.
    env = toy(step_extra="stranger").make_vector(seed=7)
    env.reset()
    with pytest.raises(RuntimeError, match=r"env 'test_bad_envs' \(copy 0, seed 7\).*unknown agent 'stranger'"):
        env.step({"agent": torch.zeros(2, 1, dtype=torch.int64)})
    env = toy(observation_shape=(3,)).make_vector(seed=2)
    with pytest.raises(RuntimeError, match=r"copy 0, seed 2\).*agent 'agent_0' that does not fit.*\(2,\)"):
        env.reset()


# -- spaces lightmarl cannot batch ------------------------------------------------------------


@pytest.mark.parametrize(
    "observation_space, action_space, message",
    [
        (spaces.Tuple([box(2), box(2)]), spaces.Discrete(2), r"unsupported observation space Tuple"),
        (spaces.Dict({"image": box(2)}), spaces.Discrete(2), r"Dict observation spaces need an 'observation' entry"),
        (box(2), spaces.Text(5), r"unsupported action space Text.*expected Discrete, MultiDiscrete or Box"),
        (box(2), spaces.Discrete(3, start=1), r"Discrete actions must start at 0"),
        (box(2), spaces.MultiDiscrete([[2, 2], [3, 3]]), r"MultiDiscrete actions must be one-dimensional"),
        (
            spaces.Dict({"observation": box(2), "action_mask": spaces.Box(0, 1, (4,), np.int8)}),
            spaces.Discrete(3),
            r"'action_mask' space .* must have shape \(3,\)",
        ),
        (
            spaces.Dict({"observation": box(2), "action_mask": spaces.Box(0, 1, (2,), np.int8)}),
            box(2),
            r"an 'action_mask' needs Discrete or MultiDiscrete actions",
        ),
    ],
    ids=[
        "Tuple obs",
        "Dict without observation",
        "Text action",
        "Discrete start",
        "2-D nvec",
        "mask size",
        "mask on Box",
    ],
)
def test_unsupported_spaces_name_the_env_and_agent(observation_space, action_space, message):
    config = toy(observation_spaces={"agent_0": observation_space}, action_spaces={"agent_0": action_space})
    with pytest.raises(ValueError, match=r"(?s)env 'test_bad_envs', agent 'agent_0': .*" + message):
        config.spec()


def test_agents_of_one_name_prefix_with_different_spaces_are_named_with_the_difference():
    config = toy(observation_spaces={"agent_0": box(2), "agent_1": box(3)})
    with pytest.raises(
        ValueError,
        match=r"group 'agent' have different spaces \(agent_0: observation_shape=\(2,\); agent_1: observation_shape=\(3,\)\)",
    ):
        config.spec()


# -- populations that do not fit the env ------------------------------------------------------


def test_a_binding_mapped_to_agents_of_two_groups_is_a_config_error():
    spec = PettingZooEnvConfig(env_fn="mpe2.simple_tag_v3.parallel_env").spec()
    bindings = [PolicyBinding("chaser", class_path="x.y"), PolicyBinding("runner", class_path="x.y")]
    with pytest.raises(ValueError, match=r"binding 'chaser' controls agents of groups 'adversary' and 'agent'"):
        BindingTable(bindings, spec, ["chaser", "chaser", "chaser", "chaser"])
    BindingTable(bindings, spec, ["chaser", "chaser", "chaser", "runner"])  # one binding per group: fine


def test_a_policy_that_cannot_handle_the_spaces_fails_at_construction():
    continuous = PettingZooEnvConfig(env_kwargs={"continuous_actions": True}).spec().groups["agent"]
    from lightmarl.policies import QNetworkPolicy

    with pytest.raises(ValueError, match=r"QNetworkPolicy needs discrete actions; group 'agent' has continuous"):
        QNetworkPolicy(continuous)


def test_a_policy_that_cannot_handle_the_spaces_names_the_binding_in_a_recipe():
    with pytest.raises(ValueError, match=r"binding 'q'.*QNetworkPolicy needs discrete actions"):
        MARLModule(
            env=PettingZooEnvConfig(env_kwargs={"continuous_actions": True}),
            policy_bindings=[{"id": "q", "class_path": "lightmarl.policies.QNetworkPolicy"}],
        )


def test_cnn_encoder_on_vector_observations_is_a_clear_error():
    with pytest.raises(ValueError, match=r"CNNEncoder reads images.*group 'agent' has observations of shape \(18,\)"):
        MARLModule(
            env=PettingZooEnvConfig(),
            policy_bindings=[
                {
                    "id": "main",
                    "class_path": "lightmarl.policies.MLPActorCritic",
                    "policy_kwargs": {"encoder": {"class_path": "lightmarl.policies.encoders.CNNEncoder"}},
                }
            ],
        )
