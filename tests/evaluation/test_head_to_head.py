"""Head-to-head payoff matrix and ratings from scripted game results."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from lightmarl.evaluation import head_to_head as head_to_head_module
from lightmarl.evaluation.head_to_head import PayoffMatrix, payoff_matrix, summarize_games
from lightmarl.ratings import elo_from_results


def swapped(home: str, away: str, result: str, times: int = 1) -> list[tuple[str, str, str]]:
    """``times`` games with ``home`` at home, and as many with the seats swapped, same winner."""
    mirrored = {"win": "loss", "loss": "win", "draw": "draw"}[result]
    return [(home, away, result), (away, home, mirrored)] * times


# strong always beats mid and weak; mid beats weak 3 of 4 and draws the 4th; weak never played itself.
GAMES = (
    swapped("strong", "mid", "win", 2)
    + swapped("strong", "weak", "win", 2)
    + swapped("mid", "weak", "win", 3)
    + swapped("mid", "weak", "draw", 1)
)


def test_module_examples():
    assert doctest.testmod(head_to_head_module).failed == 0


def test_payoff_is_antisymmetric_where_played():
    payoff = payoff_matrix(GAMES)
    assert payoff.players == ["strong", "mid", "weak"]
    score = payoff.score
    played = payoff.games > 0
    off_diagonal = played & ~np.eye(3, dtype=bool)
    np.testing.assert_allclose((score + score.T)[off_diagonal], 1.0)
    np.testing.assert_array_equal(payoff.games, payoff.games.T)
    np.testing.assert_array_equal(payoff.wins, payoff.losses.T)
    np.testing.assert_array_equal(payoff.draws, payoff.draws.T)
    assert np.isnan(np.diag(score)).all()  # nobody played themselves
    assert payoff.score_of("strong", "mid") == 1.0
    assert payoff.score_of("mid", "weak") == pytest.approx((6 + 0.5 * 2) / 8)
    assert payoff.score_of("weak", "mid") == pytest.approx(1 - 7 / 8)
    assert (payoff.wins[1, 2], payoff.draws[1, 2], payoff.losses[1, 2], payoff.games[1, 2]) == (6, 2, 0, 8)


def test_scripted_draws_and_wins_count_per_side():
    # A scripted always-draw and a scripted always-win: draws are half a win for *both* sides.
    payoff = payoff_matrix(swapped("a", "b", "draw", 3) + swapped("c", "d", "win", 2), players=["a", "b", "c", "d"])
    assert payoff.score_of("a", "b") == payoff.score_of("b", "a") == 0.5
    assert payoff.score_of("c", "d") == 1.0 and payoff.score_of("d", "c") == 0.0
    assert np.isnan(payoff.score_of("a", "c"))  # never played
    # Fractional scores (e.g. a points share) are averaged but not counted as W/D/L.
    fractional = payoff_matrix([("a", "b", 0.8)])
    assert fractional.score_of("a", "b") == pytest.approx(0.8) and fractional.wins.sum() == 0


def test_self_play_games_sit_on_the_diagonal():
    payoff = payoff_matrix([("a", "a", "win"), ("a", "b", "loss")])
    assert payoff.games[0, 0] == 2 and payoff.score_of("a", "a") == 0.5


def test_unknown_player_is_named():
    with pytest.raises(ValueError, match=r"players \['ghost'\]"):
        payoff_matrix([("a", "ghost", "win")], players=["a"])
    with pytest.raises(ValueError, match="game result"):
        payoff_matrix([("a", "b", "victory")])


def test_ratings_order_and_come_from_the_shared_module():
    result = summarize_games(GAMES)
    elo = result.elo
    assert elo["strong"] > elo["mid"] > elo["weak"]
    assert elo == pytest.approx(elo_from_results(GAMES))
    assert sum(elo.values()) == pytest.approx(3 * 1000.0)  # Elo is zero-sum
    ordinals = {player: mu - 3 * sigma for player, (mu, sigma) in result.openskill.items()}
    assert ordinals["strong"] > ordinals["mid"] > ordinals["weak"]
    unrated = summarize_games([("a", "b", "win")], players=["a", "b", "idle"])
    assert unrated.elo["idle"] == 1000.0


def test_payoff_dict_round_trip():
    payoff = payoff_matrix(GAMES)
    data = payoff.to_dict()
    assert data["score"][2][2] is None
    again = PayoffMatrix.from_dict(data)
    np.testing.assert_array_equal(again.games, payoff.games)
    np.testing.assert_allclose(again.score, payoff.score)
    assert again.to_dict() == data
