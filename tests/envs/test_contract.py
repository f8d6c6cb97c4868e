"""The env-adapter contract, checked on every env family installed here.

Each family runs through :func:`lightmarl.envs.checks.check_vec_env` in process and in worker
processes, must give the same trajectories both ways and for the same seed, and different
ones for other seeds. TorchRL's ``check_env_specs`` does not apply: lightmarl's vectors are
not TorchRL envs; ``check_vec_env`` is its counterpart for the ``VecEnv`` protocol.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import torch

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.checks import (
    EnvContractError,
    check_same_trajectories,
    check_vec_env,
    random_actions,
)

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Family:
    """One env family: how to build it and what its spec and rollouts must show."""

    env_fn: str
    env_kwargs: dict[str, Any]
    groups: dict[str, tuple[int, tuple[int, ...], str]]  # name -> (agents, observation shape, action kind)
    steps: int = 30  # enough to see episodes end (and agents leave, where they do)
    agents_leave: bool = False
    masked: bool = False
    requires: tuple[str, ...] = field(default=())
    deterministic: bool = False  # the env ignores its seed (a board game): same trajectories for any seed


FAMILIES = {
    "simple_spread": Family(
        "mpe2.simple_spread_v3.parallel_env", {"N": 3, "max_cycles": 5}, {"agent": (3, (18,), "discrete")}
    ),
    "simple_spread continuous": Family(
        "mpe2.simple_spread_v3.parallel_env",
        {"N": 3, "max_cycles": 5, "continuous_actions": True},
        {"agent": (3, (18,), "continuous")},
    ),
    "simple_tag (2 groups)": Family(
        "mpe2.simple_tag_v3.parallel_env",
        {"max_cycles": 5},
        {"adversary": (3, (16,), "discrete"), "agent": (1, (14,), "discrete")},
    ),
    "cue_memory": Family("lightmarl.envs.testing.memory.parallel_env", {"delay": 2}, {"agent": (2, (7,), "discrete")}),
    "match_target multi-discrete, masks, leaving agents": Family(
        "lightmarl.envs.testing.match.parallel_env",
        {"num_agents": 3, "nvec": [3, 4], "leave_probability": 0.1, "max_cycles": 6},
        {"agent": (3, (7,), "multi_discrete")},
        agents_leave=True,
        masked=True,
    ),
    "match_target discrete, masks": Family(
        "lightmarl.envs.testing.match.parallel_env",
        {"nvec": [5], "max_cycles": 6},
        {"agent": (2, (5,), "discrete")},
        masked=True,
    ),
    "int agent ids (0, 1, 2), masks, leaving agents": Family(
        "lightmarl.envs.testing.agent_ids.IntIdsMatchEnv",
        {"num_agents": 3, "nvec": [3, 4], "leave_probability": 0.1, "max_cycles": 6},
        {"agent": (3, (7,), "multi_discrete")},
        agents_leave=True,
        masked=True,
    ),
    "tuple agent ids (('red', 0), ..., ('blue', 0)): two groups": Family(
        "lightmarl.envs.testing.agent_ids.TupleIdsMatchEnv",
        {"num_red": 2, "num_blue": 2, "nvec": [5], "max_cycles": 6},
        {"red": (2, (5,), "discrete"), "blue": (2, (5,), "discrete")},
        masked=True,
    ),
    "turn-based (AEC) tictactoe with int agent ids": Family(
        "lightmarl.envs.testing.agent_ids.int_ids_aec_env",
        {"env_fn": "pettingzoo.classic.tictactoe_v3.env"},
        {"agent": (2, (3, 3, 2), "discrete")},
        masked=True,
        requires=("pygame",),
        deterministic=True,
    ),
    "mettagrid mines (int agent ids 0..3, 48x3 uint8 tokens)": Family(
        "lightmarl.envs.mettagrid.mines_env",
        {"num_agents": 4, "size": 7, "num_mines": 2, "num_walls": 2, "max_steps": 10},
        {"agent": (4, (48, 3), "discrete")},
        requires=("mettagrid",),
    ),
    "sisl pursuit (7x7x3 images)": Family(
        "pettingzoo.sisl.pursuit_v5.parallel_env",
        {"max_cycles": 10, "x_size": 8, "y_size": 8, "n_evaders": 4, "n_pursuers": 3},
        {"pursuer": (3, (7, 7, 3), "discrete")},
        requires=("scipy", "pygame"),
    ),
    "butterfly knights_archers_zombies (agents die)": Family(
        "pettingzoo.butterfly.knights_archers_zombies_v11.parallel_env",
        # Vector observations (v11's obs_method="vector", v10's vector_state=True); fast zombies
        # and deadly borders so that agents die within a few dozen random steps.
        {"obs_method": "vector", "max_cycles": 40, "line_death": True, "spawn_delay": 2},
        {"archer": (2, (27, 5), "discrete"), "knight": (2, (27, 5), "discrete")},
        steps=60,
        agents_leave=True,
        requires=("pygame",),
    ),
}


def _params():
    for name, family in FAMILIES.items():
        missing = [m for m in family.requires if importlib.util.find_spec(m) is None]
        marks = [pytest.mark.skip(reason=f"needs {missing}: pip install 'lightmarl[envs]'")] if missing else []
        yield pytest.param(family, id=name, marks=marks)


FAMILY_PARAMS = list(_params())


def config_of(family: Family, num_envs: int = 3, num_workers: int = 0) -> PettingZooEnvConfig:
    return PettingZooEnvConfig(family.env_fn, dict(family.env_kwargs), num_envs=num_envs, num_workers=num_workers)


@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_spec_follows_the_spaces(family):
    spec = config_of(family).spec()
    assert {g.name: (g.num_agents, g.observation_shape, g.action_kind) for g in spec.groups.values()} == family.groups
    for g in spec.groups.values():
        assert g.has_action_mask == family.masked
        assert g.action_dtype == (torch.float32 if g.action_kind == "continuous" else torch.int64)
        if g.action_kind == "multi_discrete":
            assert g.num_actions == sum(g.action_nvec) and g.action_shape == (len(g.action_nvec),)


@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_in_process_vector_keeps_the_contract(family):
    report = check_vec_env(config_of(family).make_vector(seed=0), num_steps=family.steps)
    assert report.episode_ends > 0, "auto-reset never happened"
    assert (report.agent_exits > 0) == family.agents_leave
    assert (report.masked_rows > 0) == family.masked


@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_worker_vector_keeps_the_contract_and_matches_the_in_process_one(family):
    remote = config_of(family, num_workers=2).make_vector(seed=5)
    try:
        report = check_vec_env(remote, num_steps=family.steps)
    except BaseException:
        remote.close()
        raise
    assert report.episode_ends > 0
    check_same_trajectories(config_of(family).make_vector(seed=5), remote, num_steps=family.steps)


def observations(config: PettingZooEnvConfig, seed: int, steps: int) -> dict[str, torch.Tensor]:
    """Per group ``[steps + 1, num_envs, agents, *obs]`` under fixed random actions (auto-resets included)."""
    env = config.make_vector(seed)
    generator = torch.Generator().manual_seed(0)
    seen = [env.reset()]
    for _ in range(steps):
        env.step(random_actions(env.spec, env.current, generator))
        seen.append(env.current)
    env.close()
    return {g: torch.stack([s[g]["observation"] for s in seen]) for g in env.spec.groups}


@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_seeds_reproduce_trajectories_and_differ_between_seeds_and_copies(family):
    config = config_of(family)
    check_same_trajectories(config.make_vector(seed=3), config.make_vector(seed=3), num_steps=family.steps)
    if family.deterministic:
        return
    a, b = observations(config, 3, family.steps), observations(config, 103, family.steps)
    assert any(not torch.equal(a[g], b[g]) for g in a), "another seed gave the same trajectory"
    for g, obs in a.items():
        # Copies are seeded seed + i: no two copies live the same trajectory.
        copies = obs.transpose(0, 1).flatten(1)
        assert all(not torch.equal(copies[i], copies[j]) for i in range(len(copies)) for j in range(i)), g


def test_differing_trajectories_are_reported_with_step_and_copy():
    family = FAMILIES["simple_spread"]
    with pytest.raises(EnvContractError, match=r"simple_spread_v3.*seeds"):
        check_same_trajectories(config_of(family).make_vector(0), config_of(family).make_vector(1))
    # Same seeds, different env kwargs: the first difference names the step, entry and copy.
    a = config_of(family).make_vector(0)
    b = config_of(replace(family, env_kwargs={"N": 3, "max_cycles": 5, "local_ratio": 0.9})).make_vector(0)
    with pytest.raises(EnvContractError, match=r"step 0: agent\.reward differs, first in copy 0"):
        check_same_trajectories(a, b)


class _Vanisher:
    """agent_1 leaves env.agents after the first step without being terminated or truncated."""

    possible_agents = ["agent_0", "agent_1"]

    def __init__(self):
        self.agents = []

    def observation_space(self, agent):
        from gymnasium.spaces import Box

        return Box(-1, 1, (2,))

    def action_space(self, agent):
        from gymnasium.spaces import Discrete

        return Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: [0.0, 0.0] for a in self.agents}, {}

    def step(self, actions):
        observations = {a: [0.5, 0.5] for a in self.agents}
        self.agents = ["agent_0"]
        falses = dict.fromkeys(observations, False)
        return observations, dict.fromkeys(observations, 0.0), falses, dict(falses), {}

    def close(self):
        pass


def test_check_vec_env_catches_an_agent_that_leaves_without_done():
    vec = PettingZooEnvConfig(env_fn=f"{__name__}._Vanisher", num_envs=2).make_vector(seed=4)
    with pytest.raises(EnvContractError, match=r"copy 0, seed 4\), step 0: agent 'agent_1' left env.agents"):
        check_vec_env(vec, num_steps=3)
