from __future__ import annotations

import numpy as np
import pytest

from lightmarl.league import BattleRecordDict, BattleSharedPayoff, HistoricalPlayer, SoloSharedPayoff


def battle(decay: float = 1.0, min_games: float = 0.0, ids=("a", "b")) -> BattleSharedPayoff:
    payoff = BattleSharedPayoff(decay=decay, min_games=min_games)
    for player_id in ids:
        payoff.add_player(HistoricalPlayer(player_id))
    return payoff


def test_record_multiplication_decays_a_copy():
    record = BattleRecordDict(wins=2, draws=1, losses=1, games=4)
    decayed = record * 0.5
    assert decayed == {"wins": 1.0, "draws": 0.5, "losses": 0.5, "games": 2.0}
    assert 0.5 * record == decayed
    assert record == {"wins": 2, "draws": 1, "losses": 1, "games": 4}
    assert isinstance(decayed, BattleRecordDict)


def test_unplayed_pairs_read_empty_and_solo_keeps_the_last_results():
    payoff = battle()
    assert payoff.record("a", "b") == {"wins": 0, "draws": 0, "losses": 0, "games": 0}
    assert payoff.state_dict()["records"] == []  # reading a pair stores nothing
    recent = SoloSharedPayoff(buffer_size=2)
    recent.add_player(HistoricalPlayer("x"))
    recent.update("x", [1, 2, 3])
    assert recent.results("x") == [2, 3] and recent.results("nobody") == []


def test_table_holds_decayed_games_and_scores_row_against_column():
    payoff = battle(decay=0.5, ids=("a", "b", "c"))
    payoff.update("a", "b", ["win", "draw"])  # a-b: games 0.5 + 1, wins 0.5, draws 1
    score, games = payoff.table(["a", "b", "c"])
    assert games.tolist() == [[0.0, 1.5, 0.0], [1.5, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert score[0, 1] == pytest.approx((0.5 + 0.5) / 1.5) and score[1, 0] == pytest.approx(0.5 / 1.5)
    assert score[0, 1] + score[1, 0] == pytest.approx(1.0)
    played = ~np.isnan(score)
    assert played.tolist() == [[False, True, False], [True, False, False], [False, False, False]]


def test_decayed_win_rates_match_hand_computed_values():
    payoff = battle(decay=0.5)
    payoff.update("a", "b", "win")
    assert payoff.record("a", "b") == {"wins": 1, "draws": 0, "losses": 0, "games": 1}
    payoff.update("a", "b", "loss")
    # a vs b: wins 1*0.5, games 1*0.5 + 1, losses 1
    assert payoff.record("a", "b") == {"wins": 0.5, "draws": 0.0, "losses": 1.0, "games": 1.5}
    assert payoff.win_rate("a", "b") == pytest.approx(1 / 3)
    assert payoff.win_rate("b", "a") == pytest.approx(2 / 3)
    payoff.update("a", "b", "draw")
    # a vs b: wins .25, losses .5, draws 1, games 1.75
    assert payoff.win_rate("a", "b") == pytest.approx(0.75 / 1.75)
    assert payoff.win_rate("b", "a") == pytest.approx(1.0 / 1.75)


def test_scripted_draws_count_half_a_win_for_both_sides():
    payoff = battle()
    payoff.update("a", "b", ["draw"] * 10)
    assert payoff.win_rate("a", "b") == 0.5
    assert payoff.win_rate("b", "a") == 0.5
    assert payoff.record("a", "b")["losses"] == 0
    assert payoff.record("b", "a")["losses"] == 0
    assert payoff.record("b", "a")["draws"] == 10


def test_scripted_always_win_and_seat_order():
    payoff = battle()
    payoff.update("a", "b", ["win"] * 5)
    payoff.update("b", "a", ["loss"] * 5)  # the same outcome seen from the other seat
    assert payoff.record("a", "b") == {"wins": 10, "draws": 0, "losses": 0, "games": 10}
    assert payoff.win_rate("a", "b") == 1.0
    assert payoff.win_rate("b", "a") == 0.0
    assert payoff.win_rates("b", ["a", "b"]).tolist() == [0.0, 0.5]


def test_min_games_reads_half_until_enough_games():
    payoff = battle(min_games=8)
    payoff.update("a", "b", ["win"] * 7)
    assert payoff.win_rate("a", "b") == 0.5
    payoff.update("a", "b", "win")
    assert payoff.win_rate("a", "b") == 1.0


def test_self_play_is_not_recorded_and_bad_updates_fail():
    payoff = battle()
    payoff.update("a", "a", "win")
    assert payoff.record("a", "a")["games"] == 0
    assert payoff.win_rate("a", "a") == 0.5
    with pytest.raises(ValueError, match="'c'"):
        payoff.update("a", "c", "win")
    with pytest.raises(ValueError, match="tie"):
        payoff.update("a", "b", "tie")
    with pytest.raises(ValueError, match="already"):
        payoff.add_player(HistoricalPlayer("a"))


def test_battle_payoff_state_round_trip():
    payoff = battle(decay=0.9)
    payoff.update("a", "b", ["win", "draw", "loss", "win"])
    restored = battle(decay=0.5, min_games=3)
    restored.load_state_dict(payoff.state_dict())
    assert restored.decay == 0.9 and restored.min_games == 0
    assert restored.record("a", "b") == payoff.record("a", "b")
    assert restored.record("b", "a") == payoff.record("b", "a")
    assert restored.record("a", "b")["games"] > 0


def test_solo_payoff_keeps_recent_results():
    payoff = SoloSharedPayoff(buffer_size=3)
    payoff.add_player(HistoricalPlayer("a"))
    payoff.update("a", [1.0, 2.0, 3.0, 4.0])
    assert payoff.results("a") == [2.0, 3.0, 4.0]
    restored = SoloSharedPayoff()
    restored.load_state_dict(payoff.state_dict())
    assert restored.results("a") == [2.0, 3.0, 4.0]
    assert restored.buffer_size == 3
    with pytest.raises(ValueError, match="'b'"):
        payoff.update("b", [1.0])
