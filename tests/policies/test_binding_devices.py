"""PolicyBinding.device: frozen bindings may act on a device of their own."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer

from lightmarl.algorithms import PPO
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.errors import ConfigError
from lightmarl.policies import MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl.training import MARLModule
from lightmarl_examples.simple_spread import SpreadToLandmarkPolicy

SPREAD = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 5}, num_envs=2)


def test_device_strings_are_validated():
    with pytest.raises(ValueError, match=r"policy_bindings\[0\].device: 'gpu0' is not a torch device"):
        BindingTable([PolicyBinding("a", class_path="x.y", device="gpu0")], SPREAD.spec())


@pytest.mark.parametrize("agent_map", [["npc", "npc", "npc"], ["npc", "other", "npc"]])
def test_a_binding_with_its_own_device_acts_like_one_without(agent_map):
    spec = SPREAD.spec()
    group = spec.groups["agent"]

    def act(device):
        table = BindingTable(
            [PolicyBinding("npc", class_path="x.y", device=device), PolicyBinding("other", class_path="x.y")],
            spec,
            agent_map,
        )
        population = MultiAgentPolicy(
            {"npc": SpreadToLandmarkPolicy(group), "other": SpreadToLandmarkPolicy(group)}, table
        )
        population.place_bindings()
        env = SPREAD.make_vector(seed=0)
        env.reset()
        return population(env.observation_td())["agent", "action"]

    assert torch.equal(act("cpu"), act(None))


def test_trainable_binding_on_another_device_is_refused_before_training(tmp_path):
    module = MARLModule(
        env=SPREAD,
        policy_bindings=[{"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "device": "meta"}],
        algorithm=PPO(minibatch_size=10),
        max_frames=10,
        rollout_steps=5,
    )
    trainer = Trainer(
        max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path
    )
    with pytest.raises(ConfigError, match=r"trainable binding 'main' asks for device 'meta'"):
        trainer.fit(module)
    assert module.iterations == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_frozen_binding_acts_on_the_gpu_while_rows_stay_on_the_cpu():
    spec = SPREAD.spec()
    group = spec.groups["agent"]
    from lightmarl.policies import MLPActorCritic

    table = BindingTable(
        [
            PolicyBinding("npc", class_path="x.y", device="cuda", trainable=False),
            PolicyBinding("main", class_path="x.y"),
        ],
        spec,
        ["npc", "main", "main"],
    )
    population = MultiAgentPolicy({"npc": MLPActorCritic(group), "main": MLPActorCritic(group)}, table)
    population.place_bindings()
    assert next(population.policies["npc"].parameters()).is_cuda
    env = SPREAD.make_vector(seed=0)
    env.reset()
    out = population(env.observation_td())
    assert out["agent", "action"].device.type == "cpu"
