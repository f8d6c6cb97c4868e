from __future__ import annotations

import math

import pytest

from lightmarl.ratings import (
    EloRatings,
    SkillRatings,
    elo_expected,
    elo_from_results,
    elo_update,
    openskill_model,
    ordinal,
    rate_teams,
    score,
)

MU, SIGMA, BETA, TAU = 25.0, 25.0 / 3.0, 25.0 / 6.0, 25.0 / 300.0


def test_scores():
    assert [score("win"), score("draw"), score("loss"), score(0.25)] == [1.0, 0.5, 0.0, 0.25]
    with pytest.raises(ValueError, match="tie"):
        score("tie")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        score(2.0)


def test_elo_hand_computed():
    assert elo_expected(1000, 1000) == 0.5
    expected = 1 / (1 + 10 ** (-200 / 400))  # 0.7597...
    assert elo_expected(1200, 1000) == pytest.approx(expected)
    assert elo_update(1000, 1000, "win") == (1016.0, 984.0)
    assert elo_update(1000, 1000, "draw") == (1000.0, 1000.0)
    a, b = elo_update(1200, 1000, "loss")
    assert a == pytest.approx(1200 - 32 * expected)
    assert b == pytest.approx(1000 + 32 * expected)


def test_elo_table_updates_and_state_round_trip():
    table = EloRatings(initial=1500, k=16)
    table.update("a", "b", "win")
    assert table["a"] == 1508 and table["b"] == 1492
    assert table["c"] == 1500 and "c" not in table
    table.update("a", "a", "win")  # self-play carries no information
    assert table["a"] == 1508
    restored = EloRatings()
    restored.load_state_dict(table.state_dict())
    assert restored.as_dict() == {"a": 1508.0, "b": 1492.0}
    assert list(elo_from_results([("a", "b", "win"), ("b", "c", "win")])) == ["a", "b", "c"]
    ratings = elo_from_results([("a", "b", "win"), ("b", "c", "win")])
    # b: 1000 - 16 = 984 then beats c (1000): +32 * (1 - E(984 vs 1000))
    assert ratings["b"] == pytest.approx(984 + 32 * (1 - elo_expected(984, 1000)))
    with pytest.raises(ValueError, match="k > 0"):
        EloRatings(k=0)


def test_openskill_plackett_luce_1v1_matches_the_formula():
    # Weng & Lin 2011, Plackett-Luce with two players of equal prior: the winner gains
    # sigma'^2 / c * (1 - p) with p = 1/2, where sigma'^2 = sigma^2 + tau^2 and c^2 = 2 sigma'^2 + 2 beta^2.
    variance = SIGMA**2 + TAU**2
    c = math.sqrt(2 * variance + 2 * BETA**2)
    (winner,), (loser,) = rate_teams([[(MU, SIGMA)], [(MU, SIGMA)]], ranks=[1, 2])
    assert winner[0] == pytest.approx(MU + variance / c * 0.5)
    assert loser[0] == pytest.approx(MU - variance / c * 0.5)
    assert winner[1] == pytest.approx(loser[1]) and winner[1] < SIGMA
    (drawn,), _ = rate_teams([[(MU, SIGMA)], [(MU, SIGMA)]], ranks=[1, 1])
    assert drawn[0] == pytest.approx(MU)


def test_openskill_teams_and_scores():
    teams = rate_teams([[(MU, SIGMA), (MU, SIGMA)], [(MU, SIGMA)]], scores=[0, 10])
    (a, b), (c,) = teams
    assert a == pytest.approx(b)  # same prior, same team, same update
    assert a[0] < MU < c[0]
    three = rate_teams([[(MU, SIGMA)], [(MU, SIGMA)], [(MU, SIGMA)]], ranks=[1, 2, 3])
    assert three[0][0][0] > three[1][0][0] > three[2][0][0]
    with pytest.raises(ValueError, match="exactly one"):
        rate_teams([[(MU, SIGMA)], [(MU, SIGMA)]])
    with pytest.raises(ValueError, match="two non-empty"):
        rate_teams([[(MU, SIGMA)]], ranks=[1])
    with pytest.raises(ValueError, match="Glicko"):
        openskill_model("Glicko")


def test_skill_table():
    table = SkillRatings()
    table.update_1v1("a", "b", "win")
    expected = rate_teams([[(MU, SIGMA)], [(MU, SIGMA)]], ranks=[0, 1])
    assert table["a"] == pytest.approx(expected[0][0])
    assert table["b"] == pytest.approx(expected[1][0])
    assert table.ordinal("a") == pytest.approx(ordinal(*table["a"]))
    before = table["a"]
    table.update([["a"], ["a"]], ranks=[0, 1])
    assert table["a"] == before
    restored = SkillRatings()
    restored.load_state_dict(table.state_dict())
    assert restored["a"] == table["a"] and restored["b"] == table["b"]
