"""Any hashable agent id (``int``, ``str``, ``tuple``) works everywhere: names, groups, maps, training.

The contract itself (in process, worker processes, AEC) runs in ``test_contract.py`` on the
envs of :mod:`lightmarl.envs.testing.agent_ids`; here: the naming rule, its errors, and a
population trained on int and tuple ids through maps, ``policy_mapping_fn`` and evaluation.
"""

from __future__ import annotations

import numpy as np
import pytest
from lightning.pytorch import Trainer, seed_everything

from lightmarl.algorithms import PPO
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.spec import agent_name
from lightmarl.envs.testing.agent_ids import IntIdsMatchEnv
from lightmarl.evaluation import evaluate_episodes
from lightmarl.training import MARLModule

pytestmark = pytest.mark.timeout(120)
AGENT_IDS = "lightmarl.envs.testing.agent_ids"
BINDINGS = [
    {"id": "red", "class_path": "lightmarl.policies.MLPActorCritic"},
    {"id": "blue", "class_path": "lightmarl.policies.UniformRandomPolicy", "trainable": False},
]


def fit_quietly(module: MARLModule, root) -> None:
    Trainer(
        max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, default_root_dir=root,
    ).fit(module)  # fmt: skip


def by_team(agent: str) -> str:
    """``policy_mapping_fn``: ``red_0`` -> ``red``; it receives agent names, whatever the env's ids."""
    assert isinstance(agent, str), agent
    return agent.rpartition("_")[0]


@pytest.mark.parametrize(
    ("env_id", "name"),
    [
        ("agent_0", "agent_0"),
        (3, "agent_3"),
        (np.int64(2), "agent_2"),
        (("red", 0), "red_0"),
        (("red", "scout", 1), "red_scout_1"),
        ((0, 1), "agent_0_1"),
    ],
)
def test_every_hashable_id_gets_a_readable_name(env_id, name):
    assert agent_name(env_id) == name


def test_int_ids_are_named_and_grouped_and_keep_the_envs_ids():
    spec = PettingZooEnvConfig(f"{AGENT_IDS}.IntIdsMatchEnv", {"num_agents": 3}).spec()
    assert spec.possible_agents == ("agent_0", "agent_1", "agent_2") and spec.env_agents == (0, 1, 2)
    (group,) = spec.groups.values()
    assert (group.name, group.agents, group.env_agents) == ("agent", spec.possible_agents, (0, 1, 2))
    assert spec.group_of(1) is spec.group_of("agent_1") is group


def test_tuple_ids_form_groups_by_their_first_part():
    spec = PettingZooEnvConfig(f"{AGENT_IDS}.TupleIdsMatchEnv", {"num_red": 2, "num_blue": 1}).spec()
    assert spec.possible_agents == ("red_0", "red_1", "blue_0")
    assert {g.name: g.env_agents for g in spec.groups.values()} == {
        "red": (("red", 0), ("red", 1)),
        "blue": (("blue", 0),),
    }


class _Clash(IntIdsMatchEnv):
    """Agents ``0`` and ``"agent_0"``: both would be named ``agent_0``."""

    def __init__(self) -> None:
        super().__init__(num_agents=2)
        self.possible_agents = [0, "agent_0"]  # type: ignore[list-item]


def test_ids_whose_names_clash_fail_naming_both():
    with pytest.raises(ValueError, match=r"agent ids 0 and 'agent_0' both get the name 'agent_0'"):
        PettingZooEnvConfig(f"{__name__}._Clash").spec()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_population_trains_and_evaluates_on_tuple_ids_mapped_by_name(tmp_path, num_workers):
    seed_everything(0)
    env = PettingZooEnvConfig(
        f"{AGENT_IDS}.TupleIdsMatchEnv",
        {"num_red": 2, "num_blue": 1, "nvec": [4], "max_cycles": 5},
        num_envs=4,
        num_workers=num_workers,
    )
    module = MARLModule(
        env=env,
        policy_bindings=BINDINGS,
        policy_mapping_fn=f"{__name__}.by_team",
        algorithm=PPO(lr=3e-3, epochs=2, minibatch_size=40),
        rollout_steps=10,
        max_frames=200,
        iterations_per_epoch=5,
    )
    assert module.table.agent_binding_map == ["red", "red", "blue"]
    fit_quietly(module, tmp_path)
    assert module.frames == 200
    result = evaluate_episodes(module.population, env, num_episodes=4, seed=1)
    assert set(result) == {"red", "blue"} and all(np.isfinite(r["episode_return"]) for r in result.values())


def test_a_turn_based_env_with_int_ids_trains_in_worker_processes(tmp_path):
    seed_everything(0)
    env = PettingZooEnvConfig(f"{AGENT_IDS}.int_ids_aec_env", num_envs=4, num_workers=2)
    module = MARLModule(
        env=env,
        policy_bindings=[
            {"id": "main", "class_path": "lightmarl.policies.MLPActorCritic"},
            {"id": "random", "class_path": "lightmarl.policies.UniformRandomPolicy", "trainable": False},
        ],
        agent_binding_map=["main", "random"],
        algorithm=PPO(epochs=1, minibatch_size=40),
        rollout_steps=10,
        max_frames=80,
    )
    assert module.env_spec.turn_based and module.env_spec.env_agents == (0, 1)
    fit_quietly(module, tmp_path)
    assert module.frames == 80
