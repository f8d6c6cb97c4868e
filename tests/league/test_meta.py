"""League meta-strategies (lightmarl.league.meta): solvers, the mixture a player trains against and shows."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from lightmarl.league import (
    BattleSharedPayoff,
    LeagueManager,
    LeagueRole,
    LinearMetaSolver,
    MetaStrategyPlayer,
    MetaStrategySettings,
    NashMetaSolver,
    PFSPMetaSolver,
    SelfPlayPlayer,
    SelfPlaySettings,
    UniformMetaSolver,
    pfsp,
)
from lightmarl.league.meta import nash_of_symmetric, shown_mixture

RPS = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])


def test_nash_of_rock_paper_scissors_is_uniform_and_a_dominant_strategy_is_pure():
    assert np.allclose(nash_of_symmetric(RPS), [1 / 3] * 3, atol=1e-6)
    dominated = np.array([[0.0, 0.3, 0.2], [-0.3, 0.0, 0.1], [-0.2, -0.1, 0.0]])
    assert np.allclose(nash_of_symmetric(dominated), [1.0, 0.0, 0.0], atol=1e-6)


def test_solvers_weigh_the_snapshots():
    rates = np.array([0.9, 0.5, 0.1])
    assert np.allclose(UniformMetaSolver().weights(RPS, rates), [1 / 3] * 3)
    assert np.allclose(NashMetaSolver().weights(RPS, rates), [1 / 3] * 3, atol=1e-6)
    assert np.allclose(PFSPMetaSolver("squared").weights(RPS, rates), pfsp(rates, "squared"))
    assert np.allclose(LinearMetaSolver().weights(RPS, rates), [1 / 6, 2 / 6, 3 / 6])
    with pytest.raises(ValueError, match="weighting"):
        PFSPMetaSolver("cubic")


def player_with_snapshots(solver: dict, count: int, rates_at_snapshot: list[list[float]] | None = None, **settings):
    payoff = BattleSharedPayoff(decay=1.0, min_games=0.0)
    player = MetaStrategyPlayer(
        "p",
        checkpoint_path="p.pt",
        settings=MetaStrategyPlayer.make_settings({"one_phase_step": 10, "meta_solver": solver, **settings}),
    )
    payoff.add_player(player)
    for k in range(count):
        for j, rate in enumerate((rates_at_snapshot or [[]] * count)[k]):
            # the live player's record against snapshot j before snapshot k is taken
            own = [h for h in payoff.players if getattr(h, "parent_id", "") == "p"]
            wins = round(rate * 10)
            payoff.update("p", own[j].player_id, ["win"] * wins + ["loss"] * (10 - wins))
        player.total_agent_step = 10 * (k + 1)
        payoff.add_player(player.snapshot())
    return player, payoff


def test_the_meta_matrix_takes_each_snapshots_win_rates_when_it_is_taken():
    # Before snapshot 1 the player won 7 of 10 against snapshot 0; before snapshot 2, 2 more of 10
    # against snapshot 0 (9 of 20 in all: the payoff does not decay here) and 6 of 10 against 1.
    player, _ = player_with_snapshots({"class_path": "NashMetaSolver"}, 3, [[], [0.7], [0.2, 0.6]])
    expected = np.array([[0.5, 0.3, 0.55], [0.7, 0.5, 0.4], [0.45, 0.6, 0.5]]) - 0.5  # zero-sum: win rate - 1/2
    assert np.allclose(player.meta_matrix, expected)
    members, weights = player.mixture()
    assert [m.player_id for m in members] == ["p_10", "p_20", "p_30"]
    assert np.allclose(weights, nash_of_symmetric(expected), atol=1e-6)
    assert weights.max() < 1.0  # a cycle: the Nash mixes
    assert player.meta_exact == [False] * 3


def test_exact_payoffs_replace_a_snapshots_row_and_move_the_nash():
    player, _ = player_with_snapshots({"class_path": "NashMetaSolver"}, 3, [[], [0.7], [0.2, 0.6]])
    player.mixture()  # cached weights must not survive the new payoffs
    # Exact returns: snapshot 2 beats both earlier ones, which then carry no weight.
    player.set_meta_payoffs(2, [0.25, 0.125])
    assert player.meta_matrix[2][:2] == [0.25, 0.125] and [row[2] for row in player.meta_matrix[:2]] == [-0.25, -0.125]
    assert player.meta_exact == [False, False, True]
    assert np.allclose(player.mixture()[1], [0.0, 0.0, 1.0], atol=1e-6)
    with pytest.raises(ValueError, match="snapshot 2 of 3 takes 2 payoffs"):
        player.set_meta_payoffs(2, [0.1])


def test_opponents_are_drawn_from_the_mixture_per_job():
    player, _ = player_with_snapshots({"class_path": "lightmarl.league.meta.UniformMetaSolver"}, 4)
    rng = random.Random(0)
    jobs = [player.get_job(rng) for _ in range(4000)]
    counts = Counter(j.opponent_ids[0] for j in jobs)
    assert {j.branch for j in jobs} == {"meta_strategy"} and set(counts) == {"p_10", "p_20", "p_30", "p_40"}
    assert all(abs(c / 4000 - 0.25) < 0.03 for c in counts.values())
    windowed, _ = player_with_snapshots({"class_path": "UniformMetaSolver"}, 4, window=2)
    assert [m.player_id for m in windowed.mixture()[0]] == ["p_30", "p_40"]
    # Linear averaging within the window: the newest member counts most.
    linear, _ = player_with_snapshots({"class_path": "LinearMetaSolver"}, 4, window=3)
    members, weights = linear.mixture()
    assert [m.player_id for m in members] == ["p_20", "p_30", "p_40"] and np.allclose(weights, [1 / 6, 2 / 6, 3 / 6])


def test_before_a_snapshot_the_player_plays_and_shows_itself():
    player, _ = player_with_snapshots({"class_path": "UniformMetaSolver"}, 0)
    assert player.get_job(random.Random(0)).branch == "self_play"
    assert shown_mixture(player) is None
    assert shown_mixture(SelfPlayPlayer("s")) is None  # roles without a meta-strategy show their live binding


def test_the_matrix_survives_a_checkpoint():
    player, _ = player_with_snapshots({"class_path": "NashMetaSolver"}, 3, [[], [0.7], [0.2, 0.6]])
    other = MetaStrategyPlayer(
        "p", settings=MetaStrategyPlayer.make_settings({"meta_solver": {"class_path": "NashMetaSolver"}})
    )
    player.set_meta_payoffs(1, [0.5])
    other.load_state_dict(player.state_dict())
    assert other.meta_matrix == player.meta_matrix and other.meta_exact == [False, True, False]


@pytest.mark.parametrize(
    ("solver", "message"),
    [
        ({"class_path": "NoSuchSolver"}, "meta_solver.class_path"),
        ({"class_path": "lightmarl.league.SelfPlayPlayer"}, "not a lightmarl.league.meta.MetaSolver"),
        ({"class_path": "PFSPMetaSolver", "init_args": {"power": 2}}, "meta_solver.init_args"),
        ({"solver": "nash"}, "expected {class_path"),
    ],
)
def test_bad_meta_solvers_fail_with_the_field_named(solver, message):
    with pytest.raises(ValueError, match=message):
        MetaStrategySettings(meta_solver=solver)


def test_naive_self_play_writes_no_snapshot_nothing_would_play():
    def snapshots(pfsp_prob: float, roles: int = 1) -> int:
        specs = [
            {
                "class_path": "SelfPlayPlayer",
                "binding": f"s{i}",
                "settings": {"one_phase_step": 10, "pfsp_prob": pfsp_prob},
            }
            for i in range(roles)
        ]
        manager = LeagueManager(roles=specs, seed=0)
        for player in manager.active_players:
            manager.update_active_player(player.player_id, 25)
        return len(manager.snapshot_due_players())

    assert snapshots(0.0) == 0
    assert snapshots(0.5) == 1
    assert snapshots(0.0, roles=2) == 2  # another player may play them
    assert SelfPlaySettings(pfsp_prob=0.0).pfsp_prob == 0.0


def test_reset_prob_restarts_the_live_player_from_its_initial_weights():
    fresh, _ = player_with_snapshots({"class_path": "NashMetaSolver"}, 1, reset_prob=1.0)
    assert fresh.mutate(random.Random(0)) == fresh.initial_checkpoint_path == "p_init.pt"
    going_on, _ = player_with_snapshots({"class_path": "NashMetaSolver"}, 1)
    assert going_on.mutate(random.Random(0)) is None
    with pytest.raises(ValueError, match="reset_prob"):
        MetaStrategyPlayer.make_settings({"reset_prob": 1.5})


def test_fill_meta_game_sets_each_row_once_from_the_evaluator():
    league = LeagueManager(
        roles=[LeagueRole("MetaStrategyPlayer", "main", {"one_phase_step": 1, "reset_prob": 0.0})], seed=0
    )
    (player,) = league.active_players
    asked = []

    def payoffs(snapshot, earlier):
        asked.append(snapshot.player_id)
        return [float(len(earlier)) + 0.25 * j for j in range(len(earlier))]

    for _ in range(3):
        league.update_active_player(player.player_id, 1)
        league.snapshot_due_players()
    assert player.fill_meta_game(payoffs) == 3
    assert player.meta_exact == [True, True, True]
    matrix = np.array(player.meta_matrix)
    assert matrix[2, :2].tolist() == [2.0, 2.25] and matrix[1, 0] == 1.0
    assert np.allclose(matrix, -matrix.T)
    assert player.fill_meta_game(payoffs) == 0  # rows already exact are never asked again
    assert len(asked) == 3
