"""Shared modules: one object in several policies, stepped exactly once, frozen when only frozen bindings use it."""

from __future__ import annotations

import pytest
import torch

from lightmarl.algorithms import DQN, PPO, PlainStepper
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.inference import load_population
from lightmarl.policies import PolicyDict
from lightmarl.training.module import MARLModule

ENV = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 25}, num_envs=4)
ENCODER = {
    "class_path": "lightmarl.policies.encoders.MLPEncoder",
    "init_args": {"hidden_sizes": [], "out_features": 16},
}
MLP = "lightmarl.policies.MLPActorCritic"
QNET = "lightmarl.policies.QNetworkPolicy"


def ppo_and_dqn(**shared_settings) -> MARLModule:
    return MARLModule(
        env=ENV,
        policy_bindings=[
            {"id": "ppo_policy", "class_path": MLP, "policy_kwargs": {"hidden_sizes": [16], "critic": "local"}},
            {"id": "dqn_policy", "class_path": QNET, "policy_kwargs": {"hidden_sizes": [16]}},
        ],
        agent_binding_map=["ppo_policy", "dqn_policy", "dqn_policy"],
        algorithms={"dqn_policy": DQN(learning_starts=1, batch_size=32, updates_per_iteration=2)},
        algorithm=PPO(epochs=2, minibatch_size=50),
        shared_modules={
            "encoder": {
                **ENCODER,
                "shared_between": {"ppo_policy": "encoder", "dqn_policy": "encoder"},
                **shared_settings,
            }
        },
    )


def test_one_object_is_injected_into_every_listed_policy():
    module = ppo_and_dqn()
    ppo, dqn = module.policies["ppo_policy"], module.policies["dqn_policy"]
    assert ppo.encoder is dqn.encoder is module.shared.modules["encoder"]
    ppo_weight = ppo.actor.module[0].module.encoder.net[0].weight
    dqn_weight = dqn.qvalue[0].module.encoder.net[0].weight
    assert ppo_weight.data_ptr() == dqn_weight.data_ptr()


def collect(module: MARLModule) -> torch.Tensor:
    module.setup("fit")
    collector = RolloutCollector(ENV.make_vector(seed=0), module.population, rollout_steps=10)
    try:
        return collector.collect()
    finally:
        collector.close()


def test_shared_module_is_stepped_once_on_the_summed_gradient_of_every_loss():
    module = ppo_and_dqn(optimizer="sgd", lr=0.1)
    experience = collect(module)
    trainer = module.marl_trainer
    optimizers = trainer.make_optimizers()
    assert list(optimizers) == ["ppo_policy", "dqn_policy", "_shared"]  # by name: the bindings', the shared modules'
    shared_params = trainer.shared_parameters()
    shared_ids = {id(p) for p in shared_params}
    for optimizer in (
        optimizers["ppo_policy"],
        optimizers["dqn_policy"],
    ):  # no binding's optimizer may step the shared module
        assert not shared_ids & {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert {id(p) for g in optimizers["_shared"].param_groups for p in g["params"]} == shared_ids

    summed = [torch.zeros_like(p) for p in shared_params]
    calls = []

    def accumulate_into(acc: torch.Tensor):
        def hook(grad: torch.Tensor) -> None:
            acc.add_(grad)
            calls.append(1)

        return hook

    for p, acc in zip(shared_params, summed):
        p.register_hook(accumulate_into(acc))
    steps = []
    original_step = optimizers["_shared"].step
    optimizers["_shared"].step = lambda *a, **k: (steps.append(1), original_step(*a, **k))[1]
    before = [p.detach().clone() for p in shared_params]

    metrics = trainer.update(experience, optimizers, PlainStepper())

    assert steps == [1], "the shared optimizer steps exactly once per update"
    assert len(calls) > 2 * len(shared_params), "both bindings' losses reached the encoder, several times"
    assert set(metrics) == {"ppo_policy", "dqn_policy", "_shared"}
    for p, b, g in zip(shared_params, before, summed):
        assert g.abs().sum() > 0
        torch.testing.assert_close(p.detach(), b - 0.1 * g)
        assert p.grad is None  # zeroed for the next iteration


def test_shared_module_of_frozen_bindings_only_stays_frozen():
    module = MARLModule(
        env=ENV,
        policy_bindings=[
            {"id": "main", "class_path": MLP, "policy_kwargs": {"hidden_sizes": [16]}},
            {"id": "npc_a", "class_path": MLP, "policy_kwargs": {"hidden_sizes": [16]}, "trainable": False},
            {"id": "npc_b", "class_path": MLP, "policy_kwargs": {"hidden_sizes": [16]}, "trainable": False},
        ],
        agent_binding_map=["main", "npc_a", "npc_b"],
        algorithm=PPO(epochs=1, minibatch_size=50),
        shared_modules={
            "npc_encoder": {**ENCODER, "shared_between": {"npc_a": "encoder", "npc_b": "encoder"}},
            "common": {**ENCODER, "shared_between": {"main": "value_network", "npc_a": "value_network"}}
            | {"class_path": "lightmarl.policies.CentralizedValueNetwork", "init_args": {"hidden_sizes": [16]}},
        },
    )
    frozen = module.shared.modules["npc_encoder"]
    assert not any(p.requires_grad for p in frozen.parameters())
    # Shared with a trainable binding: it learns, even inside the frozen binding's policy.
    assert all(p.requires_grad for p in module.shared.modules["common"].parameters())
    experience = collect(module)
    before = [p.clone() for p in frozen.parameters()]
    trainer = module.marl_trainer
    assert set(trainer.shared_modules) == {"common"}
    trainer.update(experience, trainer.make_optimizers(), PlainStepper())
    for p, b in zip(frozen.parameters(), before):
        assert torch.equal(p, b)


@pytest.mark.parametrize(
    ("shared_between", "message"),
    [
        ({"nobody": "encoder"}, "unknown binding 'nobody'"),
        ({"dqn_policy": "value_network"}, "has no constructor argument 'value_network'"),
        ({"ppo_policy": "hidden_sizes"}, "already sets policy_kwargs.hidden_sizes"),
    ],
)
def test_bad_shared_between_fails_before_training(shared_between, message):
    with pytest.raises(ValueError, match=message):
        MARLModule(
            env=ENV,
            policy_bindings=[
                {"id": "ppo_policy", "class_path": MLP, "policy_kwargs": {"hidden_sizes": [16]}},
                {"id": "dqn_policy", "class_path": QNET},
            ],
            agent_binding_map=["ppo_policy", "dqn_policy", "dqn_policy"],
            shared_modules={"encoder": {**ENCODER, "shared_between": shared_between}},
        )


def test_policy_dict_round_trip_keeps_shared_modules_shared(tmp_path):
    module = ppo_and_dqn()
    with torch.no_grad():
        for p in module.shared.modules["encoder"].parameters():
            p.add_(1.0)  # weights that differ from a fresh build
    path = tmp_path / "population"
    PolicyDict.from_module(module).export(path)
    loaded = load_population(path).bindings
    assert set(loaded) == {"ppo_policy", "dqn_policy"}
    assert loaded["ppo_policy"].encoder is loaded["dqn_policy"].encoder
    original = module.policies.state_dict()
    reloaded = {f"{b}.{k}": v for b, policy in loaded.items() for k, v in policy.state_dict().items()}
    assert original.keys() == reloaded.keys()
    for key in original:
        torch.testing.assert_close(original[key], reloaded[key])
    observation = torch.randn(5, 18)
    torch.testing.assert_close(loaded["ppo_policy"].encoder(observation), module.shared.modules["encoder"](observation))


def test_a_binding_loaded_from_a_checkpoint_gets_its_shared_modules_back(tmp_path):
    trained = ppo_and_dqn()
    checkpoint = {"state_dict": trained.state_dict()}
    trained.on_save_checkpoint(checkpoint)
    path = tmp_path / "run.ckpt"
    torch.save(checkpoint, path)
    module = MARLModule(
        env=ENV,
        policy_bindings=[
            {"id": "main", "class_path": MLP},
            {"id": "npc", "policy_uri": f"{path}#ppo_policy", "trainable": False},
        ],
        agent_binding_map=["main", "npc", "npc"],
    )
    npc = module.policies["npc"]
    assert npc.origin["shared_modules"] == {"encoder": "encoder"}
    for (name, value), (_, expected) in zip(
        npc.state_dict().items(), trained.policies["ppo_policy"].state_dict().items()
    ):
        torch.testing.assert_close(value, expected, msg=name)


def test_the_population_resolves_shared_modules_as_plain_data_without_building_them(spread_config):
    from lightmarl.population import BindingTable, PolicyBinding, SharedModuleSpec, shared_module_specs

    table = BindingTable(
        [
            PolicyBinding("main", class_path=MLP),
            PolicyBinding("npc", class_path=MLP, trainable=False),
            PolicyBinding("unused", class_path=MLP),  # controls no agent: not a user
        ],
        spread_config.spec(),
        ["main", "npc", "npc"],
    )
    specs = shared_module_specs(
        {
            "critic": {"class_path": "no_such_package.Module", "lr": 0.01},  # never imported: nothing is built
            "npc_only": {"class_path": "no_such_package.Module", "shared_between": {"npc": "value_network"}},
        },
        table,
    )
    assert specs["critic"] == SharedModuleSpec(
        name="critic",
        class_path="no_such_package.Module",
        users={"main": "critic", "npc": "critic"},
        group="agent",
        lr=0.01,
    )
    assert specs["npc_only"].users == {"npc": "value_network"} and not specs["npc_only"].trainable
    assert specs["critic"].describe()["shared_between"] == {"main": "critic", "npc": "critic"}
