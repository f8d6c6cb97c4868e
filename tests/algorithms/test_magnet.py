"""Magnetic mirror descent (PPO's ``magnet``): the KL term, its gradient, the magnet's schedule, its config."""

from __future__ import annotations

import copy

import pytest
import torch

from lightmarl import keys
from lightmarl.algorithms import PPO, IndependentMARLTrainer, Magnet, MagnetLoss, PlainStepper
from lightmarl.algorithms.magnet import reverse_kl
from lightmarl.data.collector import RolloutCollector
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding


def learner(spread_config, magnet: Magnet, **ppo):
    spec = spread_config.spec()
    table = BindingTable([PolicyBinding("learner", class_path="x.y")], spec, ["learner"] * 3)
    policies = {"learner": MLPActorCritic(spec.groups["agent"])}
    trainer = IndependentMARLTrainer(table, policies, {"learner": PPO(magnet=magnet, **ppo)})
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 8)
    return trainer, policies["learner"], collector


def magnet_of(trainer: IndependentMARLTrainer) -> MagnetLoss:
    magnet = trainer.unit_trainers["learner"].magnet
    assert magnet is not None
    return magnet


def minibatch(loss: MagnetLoss, collector: RolloutCollector):
    """One rollout's rows as a flat minibatch with the magnet's row mask, as an update prepares it."""
    experience = collector.collect()
    mask = experience.get(("agent", keys.VALID))
    experience.set(("agent", "magnet_mask"), mask)
    return experience.reshape(-1)


def perturb(policy: torch.nn.Module, scale: float = 0.5) -> None:
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(scale * torch.randn_like(p))


def test_reverse_kl_is_zero_for_equal_distributions_and_positive_otherwise():
    log_p = torch.log_softmax(torch.randn(6, 5), -1)
    assert torch.allclose(reverse_kl(log_p, log_p), torch.zeros(6), atol=1e-6)
    log_q = torch.log_softmax(torch.randn(6, 5), -1)
    kl = reverse_kl(log_p, log_q)
    expected = (log_p.exp() * (log_p - log_q)).sum(-1)
    assert torch.allclose(kl, expected) and bool((kl > 0).all())
    # Illegal actions (probability 0 under the policy) add nothing, even where the magnet puts mass.
    masked = log_p.clone()
    masked[:, 0] = torch.finfo(masked.dtype).min
    masked = torch.log_softmax(masked, -1)
    assert torch.isfinite(reverse_kl(masked, log_q)).all()


def test_the_term_is_zero_when_policy_is_the_magnet_and_positive_once_they_differ(spread_config):
    trainer, policy, collector = learner(spread_config, Magnet(coeff=0.5))
    loss = magnet_of(trainer)
    batch = minibatch(loss, collector)
    prepared = type("Prepared", (), {"coeff": 0.5})()
    at_start = loss.loss(batch, prepared)
    assert float(at_start["loss_magnet"].detach()) == pytest.approx(0.0, abs=1e-7)
    perturb(policy)
    moved = loss.loss(batch, prepared)
    assert float(moved["kl_policy_magnet"]) > 1e-3
    assert float(moved["loss_magnet"].detach()) == pytest.approx(0.5 * float(moved["kl_policy_magnet"]))


def test_its_gradient_pulls_the_policy_towards_the_magnet(spread_config):
    trainer, policy, collector = learner(spread_config, Magnet(coeff=1.0))
    loss = magnet_of(trainer)
    batch = minibatch(loss, collector)
    prepared = type("Prepared", (), {"coeff": 1.0})()
    perturb(policy)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.05)
    before = float(loss.loss(batch, prepared)["kl_policy_magnet"])
    for _ in range(20):
        optimizer.zero_grad()
        loss.loss(batch, prepared)["loss_magnet"].backward()
        optimizer.step()
    after = float(loss.loss(batch, prepared)["kl_policy_magnet"])
    assert after < 0.8 * before, (before, after)
    # The magnet itself never learns: no gradient reaches it.
    assert all(p.grad is None for p in loss.magnet.parameters())


def test_the_magnet_mixes_towards_the_policy_on_its_schedule(spread_config):
    trainer, policy, collector = learner(spread_config, Magnet(coeff=0.1, mixing=0.25, update_every=2))
    loss = magnet_of(trainer)
    start = copy.deepcopy(loss.magnet.state_dict())
    perturb(policy)
    target = copy.deepcopy(policy.state_dict())
    loss.move_magnet()
    for name, value in loss.magnet.state_dict().items():
        assert torch.allclose(value, 0.75 * start[name] + 0.25 * target[name], atol=1e-6), name
    # Through updates: the magnet moves at updates 0, 2, 4 (before their gradient steps), not at 1, 3.
    loss.magnet_updates = 0
    optimizers = trainer.make_optimizers()
    moves = []
    for _ in range(5):
        before = copy.deepcopy(loss.magnet.state_dict())
        metrics = trainer.update(collector.collect(), optimizers, PlainStepper())
        moves.append(any(not torch.equal(v, before[k]) for k, v in loss.magnet.state_dict().items()))
    assert moves == [True, False, True, False, True]
    assert loss.magnet_updates == 3
    assert metrics["learner"]["magnet_rows"] == 8 * 4 * 3
    assert metrics["learner"]["kl_policy_magnet"] > 0


def test_mixing_one_makes_the_magnet_the_policy_that_collected(spread_config):
    trainer, policy, collector = learner(spread_config, Magnet(coeff=0.1, mixing=1.0), minibatch_size=8)
    loss = magnet_of(trainer)
    optimizers = trainer.make_optimizers()
    trainer.update(collector.collect(), optimizers, PlainStepper())
    collected_with = copy.deepcopy(policy.state_dict())
    trainer.update(collector.collect(), optimizers, PlainStepper())
    for name, value in loss.magnet.state_dict().items():
        assert torch.equal(value, collected_with[name]), name


def test_the_magnet_travels_with_the_trainer_state(spread_config):
    trainer, _, collector = learner(spread_config, Magnet(coeff=0.1, mixing=0.5))
    unit = trainer.unit_trainers["learner"]
    optimizers = trainer.make_optimizers()
    for _ in range(2):
        trainer.update(collector.collect(), optimizers, PlainStepper())
    state = copy.deepcopy(unit.state_dict())
    fresh, _, _ = learner(spread_config, Magnet(coeff=0.1, mixing=0.5))
    fresh_unit = fresh.unit_trainers["learner"]
    fresh_unit.load_state_dict(state)
    assert magnet_of(fresh).magnet_updates == 2
    for name, value in magnet_of(fresh).magnet.state_dict().items():
        assert torch.equal(value, magnet_of(trainer).magnet.state_dict()[name]), name


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"coeff": 0.0}, "algorithm.magnet.coeff"),
        ({"coeff": -0.1}, "algorithm.magnet.coeff"),
        ({"mixing": 0.0}, "algorithm.magnet.mixing"),
        ({"mixing": 1.5}, "algorithm.magnet.mixing"),
        ({"update_every": 0}, "algorithm.magnet.update_every"),
    ],
)
def test_bad_magnet_settings_name_the_field_and_value(settings, field):
    with pytest.raises(ValueError, match=rf"^{field}: invalid value"):
        Magnet(**settings)


def test_a_magnet_on_continuous_actions_is_refused_naming_the_binding():
    from lightmarl.envs import PettingZooEnvConfig
    from lightmarl.errors import ConfigError

    config = PettingZooEnvConfig(
        env_fn="mpe2.simple_spread_v3.parallel_env",
        env_kwargs={"N": 3, "max_cycles": 5, "continuous_actions": True},
        num_envs=2,
    )
    with pytest.raises(ConfigError, match=r"binding 'learner': algorithm.magnet: .* continuous actions"):
        learner(config, Magnet())
