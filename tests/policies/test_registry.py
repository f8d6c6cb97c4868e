"""Loading policies from saved runs: lightmarl checkpoints and plain state_dict files."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer

from lightmarl.algorithms import PPO
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import MLPActorCritic
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.population import PolicyBinding
from lightmarl.training import MARLModule

SPREAD = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 5}, num_envs=2)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A real run: 'coach' (trainable, 32-wide) and 'npc' (frozen, 16-wide), one iteration."""
    path = tmp_path_factory.mktemp("run") / "run.ckpt"
    module = MARLModule(
        env=SPREAD,
        policy_bindings=[
            {"id": "coach", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [32]}},
            {
                "id": "npc",
                "class_path": "lightmarl.policies.MLPActorCritic",
                "policy_kwargs": {"hidden_sizes": [16]},
                "trainable": False,
            },
        ],
        agent_binding_map=["coach", "npc", "coach"],
        algorithm=PPO(minibatch_size=10),
        rollout_steps=5,
        max_frames=10,
    )
    trainer = Trainer(
        max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=0
    )
    trainer.fit(module)
    trainer.save_checkpoint(path)
    return path, module


def group():
    return SPREAD.spec().groups["agent"]


def test_checkpoint_uri_rebuilds_the_binding_with_its_weights(checkpoint):
    path, module = checkpoint
    loaded = PolicyRegistry().get(PolicyBinding("rival", policy_uri=f"{path}#coach", trainable=False), group())
    assert isinstance(loaded, MLPActorCritic) and loaded.hidden_sizes == (32,)
    for key, value in module.policies["coach"].state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    # Without '#binding' the binding with the same id is taken.
    npc = PolicyRegistry().get(PolicyBinding("npc", policy_uri=str(path), trainable=False), group())
    assert npc.hidden_sizes == (16,)
    assert npc.origin == {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [16]}}


def test_checkpoint_without_the_binding_lists_what_it_has(checkpoint):
    path, _ = checkpoint
    with pytest.raises(ValueError, match=r"has no binding 'ghost'; it has \['coach', 'npc'\]"):
        PolicyRegistry().get(PolicyBinding("x", policy_uri=f"{path}#ghost"), group())


def test_plain_state_dict_needs_and_uses_a_class_path(tmp_path):
    source = MLPActorCritic(group(), hidden_sizes=[8])
    torch.save(source.state_dict(), tmp_path / "weights.pt")
    binding = PolicyBinding(
        "b",
        policy_uri=f"{tmp_path / 'weights.pt'}?class_path=lightmarl.policies.MLPActorCritic",
        policy_kwargs={"hidden_sizes": [8]},
    )
    loaded = PolicyRegistry().get(binding, group())
    assert loaded.state_dict().keys() == source.state_dict().keys() and source.state_dict()
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in source.state_dict().items())
    with pytest.raises(ValueError, match=r"plain state_dict; name its policy class in the URI"):
        PolicyRegistry().get(PolicyBinding("c", policy_uri=str(tmp_path / "weights.pt")), group())
    wrong_width = PolicyBinding("d", policy_uri=binding.policy_uri, policy_kwargs={"hidden_sizes": [4]})
    with pytest.raises(ValueError, match=r"do not fit group 'agent'"):
        PolicyRegistry().get(wrong_width, group())


def test_weights_for_other_spaces_are_rejected(checkpoint):
    path, _ = checkpoint
    tag_adversaries = PettingZooEnvConfig(env_fn="mpe2.simple_tag_v3.parallel_env").spec().groups["adversary"]
    with pytest.raises(ValueError, match=r"do not fit group 'adversary'"):
        PolicyRegistry().get(PolicyBinding("x", policy_uri=f"{path}#coach"), tag_adversaries)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ValueError, match=r"policy_uri: no file at"):
        PolicyRegistry().get(PolicyBinding("x", policy_uri=str(tmp_path / "none.ckpt")), group())
    (tmp_path / "junk.ckpt").write_text("not torch")
    with pytest.raises(ValueError, match=r"is not a torch file"):
        PolicyRegistry().get(PolicyBinding("x", policy_uri=str(tmp_path / "junk.ckpt")), group())
