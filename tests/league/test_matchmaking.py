"""The matchmaker: one job per env copy and episode, seats alternating, results per seat, bounded slots."""

from __future__ import annotations

import pytest

from lightmarl.league import LeagueManager
from lightmarl.league.matchmaking import Matchmaker, outcome_from_returns

SLOTS = ["slot_0", "slot_1"]


def _league(tmp_path, pfsp_prob: float = 1.0, one_phase_step: int = 10, **kwargs) -> Matchmaker:
    manager = LeagueManager(
        roles=[
            {
                "class_path": "SelfPlayPlayer",
                "binding": "main",
                "settings": {"one_phase_step": one_phase_step, "pfsp_prob": pfsp_prob},
            }
        ],
        snapshot_dir=str(tmp_path),
        max_active_player_job=8,
        seed=0,
    )
    return Matchmaker(manager, {"main_default_0": "main"}, SLOTS, num_copies=4, **kwargs)


def _snapshots(matchmaker: Matchmaker, count: int) -> None:
    player = matchmaker.manager.active_players[0]
    for _ in range(count):
        matchmaker.manager.update_active_player(player.player_id, 10)
        matchmaker.manager.snapshot_due_players()


def test_outcome_from_returns_compares_the_seats():
    assert [outcome_from_returns(1, -1), outcome_from_returns(0, 0), outcome_from_returns(-2, 3)] == [
        "win",
        "draw",
        "loss",
    ]


def test_seats_alternate_and_an_always_winning_seat_is_counted_per_seat(tmp_path):
    """Seat 0 always wins (returns 1, -1): the player wins exactly its seat-0 games and loses its seat-1 games."""
    matchmaker = _league(tmp_path)
    _snapshots(matchmaker, 1)
    seatings = matchmaker.start()
    assert [s.seat for s in seatings] == [0, 1, 0, 1]  # copy g starts in seat g mod 2
    historical = matchmaker.manager.historical_players[0].player_id
    for _ in range(5):
        for copy in range(4):
            before = matchmaker.seatings[copy]
            result, after = matchmaker.episode_ended(copy, (1.0, -1.0))
            assert result == ("win" if before.seat == 0 else "loss")
            assert after.seat == 1 - before.seat  # the next job of the copy takes the other seat
            assert after.opponent_id == historical and after.opponent_binding in SLOTS
    seat0, seat1 = matchmaker.seat_results["main_default_0"]
    assert seat0 == {"win": 10, "draw": 0, "loss": 0} and seat1 == {"win": 0, "draw": 0, "loss": 10}
    assert matchmaker.win_rates_by_seat("main_default_0") == [1.0, 0.0]
    record = matchmaker.manager.payoff.record("main_default_0", historical)
    assert record["wins"] > 0 and record["losses"] > 0 and record["draws"] == 0
    assert matchmaker.manager.payoff.win_rate("main_default_0", historical) == pytest.approx(0.5, abs=0.06)


def test_draws_count_half_for_both_sides(tmp_path):
    matchmaker = _league(tmp_path)
    _snapshots(matchmaker, 1)
    matchmaker.start()
    for _ in range(3):
        for copy in range(4):
            assert matchmaker.episode_ended(copy, (0.0, 0.0))[0] == "draw"
    historical = matchmaker.manager.historical_players[0].player_id
    payoff = matchmaker.manager.payoff
    assert payoff.record("main_default_0", historical)["losses"] == 0
    assert payoff.win_rate("main_default_0", historical) == payoff.win_rate(historical, "main_default_0") == 0.5


def test_self_play_is_not_recorded_in_the_payoff_but_frees_the_job(tmp_path):
    matchmaker = _league(tmp_path, pfsp_prob=0.0)
    seatings = matchmaker.start()
    assert all(s.opponent_binding == "main" and s.opponent_id == "main_default_0" for s in seatings)
    assert len(matchmaker.manager.running_jobs) == 4
    matchmaker.episode_ended(0, (1.0, 0.0))
    assert len(matchmaker.manager.running_jobs) == 4  # one finished, the copy's next one started


def test_at_most_max_resident_snapshots_are_seated_and_busy_slots_are_never_reloaded(tmp_path):
    matchmaker = _league(tmp_path)
    _snapshots(matchmaker, 12)  # a league much larger than the 2 slots
    matchmaker.start()
    loads = 0
    for _ in range(30):
        for copy in range(4):
            _, seating = matchmaker.episode_ended(copy, (0.0, 0.0))
            loads += seating.load is not None
            seated = {s.opponent_id for s in matchmaker.seatings if s is not None and s.job_id >= 0}
            assert len(seated) <= len(SLOTS)
            # Every copy's slot holds the opponent it plays: a reload never replaced it under another copy.
            for other in matchmaker.seatings:
                if other is not None and other.opponent_binding in SLOTS:
                    assert matchmaker.slots[SLOTS.index(other.opponent_binding)] == other.opponent_id
    assert loads > 2  # opponents were swapped in and out of the slots


def test_state_dict_resumes_the_same_seatings(tmp_path):
    first = _league(tmp_path)
    _snapshots(first, 3)
    first.start()
    for copy in [0, 1, 2, 3, 1]:
        first.episode_ended(copy, (1.0, 0.0))
    state = first.state_dict()
    second = _league(tmp_path)
    _snapshots(second, 0)
    second.load_state_dict(state)
    assert second.seatings == first.seatings
    for copy in [3, 2, 0, 0]:
        assert first.episode_ended(copy, (0.0, 1.0)) == second.episode_ended(copy, (0.0, 1.0))
    assert second.state_dict() == first.state_dict()


def test_needs_a_copy_per_player(tmp_path):
    manager = LeagueManager(
        roles=[{"class_path": "MainPlayer", "binding": "a"}, {"class_path": "MainExploiter", "binding": "b"}]
    )
    with pytest.raises(ValueError, match="env copies"):
        Matchmaker(manager, {"a_default_0": "a", "b_default_0": "b"}, SLOTS, num_copies=1)


def _crowded_league(tmp_path) -> Matchmaker:
    """16 copies, 2 slots, 8 snapshots: far more copies than resident opponents."""
    manager = LeagueManager(
        roles=[
            {"class_path": "SelfPlayPlayer", "binding": "main", "settings": {"one_phase_step": 10, "pfsp_prob": 1.0}}
        ],
        snapshot_dir=str(tmp_path),
        max_active_player_job=64,
        seed=0,
    )
    matchmaker = Matchmaker(manager, {"main_default_0": "main"}, SLOTS, num_copies=16)
    _snapshots(matchmaker, 8)
    matchmaker.start()
    return matchmaker


def _games_per_snapshot(matchmaker: Matchmaker) -> list[float]:
    payoff = matchmaker.manager.payoff
    return [payoff.record("main_default_0", h.player_id)["games"] for h in matchmaker.manager.historical_players]


def test_opponents_rotate_through_the_slots_when_every_episode_ends_at_once(tmp_path):
    """One-step episodes (rock-paper-scissors): every snapshot gets played, not only the first ones loaded.

    Released one copy at a time, the copies kept every slot busy: only the first snapshots
    loaded were ever played and the other jobs fell back to unrecorded self-play.
    """
    matchmaker = _crowded_league(tmp_path)
    for _ in range(40):
        matchmaker.episodes_ended([(copy, (0.0, 0.0)) for copy in range(16)])
    assert all(games > 0 for games in _games_per_snapshot(matchmaker))
    assert sum(s.job_id < 0 for s in matchmaker.seatings if s is not None) < 8


def test_a_busy_slot_drains_so_that_new_snapshots_get_in(tmp_path):
    """Episodes ending one copy at a time never free every slot at once: the least recently used one drains."""
    matchmaker = _crowded_league(tmp_path)
    for _ in range(40):
        for copy in range(16):
            matchmaker.episode_ended(copy, (1.0, 0.0))
    assert all(games > 0 for games in _games_per_snapshot(matchmaker))


# -- once per rollout: on-deck seatings -------------------------------------------------------------
def test_a_copy_starts_its_on_deck_seating_at_its_first_end_and_repeats_it_until_the_next_rollout(tmp_path):
    """Copy 0 ends 3 episodes in one rollout: the first finishes its job (one game) and starts the on-deck
    seating, the next two are further games of that seating; its job finishes with both when it leaves it."""
    matchmaker = _league(tmp_path)
    _snapshots(matchmaker, 1)
    first = matchmaker.start()
    on_deck = matchmaker.fill_on_deck()
    assert [s.copy for s in on_deck] == [0, 1, 2, 3] and matchmaker.fill_on_deck() == []
    # The copy would play its on-deck seating after an end, without the matchmaker changing.
    assert matchmaker.playing_after(0, 0) == first[0] and matchmaker.playing_after(0, 2) == on_deck[0]
    assert all(s.job_id >= 0 for s in [*first, *on_deck])  # one snapshot, two slots: no fallback game
    finished: list[tuple[int, list]] = []
    finish_job = matchmaker.manager.finish_job
    matchmaker.manager.finish_job = lambda job, results: (
        finished.append((job, list(results))),
        finish_job(job, results),
    )  # type: ignore[method-assign]
    played = matchmaker.rollout_ended([(0, (1.0, -1.0)), (1, (0.0, 0.0)), (0, (1.0, -1.0)), (0, (-1.0, 1.0))])
    assert [s for s, _ in played] == [first[0], first[1], on_deck[0], on_deck[0]]
    seat0_wins = {0: "win", 1: "loss"}
    results = [seat0_wins[first[0].seat], "draw", seat0_wins[on_deck[0].seat], seat0_wins[1 - on_deck[0].seat]]
    assert [r for _, r in played] == results
    # Jobs finished: the first ones of copies 0 and 1; copy 0's second job still runs, with two games.
    assert finished == [(first[0].job_id, results[:1]), (first[1].job_id, ["draw"])]
    assert matchmaker.seatings[:2] == [on_deck[0], on_deck[1]] and matchmaker.seatings[2:] == first[2:]
    assert matchmaker.on_deck[:2] == [None, None] and matchmaker.on_deck[2:] == on_deck[2:]
    assert matchmaker.games[0] == results[2:] and matchmaker.games[1] == []
    assert [s.copy for s in matchmaker.fill_on_deck()] == [0, 1]
    matchmaker.rollout_ended([(0, (0.0, 0.0))])  # copy 0 leaves its second job: its three games are recorded
    assert finished[2:] == [(on_deck[0].job_id, [*results[2:], "draw"])]


def test_a_mirror_follows_the_switches_of_the_league_it_mirrors(tmp_path):
    league, mirror = _league(tmp_path), _league(tmp_path)
    _snapshots(league, 2)
    _snapshots(mirror, 0)
    league.start()
    league.fill_on_deck()
    mirror.seatings, mirror.on_deck = list(league.seatings), list(league.on_deck)
    ended = [(2, (1.0, 0.0)), (0, (0.0, 1.0)), (2, (0.0, 0.0))]
    league.rollout_ended(ended)
    mirror.advance(sorted({copy for copy, _ in ended}))
    assert mirror.seatings == league.seatings and mirror.on_deck == league.on_deck


def test_the_state_dict_keeps_the_on_deck_seatings_and_the_games_of_running_jobs(tmp_path):
    first = _league(tmp_path)
    _snapshots(first, 3)
    first.start()
    first.fill_on_deck()
    first.rollout_ended([(1, (1.0, 0.0)), (1, (1.0, 0.0))])
    first.fill_on_deck()
    state = first.state_dict()
    assert state["games"][1] and any(state["on_deck"])
    second = _league(tmp_path)
    second.load_state_dict(state)
    assert (second.seatings, second.on_deck, second.games) == (first.seatings, first.on_deck, first.games)
    ended = [(1, (0.0, 1.0)), (3, (1.0, 0.0))]
    assert first.rollout_ended(ended) == second.rollout_ended(ended)
    assert first.fill_on_deck() == second.fill_on_deck()
    assert second.state_dict() == first.state_dict()
