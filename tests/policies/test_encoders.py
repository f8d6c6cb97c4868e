"""CNNEncoder: image observations of either layout and any batch dims, plugged into policies by recipe."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util

import pytest
import torch

from expectations import assert_finite_metrics
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import GroupSpec, PettingZooEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.policies.encoders import CNNEncoder, build_encoder
from lightmarl.population import BindingTable

IMAGE = GroupSpec("pursuer", ("pursuer_0", "pursuer_1"), (0, 1), (7, 7, 3), "discrete", num_actions=5)
CNN = "lightmarl.policies.encoders.CNNEncoder"
needs_sisl = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("scipy", "pygame")),
    reason="sisl pursuit needs scipy and pygame: pip install 'lightmarl[sisl]'",
)


def with_shape(shape, dtype="float32"):
    return dataclasses.replace(IMAGE, observation_shape=shape, observation_dtype=dtype)


@pytest.mark.parametrize("batch", [(), (5,), (4, 10, 2), (0, 2)], ids=str)
def test_any_leading_batch_dims_map_to_features(batch):
    encoder = CNNEncoder(IMAGE, channels=(4, 8), out_features=16)
    features = encoder(torch.rand(*batch, 7, 7, 3))
    assert features.shape == (*batch, 16)
    assert encoder.out_features == 16


def test_channels_first_images_give_the_same_features_as_channels_last():
    hwc = CNNEncoder(with_shape((9, 8, 3)), channels=(4,), out_features=6)
    chw = CNNEncoder(with_shape((3, 9, 8)), channels=(4,), out_features=6)
    assert hwc.channels_last and not chw.channels_last  # detected from the shapes
    chw.load_state_dict(hwc.state_dict())
    images = torch.rand(2, 9, 8, 3)
    torch.testing.assert_close(hwc(images), chw(images.permute(0, 3, 1, 2)))


@pytest.mark.parametrize(
    "shape, channels_last, expected",
    [
        ((7, 7, 3), None, True),
        ((3, 84, 84), None, False),
        ((84, 84, 4), None, True),
        ((4, 4, 4), None, True),
        ((3, 5, 5), True, True),
    ],
)
def test_layout_detection_and_override(shape, channels_last, expected):
    assert CNNEncoder(with_shape(shape), channels=(2,), channels_last=channels_last).channels_last is expected


def test_single_channel_images():
    encoder = CNNEncoder(with_shape((10, 12)), channels=(4,), out_features=5)
    assert encoder(torch.rand(3, 10, 12)).shape == (3, 5)


def test_uint8_images_are_scaled_to_unit_range():
    raw = CNNEncoder(with_shape((8, 8, 3), dtype="uint8"), channels=(4,), out_features=6)
    assert raw.scale == pytest.approx(1 / 255)
    unit = CNNEncoder(with_shape((8, 8, 3)), channels=(4,), out_features=6)
    assert unit.scale == 1.0
    unit.load_state_dict(raw.state_dict())
    pixels = torch.randint(0, 256, (2, 8, 8, 3), dtype=torch.uint8)
    # uint8 tensors (what the env layer hands over for uint8 spaces) or their float32 copies read the same.
    torch.testing.assert_close(raw(pixels), unit(pixels.float() / 255))
    torch.testing.assert_close(raw(pixels.float()), raw(pixels))


def test_strided_stack_for_large_images():
    encoder = CNNEncoder(
        with_shape((84, 84, 3), dtype="uint8"), channels=(32, 64, 64), kernel_sizes=(8, 4, 3), strides=(4, 2, 1)
    )
    assert encoder(torch.zeros(2, 84, 84, 3)).shape == (2, 128)


@pytest.mark.parametrize(
    "group, kwargs, message",
    [
        (with_shape((18,)), {}, r"CNNEncoder reads images.*group 'pursuer' has observations of shape \(18,\)"),
        (IMAGE, {"kernel_sizes": 5}, r"images of shape \(7, 7, 3\) are too small for kernel_sizes \[5, 5\]"),
        (
            IMAGE,
            {"channels": (4, 8), "strides": (1, 1, 1)},
            r"one kernel size, stride and padding per conv layer.*strides has 3",
        ),
        (IMAGE, {"channels": ()}, r"give at least one layer"),
        (IMAGE, {"activation": "swish"}, r"activation: 'swish'"),
    ],
)
def test_bad_configurations_are_clear_errors(group, kwargs, message):
    with pytest.raises(ValueError, match=message):
        CNNEncoder(group, **kwargs)


def test_recipe_spec_builds_it_with_the_group():
    encoder = build_encoder(IMAGE, {"class_path": CNN, "init_args": {"channels": [4], "out_features": 8}}, field="f")
    assert isinstance(encoder, CNNEncoder) and encoder.out_features == 8


@needs_sisl
@pytest.mark.parametrize("critic", ["centralized", "local"])
def test_ppo_trains_a_cnn_policy_on_pursuit_images(critic):
    config = PettingZooEnvConfig(
        env_fn="pettingzoo.sisl.pursuit_v5.parallel_env",
        env_kwargs={"max_cycles": 10, "x_size": 8, "y_size": 8, "n_evaders": 4, "n_pursuers": 3},
        num_envs=2,
    )
    spec = config.spec()
    encoder = {"class_path": CNN, "init_args": {"channels": [4, 8], "out_features": 16}}
    policy = MLPActorCritic(spec.groups["pursuer"], hidden_sizes=[16], critic=critic, encoder=encoder)
    assert isinstance(policy.encoder, CNNEncoder)
    table = BindingTable(None, spec)
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 6)
    experience = collector.collect()
    assert experience["pursuer", "observation"].shape == (2, 6, 3, 7, 7, 3)
    conv_before = copy.deepcopy(policy.encoder.state_dict())
    trainer = IndependentMARLTrainer(table, {"main": policy}, {"main": PPO(minibatch_size=4, epochs=2)})
    metrics = trainer.update(experience, trainer.make_optimizers(), PlainStepper())["main"]
    assert metrics["rows"] == 2 * 6 * 3
    assert_finite_metrics(metrics)
    changed = [k for k, v in policy.encoder.state_dict().items() if not torch.equal(v, conv_before[k])]
    assert changed, "the convolutions did not learn"
