"""The pieces every algorithm shares: hyper-parameter dataclasses, metric means, the stepper's collectives."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from jsonargparse import ArgumentParser, set_parsing_settings

from lightmarl.algorithms import DDPG, DQN, PPO, QMIX, SAC, VDN, MetricMeans, PlainStepper, optimize
from lightmarl.algorithms.faults import NonFiniteGuard

ALGORITHMS = [PPO, DQN, DDPG, SAC, QMIX, VDN]


@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=lambda a: a.__name__)
def test_every_hyperparameter_is_declared_once_with_a_help_line(algorithm):
    set_parsing_settings(docstring_parse_attribute_docstrings=True)
    parser = ArgumentParser()
    parser.add_class_arguments(algorithm, "algorithm")
    fields = {f.name for f in dataclasses.fields(algorithm)}
    helps = {a.dest.removeprefix("algorithm."): a.help for a in parser._actions if a.dest.startswith("algorithm.")}
    for name in fields:
        assert helps.get(name) and not helps[name].startswith("(type:"), (name, helps.get(name))
    # The fields are the constructor: a value given is the value kept, and checks run on construction.
    assert algorithm(gamma=0.5).gamma == 0.5
    with pytest.raises(ValueError, match=r"algorithm\.gamma: invalid value 2"):
        algorithm(gamma=2)


def test_metric_means_average_over_steps_and_keep_non_finite_means():
    means = MetricMeans()
    means.add({"loss": torch.tensor([1.0, 3.0]), "count": torch.tensor(3), "empty": torch.zeros(0), "q": 1.0})
    means.add({"loss": torch.tensor(4.0), "nan": torch.tensor(float("nan")), "inf": torch.tensor(float("inf"))})
    result = means.means()
    # A NaN loss must show in the logs as NaN, not vanish from them.
    assert {k: v for k, v in result.items() if math.isfinite(v)} == {"loss": 3.0, "q": 0.5}
    assert math.isnan(result["nan"]) and result["inf"] == math.inf and means.steps == 2


def test_optimize_steps_on_the_sum_of_the_loss_terms_only():
    weight = torch.nn.Parameter(torch.tensor(1.0))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    terms = {"loss_a": 2 * weight, "loss_b": weight, "diagnostic": 100 * weight}
    assert optimize(terms, optimizer, PlainStepper(), [weight], max_grad_norm=None, guard=NonFiniteGuard("b"))
    assert float(weight.detach()) == pytest.approx(1.0 - 0.1 * 3)
    assert PlainStepper().agree_min(7) == 7  # one process: nothing to agree with


@pytest.mark.parametrize("clip_each_group", [False, True])
def test_clipping_takes_the_joint_norm_or_each_parameter_groups_own(clip_each_group):
    # Two networks in two parameter groups: a large gradient (norm 30) and a small one (norm 0.5).
    big, small = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([{"params": [big]}, {"params": [small]}], lr=1.0)
    terms = {
        "loss_big": -(torch.tensor([18.0, 24.0]) * big).sum(),
        "loss_small": -(torch.tensor([0.3, 0.4]) * small).sum(),
    }
    stepper = PlainStepper()
    assert optimize(
        terms, optimizer, stepper, [big, small], 5.0, guard=NonFiniteGuard("b"), clip_each_group=clip_each_group
    )
    joint = math.hypot(30.0, 0.5)
    if clip_each_group:
        # BenchMARL's way (an optimizer per loss term): each network to 5 by its own norm; the small one untouched.
        assert float(big.detach().norm()) == pytest.approx(5.0, rel=1e-5)
        assert small.detach().tolist() == pytest.approx([0.3, 0.4])
    else:
        # One norm over both: the large gradient shrinks the small network's step too.
        assert float(big.detach().norm()) == pytest.approx(30.0 * 5.0 / joint, rel=1e-5)
        assert float(small.detach().norm()) == pytest.approx(0.5 * 5.0 / joint, rel=1e-5)
