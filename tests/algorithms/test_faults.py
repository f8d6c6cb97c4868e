"""Non-finite losses and gradients never reach the weights; divergence is named.

Unit checks of :mod:`lightmarl.algorithms.faults` and ``optimize``, then every algorithm of the
contract test fed NaN rewards: its update is skipped, its weights and optimizer state stay
bit-identical, and the NaN loss shows in its metrics.
"""

from __future__ import annotations

import logging
import math
import re

import pytest
import torch
from test_algorithm_contract import CASES, make_module

from lightmarl import keys
from lightmarl.algorithms import PPO, PlainStepper, optimize
from lightmarl.algorithms.faults import BASELINE_UPDATES, DivergenceWatch, NonFiniteGuard
from lightmarl.algorithms.off_policy import OffPolicyUnitTrainer
from lightmarl.data.collector import RolloutCollector
from lightmarl.errors import TrainingFault

NAN = float("nan")


def _adam_after_one_step() -> tuple[torch.nn.Parameter, torch.optim.Adam]:
    weight = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    optimizer = torch.optim.Adam([weight], lr=0.1)
    guard = NonFiniteGuard("main")
    assert optimize({"loss": (weight**2).sum()}, optimizer, PlainStepper(), [weight], 1.0, guard=guard)
    return weight, optimizer


def _snapshot(weight: torch.Tensor, optimizer: torch.optim.Optimizer) -> tuple[torch.Tensor, dict]:
    state = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in optimizer.state[weight].items()}
    return weight.detach().clone(), state


def _same(a: tuple[torch.Tensor, dict], b: tuple[torch.Tensor, dict]) -> bool:
    return torch.equal(a[0], b[0]) and a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


@pytest.mark.parametrize("bad", [NAN, math.inf], ids=["nan", "inf"])
def test_a_non_finite_loss_term_skips_the_step_and_names_binding_and_term(bad, caplog):
    weight, optimizer = _adam_after_one_step()
    before = _snapshot(weight, optimizer)
    guard = NonFiniteGuard("main")
    guard.begin_update()
    terms = {"loss_objective": weight.sum() * bad, "loss_critic": weight.sum(), "entropy": torch.tensor(NAN)}
    with caplog.at_level(logging.WARNING):
        assert not optimize(terms, optimizer, PlainStepper(), [weight], 1.0, guard=guard)
        assert guard.end_update() == {"skipped_steps": 1.0}
    assert _same(_snapshot(weight, optimizer), before)  # weights and Adam's moments and step untouched
    assert weight.grad is None
    assert "binding 'main': non-finite loss (loss_objective = " in caplog.text and "skipped 1 of 1" in caplog.text
    assert "loss_critic" not in caplog.text and "entropy" not in caplog.text  # finite terms / diagnostics
    # The next finite step learns as usual.
    assert optimize({"loss": (weight**2).sum()}, optimizer, PlainStepper(), [weight], 1.0, guard=guard)
    assert not torch.equal(weight.detach(), before[0])


def test_a_non_finite_gradient_of_a_finite_loss_skips_the_step():
    weight, optimizer = _adam_after_one_step()
    before = _snapshot(weight, optimizer)
    guard = NonFiniteGuard("main")
    guard.begin_update()
    # sqrt at 0: the loss is 0, its gradient infinite.
    terms = {"loss": torch.sqrt(weight[0] - weight.detach()[0])}
    assert not optimize(terms, optimizer, PlainStepper(), [weight], None, guard=guard)
    assert guard.skipped == 1 and _same(_snapshot(weight, optimizer), before) and weight.grad is None


def test_stop_raises_a_training_fault_naming_binding_and_term():
    weight, optimizer = _adam_after_one_step()
    before = _snapshot(weight, optimizer)
    with pytest.raises(
        TrainingFault, match=r"binding 'red': non-finite loss \(loss_qvalue = nan\).*on_nonfinite: stop"
    ):
        optimize({"loss_qvalue": weight.sum() * NAN}, optimizer, PlainStepper(), [weight], 1.0,
                 guard=NonFiniteGuard("red", "stop"))  # fmt: skip
    assert _same(_snapshot(weight, optimizer), before)
    sqrt_at_zero = {"loss": torch.sqrt(weight[0] - weight.detach()[0])}
    with pytest.raises(TrainingFault, match=r"binding 'red': non-finite gradient \(norm inf\)"):
        optimize(sqrt_at_zero, optimizer, PlainStepper(), [weight], 1.0, guard=NonFiniteGuard("red", "stop"))
    assert _same(_snapshot(weight, optimizer), before)


class _OtherRankBad(PlainStepper):
    """A stepper whose other process saw a non-finite loss: ``agree_min`` of the finite flag is 0."""

    def agree_min(self, value: int) -> int:
        return 0


def test_every_process_skips_when_one_saw_a_non_finite_loss():
    weight, optimizer = _adam_after_one_step()
    before = _snapshot(weight, optimizer)
    guard = NonFiniteGuard("main")
    assert not optimize({"loss": (weight**2).sum()}, optimizer, _OtherRankBad(), [weight], 1.0, guard=guard)
    assert guard.skipped == 1 and _same(_snapshot(weight, optimizer), before)


def test_divergence_watch_warns_after_patience_on_kl_and_critic_growth(caplog):
    watch = DivergenceWatch("main", {keys.KL_APPROX: 1.0}, max_loss_growth=100.0, patience=2)
    agree = PlainStepper().agree_min
    with caplog.at_level(logging.WARNING):
        assert watch.observe({keys.KL_APPROX: 5.0}, agree) == {"diverging": 0.0}  # once is not yet divergence
        assert watch.observe({keys.KL_APPROX: 0.01}, agree) == {"diverging": 0.0}  # the streak restarts
        assert not caplog.text
        watch.observe({keys.KL_APPROX: 1.8e7}, agree)
        assert watch.observe({keys.KL_APPROX: 1.8e7}, agree) == {"diverging": 1.0}
    assert "binding 'main' is diverging: kl_approx = 1.8e+07 > 1 for 2 updates in a row" in caplog.text
    # Critic growth, against the mean of its first updates (floored, so a loss starting at 0 does not trip it).
    watch = DivergenceWatch("blue", max_loss_growth=100.0, patience=1)
    for _ in range(BASELINE_UPDATES):
        assert watch.observe({"loss_critic": 0.0}, agree) == {"diverging": 0.0}
    assert watch.observe({"loss_critic": 0.5}, agree) == {"diverging": 0.0}  # 0.5 < 100 x 0.01
    assert watch.observe({"loss_critic": 5.0}, agree) == {"diverging": 1.0}
    stop = DivergenceWatch("blue", {keys.KL_APPROX: 1.0}, patience=1, policy="stop")
    with pytest.raises(TrainingFault, match=r"binding 'blue' is diverging: kl_approx = 3 > 1.*on_divergence: stop"):
        stop.observe({keys.KL_APPROX: 3.0}, agree)


def test_divergence_and_nonfinite_settings_are_checked():
    with pytest.raises(ValueError, match=r"algorithm\.on_nonfinite: invalid value 'ignore'"):
        PPO(on_nonfinite="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"algorithm\.divergence_patience: invalid value 0"):
        PPO(divergence_patience=0)
    with pytest.raises(ValueError, match=r"algorithm\.max_kl: invalid value -1"):
        PPO(max_kl=-1)


def _nan_reward_updates(name: str, on_nonfinite: str = "skip"):
    """The contract case ``name`` updated on rollouts where env copy 0's rewards are all NaN."""
    torch.manual_seed(0)
    case = CASES[name]
    module = make_module(case)
    module.setup("fit")
    trainer = module.marl_trainer
    unit = trainer.unit_trainers["learner"]
    unit.guard.policy = on_nonfinite
    collector = RolloutCollector(module.env_config.make_vector(seed=0), module.population, rollout_steps=10)
    optimizers = trainer.make_optimizers()
    params = dict(module.policies.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    metrics: dict[str, float] = {}
    try:
        for _ in range(case.updates):
            experience = collector.collect()
            reward = experience.get(("next", "adversary", keys.REWARD))
            reward[0] = NAN  # env copy 0: every step, every agent
            metrics = trainer.update(experience, optimizers, PlainStepper())["learner"]
    finally:
        collector.close()
    return unit, metrics, optimizers["learner"], before, params


OFF_POLICY = sorted(n for n in CASES if issubclass(type(CASES[n].algorithm()).trainer_class, OffPolicyUnitTrainer))
ON_POLICY = sorted(set(CASES) - set(OFF_POLICY))


@pytest.mark.parametrize("name", ON_POLICY)
def test_on_policy_algorithms_skip_an_update_on_nan_rewards_and_keep_their_weights(name, caplog):
    """A NaN reward (through the advantages) makes the loss NaN: nothing may move."""
    with caplog.at_level(logging.WARNING):
        unit, metrics, optimizer, before, params = _nan_reward_updates(name)
    assert metrics["skipped_steps"] >= 1, metrics
    assert any(k.startswith("loss") and math.isnan(v) for k, v in metrics.items()), metrics  # logged as NaN
    assert all(torch.equal(before[n], p.detach()) for n, p in params.items()), "weights moved"
    assert not optimizer.state, "the optimizer took a step"
    assert unit.guard.total_skipped >= 1
    assert "binding 'learner': non-finite loss" in caplog.text


@pytest.mark.parametrize("name", OFF_POLICY)
def test_off_policy_algorithms_keep_nan_transitions_out_of_replay_and_learn_from_the_rest(name, caplog):
    """A NaN reward in replay would make every later sampled loss NaN: such transitions never get in."""
    with caplog.at_level(logging.WARNING):
        unit, metrics, _, before, params = _nan_reward_updates(name)
    assert unit.guard.total_dropped > 0 and metrics["dropped_transitions"] > 0, metrics
    stored = unit.replay.storage[: len(unit.replay)]
    assert len(unit.replay) > 0
    assert all(bool(torch.isfinite(v).all()) for v in stored.values(True, True) if v.is_floating_point())
    assert metrics["skipped_steps"] == 0 and unit.grad_steps > 0, metrics
    assert any(not torch.equal(before[n], p.detach()) for n, p in params.items()), (
        "the finite transitions taught nothing"
    )
    assert re.search(
        r"binding 'learner': \d+ of \d+ transitions hold non-finite values \(in next/\S*reward\)", caplog.text
    )


def test_stop_refuses_a_nan_transition_before_it_reaches_replay():
    name = OFF_POLICY[0]
    with pytest.raises(TrainingFault, match=r"binding 'learner': \d+ of \d+ transitions hold non-finite values"):
        _nan_reward_updates(name, on_nonfinite="stop")
