"""The image encoders (Nature-DQN-style ``CNNEncoder``, IMPALA's residual ``ImpalaCNNEncoder``):
shapes, uint8 input converted inside, bad arguments, and both chosen from YAML through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lightmarl.cli import main
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.encoders import CNNEncoder, ImpalaCNNEncoder, ResidualBlock

ROOT = Path(__file__).resolve().parents[2]


def image_group(shape=(24, 12, 3), dtype="uint8") -> GroupSpec:
    return GroupSpec("piston", ("piston_0",), (0,), shape, "discrete", num_actions=3, observation_dtype=dtype)


def test_impala_encoder_stages_halve_the_image_and_blocks_are_residual():
    encoder = ImpalaCNNEncoder(image_group(), channels=(8, 16), blocks_per_stage=1, out_features=32)
    assert sum(isinstance(m, ResidualBlock) for m in encoder.modules()) == 2
    # 24x12 -> 12x6 -> 6x3 after two stride-2 pools: 16 channels x 18 cells into the projection
    assert encoder.project[0].in_features == 16 * 6 * 3
    frames = torch.randint(0, 256, (5, 4, 24, 12, 3), dtype=torch.uint8)
    assert encoder(frames).shape == (5, 4, 32)
    block = ResidualBlock(4, torch.nn.ReLU)
    torch.nn.init.zeros_(block.body[3].weight)
    torch.nn.init.zeros_(block.body[3].bias)
    x = torch.randn(2, 4, 5, 5)
    assert torch.equal(block(x), x)  # the skip path: a zero body leaves the input


@pytest.mark.parametrize("encoder_class", [CNNEncoder, ImpalaCNNEncoder])
def test_uint8_frames_are_scaled_inside_the_encoder(encoder_class):
    uint8 = encoder_class(image_group(dtype="uint8"), out_features=16)
    floats = encoder_class(image_group(dtype="float32"), out_features=16)
    floats.load_state_dict(uint8.state_dict())
    frames = torch.randint(0, 256, (3, 24, 12, 3), dtype=torch.uint8)
    # uint8 frames are divided by 255 where the encoder runs; float frames are read as they are.
    assert torch.allclose(uint8(frames), floats(frames.float() / 255), atol=1e-6)


def test_impala_encoder_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="ImpalaCNNEncoder reads images"):
        ImpalaCNNEncoder(image_group(shape=(10,), dtype="float32"))
    with pytest.raises(ValueError, match="channels: expected one positive channel count per stage"):
        ImpalaCNNEncoder(image_group(), channels=())
    with pytest.raises(ValueError, match="blocks_per_stage: expected an integer >= 0"):
        ImpalaCNNEncoder(image_group(), blocks_per_stage=-1)


TINY = [
    "--model.env.num_envs=2",
    '--model.env.env_kwargs={"n_pistons": 3, "continuous": false, "max_cycles": 4}',
    "--model.rollout_steps=4",
    "--model.algorithm.init_args.minibatch_size=8",
    "--model.max_frames=8",
    "--evaluation.validation.episodes=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
]
ENCODERS = {
    "nature": {
        "class_path": "lightmarl.policies.encoders.CNNEncoder",
        "init_args": {"channels": [8, 16], "kernel_sizes": [4, 3], "strides": [2, 1], "out_features": 32},
    },
    "impala": {
        "class_path": "lightmarl.policies.encoders.ImpalaCNNEncoder",
        "init_args": {"channels": [8, 16], "blocks_per_stage": 1, "out_features": 32},
    },
}


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_image_encoders_are_chosen_from_yaml_through_the_cli(name, tmp_path, monkeypatch):
    pytest.importorskip("pettingzoo.butterfly.pistonball_v6")
    monkeypatch.chdir(tmp_path)
    bindings = [
        {
            "id": "main",
            "class_path": "lightmarl.policies.MLPActorCritic",
            "policy_kwargs": {"critic": "local", "encoder": ENCODERS[name]},
        }
    ]
    recipe = str(ROOT / "recipes/pistonball.yaml")
    main(["fit", "--config", recipe, "--model.policy_bindings", json.dumps(bindings), *TINY])
    checkpoint = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=True)
    assert checkpoint["lightmarl"]["population"]["bindings"]["main"]["policy_kwargs"]["encoder"] == ENCODERS[name]
    weights = [k for k in checkpoint["state_dict"] if ".encoder.convs." in k]
    assert weights, "the policy has no CNN"
    assert any(".body." in k for k in weights) == (name == "impala")
