"""MultiDiscrete actions end to end: MultiCategorical, scripted policies, the env layer, PPO."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch.distributions import Categorical, kl_divergence
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import MLP, ProbabilisticActor

from expectations import assert_finite_metrics
from lightmarl.algorithms import PPO, IndependentMARLTrainer, PlainStepper
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import GroupSpec, PettingZooEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, NoOpPolicy, Policy, UniformRandomPolicy
from lightmarl.policies.distributions import MultiCategorical, discrete_distribution
from lightmarl.population import BindingTable

NVEC = (3, 4)
MATCH = "lightmarl.envs.testing.match.parallel_env"


def match_config(num_envs=4, **kwargs) -> PettingZooEnvConfig:
    return PettingZooEnvConfig(env_fn=MATCH, env_kwargs={"nvec": list(NVEC), **kwargs}, num_envs=num_envs)


class MultiDiscreteActorCritic(Policy):
    """The smallest PPO-trainable policy for any discrete group: an MLP head over ``num_actions``
    logits, the distribution from :func:`discrete_distribution`, a local critic."""

    has_critic = True
    critic_kind = "local"

    def __init__(self, group: GroupSpec, hidden: int = 32) -> None:
        super().__init__(group)
        distribution_class, distribution_kwargs = discrete_distribution(group)
        in_keys = {"logits": self.key("logits")}
        if group.has_action_mask:
            in_keys["mask"] = self.key("action_mask")
        size = math.prod(group.observation_shape)
        self.actor = ProbabilisticActor(
            TensorDictModule(
                MLP(size, group.num_actions, num_cells=[hidden]),
                in_keys=[self.key("observation")],
                out_keys=[self.key("logits")],
            ),
            in_keys=in_keys,
            out_keys=[self.key("action")],
            distribution_class=distribution_class,
            distribution_kwargs=distribution_kwargs,
            return_log_prob=True,
            log_prob_key=self.key("action_log_prob"),
        )
        self.critic = TensorDictModule(
            MLP(size, 1, num_cells=[hidden]), in_keys=[self.key("observation")], out_keys=[self.key("state_value")]
        )

    def forward(self, tensordict):
        return self.actor(tensordict)


# -- the distribution ---------------------------------------------------------------------------


def test_log_prob_and_entropy_are_sums_over_independent_sub_actions():
    logits = torch.randn(5, 2, sum(NVEC))
    dist = MultiCategorical(logits, NVEC)
    parts = [Categorical(logits=p) for p in logits.split(NVEC, -1)]
    action = dist.sample()
    assert action.shape == (5, 2, 2) and action.dtype == torch.int64
    assert (action[..., 0] < 3).all() and (action[..., 1] < 4).all()
    torch.testing.assert_close(
        dist.log_prob(action), parts[0].log_prob(action[..., 0]) + parts[1].log_prob(action[..., 1])
    )
    torch.testing.assert_close(dist.entropy(), parts[0].entropy() + parts[1].entropy())
    assert torch.equal(dist.mode, torch.stack([p.logits.argmax(-1) for p in parts], -1))
    assert dist.sample((7,)).shape == (7, 5, 2, 2)
    torch.testing.assert_close(kl_divergence(dist, dist), torch.zeros(5, 2))


def test_masked_choices_are_never_sampled_and_stay_finite():
    mask = torch.tensor([[True, False, True, False, False, True, False], [False, False, False, True, True, True, True]])
    dist = MultiCategorical(torch.zeros(2, 7), NVEC, mask=mask)
    samples = dist.sample((2000,))
    assert set(samples[:, 0, 0].tolist()) == {0, 2} and set(samples[:, 0, 1].tolist()) == {2}
    # Row 1's first sub-action has no legal choice (an absent agent's empty mask): finite, no NaN.
    assert torch.isfinite(dist.entropy()).all() and torch.isfinite(dist.log_prob(samples)).all()
    torch.testing.assert_close(dist.entropy()[0], torch.tensor(math.log(2)))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"expected sum\(nvec\) = 7"):
        MultiCategorical(torch.zeros(6), NVEC)
    with pytest.raises(ValueError, match="nvec must be positive"):
        MultiCategorical(torch.zeros(0), ())
    continuous = GroupSpec("agent", ("agent_0",), (0,), (3,), "continuous", action_shape=(2,))
    with pytest.raises(ValueError, match="group 'agent' has continuous actions"):
        discrete_distribution(continuous)


def test_probabilistic_actor_samples_under_random_and_takes_the_mode_otherwise():
    group = match_config().spec().groups["agent"]
    assert group.action_kind == "multi_discrete" and group.action_nvec == NVEC and group.num_actions == 7
    policy = MultiDiscreteActorCritic(group)
    td = TensorDict(
        {"agent": {"observation": torch.rand(6, 2, 7), "action_mask": torch.ones(6, 2, 7, dtype=torch.bool)}},
        batch_size=[6],
    )
    td["agent"].batch_size = torch.Size([6, 2])
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        out = policy(td.clone())
    assert torch.equal(out["agent", "action"], MultiCategorical(out["agent", "logits"], NVEC).mode)
    with set_exploration_type(ExplorationType.RANDOM):
        out = policy(td.clone())
    assert out["agent", "action"].shape == (6, 2, 2)
    assert out["agent", "action_log_prob"].shape == (6, 2)
    expected = MultiCategorical(out["agent", "logits"], NVEC).log_prob(out["agent", "action"])
    torch.testing.assert_close(out["agent", "action_log_prob"], expected)


# -- scripted policies and the env layer --------------------------------------------------------


@pytest.mark.parametrize("policy_class", [UniformRandomPolicy, NoOpPolicy])
def test_scripted_policies_play_legal_multi_discrete_actions_through_the_env(policy_class):
    # MatchTarget raises on an illegal choice: ten steps of four copies prove the masks are respected.
    config = match_config(leave_probability=0.1)
    spec = config.spec()
    policy = policy_class(spec.groups["agent"])
    collector = RolloutCollector(
        config.make_vector(0), MultiAgentPolicy({"main": policy}, BindingTable(None, spec)), 10
    )
    experience = collector.collect()
    action = experience["agent", "action"]
    assert action.shape == (4, 10, 2, 2) and action.dtype == torch.int64
    assert (action[..., 0] < 3).all() and (action[..., 1] < 4).all()
    log_prob = experience["agent", "action_log_prob"]
    assert log_prob.shape == (4, 10, 2)
    if policy_class is UniformRandomPolicy:
        # Uniform over the legal choices of each sub-action (all of them where the mask is empty).
        mask = experience["agent", "action_mask"].bool()
        legal = [part.sum(-1) for part in mask.split([3, 4], dim=-1)]
        sizes = [torch.where(n > 0, n, full).float() for n, full in zip(legal, (3, 4))]
        torch.testing.assert_close(log_prob, -(sizes[0].log() + sizes[1].log()))
        assert len(action.unique()) > 1


def test_no_op_policy_takes_the_first_legal_choice_of_each_sub_action():
    group = match_config().spec().groups["agent"]
    mask = torch.tensor([[False, True, True, False, False, True, True]])
    assert NoOpPolicy(group).act(torch.zeros(1, 7), mask).tolist() == [[1, 2]]
    assert NoOpPolicy(group).act(torch.zeros(1, 7)).tolist() == [[0, 0]]


def test_a_policy_built_for_other_sub_action_sizes_is_rejected():
    group = match_config().spec().groups["agent"]
    other = PettingZooEnvConfig(env_fn=MATCH, env_kwargs={"nvec": [4, 3]}).spec().groups["agent"]
    with pytest.raises(ValueError, match="was built for"):
        NoOpPolicy(group).initialize_to_environment(other)


# -- PPO -----------------------------------------------------------------------------------------


def test_ppo_updates_a_multi_discrete_policy():
    config = match_config(leave_probability=0.1)
    spec = config.spec()
    table = BindingTable(None, spec)
    policy = MultiDiscreteActorCritic(spec.groups["agent"])
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 8)
    trainer = IndependentMARLTrainer(table, {"main": policy}, {"main": PPO(minibatch_size=8, epochs=2)})
    assert trainer.unit_trainers["main"].flavour == "IPPO"
    optimizers = trainer.make_optimizers()
    before = [p.detach().clone() for p in policy.actor.parameters()]
    for _ in range(2):
        experience = collector.collect()
        metrics = trainer.update(experience, optimizers, PlainStepper())["main"]
    assert experience["agent", "action_log_prob"].shape == (4, 8, 2)
    assert_finite_metrics(metrics)
    # PPO's entropy bonus is the analytic sum over sub-actions: at most log 3 + log 4.
    assert 0 < metrics["entropy"] <= math.log(3) + math.log(4) + 1e-4
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.actor.parameters()))


def test_mlp_actor_critic_acts_and_trains_on_multi_discrete_actions():
    config = match_config()
    spec = config.spec()
    table = BindingTable(None, spec)
    for critic in ("centralized", "local"):
        policy = MLPActorCritic(spec.groups["agent"], critic=critic)
        collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 8)
        trainer = IndependentMARLTrainer(table, {"main": policy}, {"main": PPO(minibatch_size=8, epochs=1)})
        experience = collector.collect()
        assert experience["agent", "action"].shape == (4, 8, 2, 2)
        metrics = trainer.update(experience, trainer.make_optimizers(), PlainStepper())["main"]
        assert_finite_metrics(metrics)


@pytest.mark.slow
def test_ppo_learns_to_hit_multi_discrete_targets():
    torch.manual_seed(0)
    config = match_config(num_envs=8, leave_probability=0.05)
    spec = config.spec()
    table = BindingTable(None, spec)
    policy = MultiDiscreteActorCritic(spec.groups["agent"])
    collector = RolloutCollector(config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 16)
    trainer = IndependentMARLTrainer(table, {"main": policy}, {"main": PPO(lr=3e-3, minibatch_size=64, epochs=4)})
    optimizers = trainer.make_optimizers()
    rewards = []
    for _ in range(40):
        experience = collector.collect()
        rewards.append(float(experience["next", "agent", "reward"][experience["agent", "valid"]].mean()))
        trainer.update(experience, optimizers, PlainStepper())
    # Random legal play hits about 0.53 of the sub-actions; measured: 0.51 at first, 0.80 at the 40th rollout.
    assert sum(rewards[:3]) / 3 < 0.6
    assert sum(rewards[-5:]) / 5 > 0.7


@pytest.mark.parametrize("masked", [False, True])
def test_scripted_actions_go_where_the_rows_are(masked):
    # A GPU trainer collects on the GPU while a script samples on the CPU with its own generator;
    # "meta" stands in for the GPU here (tests/test_cli.py runs every recipe on a real one).
    group = match_config().spec().groups["agent"]
    rows = {"observation": torch.zeros(5, 2, 7, device="meta")}
    if masked:
        rows["action_mask"] = torch.ones(5, 2, 7, dtype=torch.bool, device="meta")
    for policy in (UniformRandomPolicy(group, seed=0), NoOpPolicy(group)):
        if masked and isinstance(policy, UniformRandomPolicy):
            continue  # its masked sampling reads the mask's values, which a meta tensor does not have
        out = policy(TensorDict({"agent": TensorDict(rows, batch_size=[5, 2])}, batch_size=[]))
        assert out["agent", "action"].is_meta and out["agent", "action_log_prob"].is_meta
