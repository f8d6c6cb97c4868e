"""Evaluation statistics against hand-computed cases and against scipy.stats."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from lightmarl.evaluation import statistics
from lightmarl.evaluation.statistics import (
    ScenarioEpisodes,
    bootstrap_interval,
    summarize_episodes,
    summarize_outcomes,
    summarize_values,
    t_interval,
    t_quantile,
    wilson_interval,
)


def test_module_examples():
    assert doctest.testmod(statistics).failed == 0


def test_t_quantile_fixed_values():
    # Printed t tables: t(0.975; 1) = 12.706, t(0.975; 4) = 2.776, t(0.975; 30) = 2.042, t(0.995; 10) = 3.169.
    assert t_quantile(0.975, 1) == pytest.approx(12.7062047, abs=1e-6)
    assert t_quantile(0.975, 4) == pytest.approx(2.7764451, abs=1e-6)
    assert t_quantile(0.975, 30) == pytest.approx(2.0422725, abs=1e-6)
    assert t_quantile(0.995, 10) == pytest.approx(3.1692727, abs=1e-6)
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-12)
    assert t_quantile(0.025, 4) == pytest.approx(-t_quantile(0.975, 4))
    # Large df tends to the normal quantile.
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)
    with pytest.raises(ValueError, match="probability"):
        t_quantile(1.0, 3)


def test_t_quantile_matches_scipy():
    from scipy import stats

    for df in (1, 2, 3, 5, 9, 29, 100, 0.5, 2.5, 1e5):
        for probability in (1e-6, 0.01, 0.2, 0.6, 0.9, 0.975, 0.9995):
            assert t_quantile(probability, df) == pytest.approx(stats.t.ppf(probability, df), rel=1e-9, abs=1e-9)


def test_t_interval_hand_computed():
    # mean 2.5, s = 1.2910, s / sqrt(4) = 0.6455, t(0.975; 3) = 3.1824: 2.5 ± 2.0543.
    low, high = t_interval([1.0, 2.0, 3.0, 4.0])
    assert (low, high) == pytest.approx((0.4457397, 4.5542603), abs=1e-6)
    low90, high90 = t_interval([1.0, 2.0, 3.0, 4.0], confidence=0.9)
    assert low < low90 < high90 < high
    assert all(math.isnan(v) for v in t_interval([3.0]))
    with pytest.raises(ValueError, match="confidence"):
        t_interval([1.0, 2.0], confidence=95)
    with pytest.raises(ValueError, match="finite"):
        t_interval([1.0, float("nan")])


def test_t_interval_matches_scipy():
    from scipy import stats

    values = np.random.default_rng(3).gamma(0.5, 10.0, size=17)
    expected = stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    assert t_interval(values) == pytest.approx(expected, rel=1e-9)


def test_t_interval_covers_at_its_nominal_rate():
    rng = np.random.default_rng(0)
    covered = sum(low <= 0.0 <= high for low, high in (t_interval(rng.normal(size=8)) for _ in range(2000)))
    assert 0.93 < covered / 2000 < 0.97


def test_bootstrap_interval_is_seeded_and_sensible():
    values = np.random.default_rng(1).normal(size=13)
    first = bootstrap_interval(values, seed=0)
    assert bootstrap_interval(values, seed=0) == first
    assert bootstrap_interval(values, seed=1) != first
    # Regression value of numpy's PCG64 stream: a change here means the resampling changed.
    assert first == pytest.approx((-0.2007265, 0.4656604), abs=1e-6)
    assert bootstrap_interval([2.0, 2.0, 2.0]) == (2.0, 2.0)
    assert bootstrap_interval([5.0]) == (5.0, 5.0)
    assert all(math.isnan(v) for v in bootstrap_interval([]))
    # Many normal values: bootstrap and t intervals agree closely; chunked resampling gives all draws.
    many = np.random.default_rng(2).normal(size=2000)
    assert bootstrap_interval(many, resamples=2000) == pytest.approx(t_interval(many), abs=0.01)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_interval(values, resamples=0)


def test_bootstrap_interval_agrees_with_scipy_percentile_bootstrap():
    from scipy import stats

    values = np.random.default_rng(4).exponential(size=40)
    ours = bootstrap_interval(values, resamples=20_000)
    theirs = stats.bootstrap((values,), np.mean, method="percentile", n_resamples=20_000, random_state=0)
    # Different random streams: the end points agree to Monte Carlo error.
    assert ours == pytest.approx(tuple(theirs.confidence_interval), abs=0.03)


def test_wilson_interval_hand_computed():
    rate = wilson_interval(7, 10)
    assert (rate.count, rate.n, rate.rate) == (7, 10, 0.7)
    assert (rate.ci_low, rate.ci_high) == pytest.approx((0.3967781, 0.8922087), abs=1e-6)
    none = wilson_interval(0, 10)
    assert none.ci_low == 0.0 and none.ci_high == pytest.approx(0.2775328, abs=1e-6)
    every = wilson_interval(10, 10)
    assert every.ci_high == 1.0 and every.ci_low == pytest.approx(0.7224672, abs=1e-6)
    assert math.isnan(wilson_interval(0, 0).rate)
    assert wilson_interval(0, 0).to_dict() == {"count": 0, "n": 0, "rate": None, "ci_low": None, "ci_high": None}
    with pytest.raises(ValueError, match="count"):
        wilson_interval(11, 10)


def test_wilson_interval_matches_scipy():
    from scipy import stats

    for count, n in ((0, 1), (1, 1), (3, 7), (50, 100), (99, 100), (1, 1000)):
        expected = stats.binomtest(count, n).proportion_ci(confidence_level=0.9, method="wilson")
        rate = wilson_interval(count, n, confidence=0.9)
        assert (rate.ci_low, rate.ci_high) == pytest.approx((expected.low, expected.high), abs=1e-12)


def test_summarize_values_both_methods():
    values = [1.0, 2.0, 3.0, 4.0]
    t = summarize_values(values)
    assert (t.mean, t.n, t.method, t.confidence) == (2.5, 4, "t", 0.95)
    assert t.std == pytest.approx(1.2909944)
    assert (t.ci_low, t.ci_high) == pytest.approx(t_interval(values))
    boot = summarize_values(values, interval="bootstrap", seed=5, resamples=500)
    assert (boot.ci_low, boot.ci_high) == bootstrap_interval(values, seed=5, resamples=500)
    assert boot.to_dict()["method"] == "bootstrap"
    one = summarize_values([3.0])
    assert one.to_dict() == {
        "n": 1,
        "mean": 3.0,
        "std": None,
        "ci_low": None,
        "ci_high": None,
        "method": "t",
        "confidence": 0.95,
    }
    with pytest.raises(ValueError, match="interval"):
        summarize_values(values, interval="normal")  # type: ignore[arg-type]


def test_outcomes_per_seat():
    outcomes = ["win", "win", "draw", "loss", "win", "loss"]
    seats = ["first", "second", "first", "second", "first", "second"]
    summary = summarize_outcomes(outcomes, seats)
    assert summary.n == 6
    assert (summary.win.count, summary.draw.count, summary.loss.count) == (3, 1, 2)
    assert summary.win.rate == pytest.approx(0.5)
    assert (summary.win.ci_low, summary.win.ci_high) == pytest.approx(
        (wilson_interval(3, 6).ci_low, wilson_interval(3, 6).ci_high)
    )
    assert set(summary.by_seat) == {"first", "second"}
    first, second = summary.by_seat["first"], summary.by_seat["second"]
    assert (first.win.count, first.draw.count, first.loss.count, first.n) == (2, 1, 0, 3)
    assert (second.win.count, second.draw.count, second.loss.count, second.n) == (1, 0, 2, 3)
    assert "by_seat" not in summarize_outcomes(outcomes).to_dict()
    with pytest.raises(ValueError, match=r"\['tie'\]"):
        summarize_outcomes(["win", "tie"])
    with pytest.raises(ValueError, match="seats"):
        summarize_outcomes(["win"], ["first", "second"])


def test_summarize_episodes_per_binding_with_info_fields():
    episodes = ScenarioEpisodes(
        returns={"learner": [1.0, 3.0, 2.0], "npc": [0.0, -1.0, 1.0]},
        lengths={"learner": [10, 12, 14], "npc": [10, 12, 14]},
        outcomes={"learner": ["win", "win", "draw"], "npc": ["loss", "loss", "draw"]},
        seats={"learner": ["p0", "p1", "p0"], "npc": ["p1", "p0", "p1"]},
        info={"learner": {"score": [5.0, float("nan"), 7.0], "label": ["a", "b", "c"]}},
    )
    summaries = summarize_episodes(episodes)
    learner = summaries["learner"]
    assert learner.episode_return.mean == pytest.approx(2.0)
    assert learner.episode_length.mean == pytest.approx(12.0)
    assert learner.outcomes is not None and learner.outcomes.win.count == 2
    assert set(learner.outcomes.by_seat) == {"p0", "p1"}
    # NaN means "not reported": the score's n counts the two episodes that reported it.
    assert set(learner.info) == {"score"}
    assert (learner.info["score"].n, learner.info["score"].mean) == (2, 6.0)
    assert summaries["npc"].info == {}
    as_dict = learner.to_dict()
    assert set(as_dict) == {"episode_return", "episode_length", "outcomes", "info"}
    no_winner = summarize_episodes(ScenarioEpisodes(returns={"a": [1.0]}, lengths={"a": [3]}))
    assert no_winner["a"].outcomes is None and no_winner["a"].to_dict()["outcomes"] is None


def test_scenario_episodes_validation_names_the_field():
    with pytest.raises(ValueError, match="no bindings"):
        ScenarioEpisodes(returns={}, lengths={})
    with pytest.raises(ValueError, match=r"lengths\['a'\]: 2 values for 3"):
        ScenarioEpisodes(returns={"a": [1.0, 2.0, 3.0]}, lengths={"a": [1, 2]})
    with pytest.raises(ValueError, match="lengths: missing bindings"):
        ScenarioEpisodes(returns={"a": [1.0], "b": [1.0]}, lengths={"a": [1]})
    with pytest.raises(ValueError, match=r"outcomes: bindings \['c'\] have no returns"):
        ScenarioEpisodes(returns={"a": [1.0]}, lengths={"a": [1]}, outcomes={"c": ["win"]})
    with pytest.raises(ValueError, match="seats need outcomes"):
        ScenarioEpisodes(returns={"a": [1.0]}, lengths={"a": [1]}, seats={"a": ["p0"]})
    with pytest.raises(ValueError, match=r"info.score\['a'\]"):
        ScenarioEpisodes(returns={"a": [1.0]}, lengths={"a": [1]}, info={"a": {"score": [1.0, 2.0]}})
    with pytest.raises(ValueError, match="info field 'score' of binding 'a'"):
        summarize_episodes(
            ScenarioEpisodes(returns={"a": [1.0]}, lengths={"a": [1]}, info={"a": {"score": [float("inf")]}})
        )
