"""TokenEncoder: shapes, padding ignored, token order ignored, vmap, bad settings, built from a spec."""

from __future__ import annotations

import pytest
import torch

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies import MLPActorCritic
from lightmarl.policies.encoders import build_encoder
from lightmarl.policies.token_encoders import TokenEncoder

POOLINGS = ["max", "mean", "attention"]


def group(num_tokens: int = 24) -> GroupSpec:
    return GroupSpec("agent", ("agent_0", "agent_1"), (0, 1), (num_tokens, 3), "discrete", num_actions=5)


def token_observations(batch: int, num_tokens: int, present: int, seed: int = 0) -> torch.Tensor:
    """``[batch, num_tokens, 3]`` float rows as MettaGrid sends: ``present`` tokens, then 0xFF padding."""
    generator = torch.Generator().manual_seed(seed)
    obs = torch.full((batch, num_tokens, 3), 255.0)
    location = torch.randint(0, 7, (batch, present, 2), generator=generator)
    obs[:, :present, 0] = (location[..., 0] * 16 + location[..., 1]).float()
    obs[:, :present, 1:] = torch.randint(0, 20, (batch, present, 2), generator=generator).float()
    obs[:, 0, 0] = 0xFE  # a global token
    return obs


@pytest.mark.parametrize("pooling", POOLINGS)
def test_features_have_the_batch_dims_and_out_features(pooling):
    encoder = TokenEncoder(group(), hidden_size=16, out_features=8, pooling=pooling, num_heads=2)
    obs = token_observations(6, 24, 10).reshape(2, 3, 24, 3)
    features = encoder(obs)
    assert features.shape == (2, 3, 8) and torch.isfinite(features).all()
    assert encoder.out_features == 8


@pytest.mark.parametrize("pooling", POOLINGS)
def test_reordering_tokens_leaves_the_features_unchanged(pooling):
    torch.manual_seed(0)
    encoder = TokenEncoder(group(), hidden_size=16, pooling=pooling, num_heads=2)
    obs = token_observations(5, 24, 12)
    shuffled = obs[:, torch.randperm(24)]  # padding rows move between tokens too
    torch.testing.assert_close(encoder(shuffled), encoder(obs))
    # ...but the tokens' content matters: another observation gives other features.
    assert not torch.allclose(encoder(token_observations(5, 24, 12, seed=1)), encoder(obs))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_padding_rows_are_ignored_whatever_they_hold_and_however_many(pooling):
    torch.manual_seed(0)
    short, long = TokenEncoder(group(16), pooling=pooling), TokenEncoder(group(40), pooling=pooling)
    long.load_state_dict(short.state_dict())
    obs = token_observations(4, 16, 9)
    padded = torch.cat([obs, torch.full((4, 24, 3), 255.0)], dim=1)
    torch.testing.assert_close(long(padded), short(obs))
    # A padding row is its location byte 0xFF: the rest of the row is never read.
    junk = obs.clone()
    junk[:, 9:, 1:] = torch.randint(0, 255, (4, 7, 2)).float()
    torch.testing.assert_close(short(junk), short(obs))


@pytest.mark.parametrize("pooling", POOLINGS)
def test_an_observation_without_tokens_pools_to_zeros(pooling):
    encoder = TokenEncoder(group(), pooling=pooling)
    empty = torch.full((3, 24, 3), 255.0)
    torch.testing.assert_close(encoder(empty), encoder.head(torch.zeros(3, encoder.hidden_size)))
    mixed = torch.cat([empty[:1], token_observations(1, 24, 5)])
    assert torch.isfinite(encoder(mixed)).all()


@pytest.mark.parametrize("pooling", ["max", "mean"])
def test_under_vmap_the_masked_path_gives_the_same_features(pooling):
    # TorchRL's GAE values observations through torch.vmap, where shapes cannot depend on data.
    encoder = TokenEncoder(group(), pooling=pooling)
    obs = token_observations(6, 24, 8).reshape(2, 3, 24, 3)
    obs[0, 1] = 255.0
    torch.testing.assert_close(torch.vmap(encoder)(obs), encoder(obs))


def test_gradients_reach_the_embeddings_of_present_tokens_only():
    encoder = TokenEncoder(group())
    obs = token_observations(2, 24, 4)
    encoder(obs).sum().backward()
    grad = encoder.feature_embedding.weight.grad
    used = set(obs[:, :4, 1].long().flatten().tolist())
    assert all(grad[f].abs().sum() > 0 for f in used)
    assert grad[255].abs().sum() == 0  # the padding rows' feature byte


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pooling": "sum"}, r"pooling: 'sum' is not one of \['max', 'mean', 'attention'\]"),
        ({"activation": "swish"}, "activation: 'swish'"),
        ({"hidden_size": 0}, "hidden_size: expected a positive integer, got 0"),
        ({"pooling": "attention", "hidden_size": 30, "num_heads": 4}, "num_heads: 4 does not divide hidden_size 30"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenEncoder(group(), **kwargs)


def test_observations_that_are_not_token_rows_are_refused():
    images = GroupSpec("agent", ("agent_0",), (0,), (7, 7, 3), "discrete", num_actions=5)
    with pytest.raises(ValueError, match=r"token observations \[num_tokens, 3\].*\(7, 7, 3\)"):
        TokenEncoder(images)


def test_a_policy_builds_it_from_class_path_and_init_args():
    spec = {"class_path": "lightmarl.policies.token_encoders.TokenEncoder", "init_args": {"hidden_size": 32}}
    assert isinstance(build_encoder(group(), spec, field="policy_kwargs.encoder"), TokenEncoder)
    policy = MLPActorCritic(group(), encoder=spec, critic="local")
    assert isinstance(policy.encoder, TokenEncoder) and policy.encoder.hidden_size == 32
