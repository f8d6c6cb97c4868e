from __future__ import annotations

import random
from collections import Counter

import pytest

from lightmarl.league import (
    ActivePlayerSettings,
    BattleSharedPayoff,
    HistoricalPlayer,
    LeagueExploiter,
    LeagueExploiterSettings,
    MainExploiter,
    MainPlayer,
    MainPlayerSettings,
    PopulationBasedPlayer,
    PopulationBasedSettings,
    SelfPlayPlayer,
    SelfPlaySettings,
    SoloActivePlayer,
    SoloSharedPayoff,
    pfsp,
)

N = 4000
TOL = 0.03


def league(*players, min_games: float = 0.0) -> BattleSharedPayoff:
    payoff = BattleSharedPayoff(decay=1.0, min_games=min_games)
    for player in players:
        payoff.add_player(player)
    return payoff


def sample(player, n: int = N, seed: int = 0):
    rng = random.Random(seed)
    jobs = [player.get_job(rng) for _ in range(n)]
    return Counter(j.branch for j in jobs), Counter(j.opponent_ids for j in jobs)


def test_snapshot_freezes_a_historical_player_and_restarts_the_phase():
    player = SoloActivePlayer("solo", checkpoint_path="ckpt/solo.pt", settings=ActivePlayerSettings(one_phase_step=10))
    player.total_agent_step = 9
    assert not player.is_trained_enough()
    player.total_agent_step = 12
    assert player.is_trained_enough()
    snapshot = player.snapshot()
    assert isinstance(snapshot, HistoricalPlayer)
    assert (snapshot.player_id, snapshot.parent_id, snapshot.total_agent_step) == ("solo_12", "solo", 12)
    assert snapshot.checkpoint_path == "ckpt/solo_12.pt"
    assert player.initial_checkpoint_path == "ckpt/solo_init.pt"
    assert not player.is_trained_enough()
    player.total_agent_step = 22
    assert player.is_trained_enough()
    assert player.mutate(random.Random(0)) is None
    assert player.get_job(random.Random(0)).opponent_ids == ()


def test_settings_errors_name_the_role_and_the_key():
    with pytest.raises(TypeError, match=r"SoloActivePlayer.*bogus"):
        SoloActivePlayer.make_settings({"bogus": 1})
    with pytest.raises(TypeError, match="MainPlayerSettings"):
        MainPlayer("m", settings=SelfPlaySettings())


def test_self_play_player_branches():
    player = SelfPlayPlayer("sp", settings=SelfPlaySettings(pfsp_prob=0.3))
    other = HistoricalPlayer("other_0", parent_id="other")
    league(player, other)
    branches, _ = sample(player, 200)
    assert branches == Counter({"self_play": 200})  # no snapshot of its own yet
    league_with_history = [player, other, HistoricalPlayer("sp_5", parent_id="sp")]
    league(*league_with_history)
    branches, opponents = sample(player)
    assert branches["pfsp"] / N == pytest.approx(0.3, abs=TOL)
    assert set(opponents) == {("sp",), ("sp_5",)}


def test_main_player_branch_frequencies():
    main = MainPlayer("main")
    exploiter = MainExploiter("exploiter")
    pretrained = HistoricalPlayer("pretrained", parent_id="main")
    exploit_snapshot = HistoricalPlayer("exploiter_10", parent_id="exploiter")
    payoff = league(main, exploiter, pretrained, exploit_snapshot)
    payoff.update("main", "exploiter_10", ["loss"] * 4)  # main loses to the exploiter's snapshot
    branches, opponents = sample(main)
    assert branches["pfsp"] / N == pytest.approx(0.5, abs=TOL)
    assert branches["verification_exploiters"] / N == pytest.approx(0.15, abs=TOL)
    assert branches["self_play"] / N == pytest.approx(0.35, abs=TOL)
    # PFSP (squared) over both historical players: win rates 0.5 and 0.0 -> weights 0.25 and 1.
    pfsp_to_exploiter = pfsp([0.5, 0.0], "squared")[1]
    expected = 0.5 * pfsp_to_exploiter + 0.15
    assert opponents[("exploiter_10",)] / N == pytest.approx(expected, abs=TOL)
    assert opponents[("main",)] == branches["self_play"]


def test_main_player_forgetting_check_and_curriculum():
    main = MainPlayer("main", settings=MainPlayerSettings(pfsp_prob=0.0, verification_prob=1.0))
    old, mid, new = (HistoricalPlayer(f"main_{s}", parent_id="main") for s in (1, 2, 3))
    payoff = league(main, old, mid, new)
    payoff.update("main", "main_1", ["loss"] * 8 + ["win"] * 2)  # 0.2: forgotten how to beat it
    payoff.update("main", "main_2", ["win"] * 9 + ["loss"])  # 0.9
    payoff.update("main", "main_3", ["win"] * 8 + ["loss"] * 2)  # 0.8, the falling suffix
    branches, opponents = sample(main)
    assert branches == Counter({"verification_forgetting": N})
    assert set(opponents) == {("main_1",), ("main_2",)}
    assert opponents[("main_1",)] / N == pytest.approx(0.64 / 0.65, abs=TOL)

    strong = MainPlayer("strong")
    weak = MainPlayer("weak", settings=MainPlayerSettings(pfsp_prob=0.0, verification_prob=0.0))
    strong_old = HistoricalPlayer("strong_1", parent_id="strong")
    payoff = league(weak, strong, strong_old)
    payoff.update("weak", "strong", ["loss"] * 10)
    branches, opponents = sample(weak)
    assert branches["self_play_curriculum"] / N == pytest.approx(0.5, abs=TOL)  # opponent drawn among 2 mains
    assert opponents[("strong_1",)] == branches["self_play_curriculum"]
    assert opponents[("strong",)] == 0


def test_main_exploiter_targets_main_players_and_always_resets():
    main = MainPlayer("main")
    exploiter = MainExploiter("exploiter", checkpoint_path="ckpt/exploiter.pt")
    payoff = league(main, exploiter, HistoricalPlayer("main_1", parent_id="main"))
    branches, opponents = sample(exploiter, 100)
    assert opponents == Counter({("main",): 100}) and branches == Counter({"main": 100})
    payoff.update("exploiter", "main", ["loss"] * 20)  # win rate 0 < 0.1: curriculum of main's snapshots
    branches, opponents = sample(exploiter, 100)
    assert opponents == Counter({("main_1",): 100}) and branches == Counter({"main_curriculum": 100})
    rng = random.Random(0)
    assert all(exploiter.mutate(rng) == "ckpt/exploiter_init.pt" for _ in range(20))


def test_league_exploiter_pfsp_over_all_history_and_reset_probability():
    exploiter = LeagueExploiter("lx", settings=LeagueExploiterSettings(reset_prob=0.25))
    main = MainPlayer("main")
    league(exploiter, main)
    branches, opponents = sample(exploiter, 50)
    assert opponents == Counter({("main",): 50}) and branches == Counter({"self_play": 50})
    history = [HistoricalPlayer(f"h{i}", parent_id="main") for i in range(3)]
    payoff = league(exploiter, main, *history)
    payoff.update("lx", "h0", ["win"] * 9 + ["loss"])  # 0.9 -> weight 0.1
    payoff.update("lx", "h1", ["loss"] * 10)  # 0.0 -> weight capped at 0.5
    branches, opponents = sample(exploiter)
    assert branches == Counter({"pfsp": N})
    expected = pfsp([0.9, 0.0, 0.5], "linear_capped")  # h2 unplayed reads 0.5
    for i, p in enumerate(expected):
        assert opponents[(f"h{i}",)] / N == pytest.approx(p, abs=TOL)
    rng = random.Random(1)
    resets = sum(exploiter.mutate(rng) is not None for _ in range(N))
    assert resets / N == pytest.approx(0.25, abs=TOL)


def test_alphastar_snapshot_rule():
    main = MainPlayer("main", settings=MainPlayerSettings(one_phase_step=100, strong_win_rate=0.7))
    payoff = league(main, HistoricalPlayer("h", parent_id="main"))
    main.total_agent_step = 150
    assert not main.is_trained_enough()  # one phase passed, but not strong against "h" (0.5)
    payoff.update("main", "h", ["win"] * 8 + ["loss"] * 2)
    assert main.is_trained_enough()  # 0.8 > 0.7
    payoff.add_player(main.snapshot())  # unplayed: 0.5 against it
    main.total_agent_step = 340
    assert not main.is_trained_enough()
    main.total_agent_step = 350  # two phases since the snapshot at 150: forced
    assert main.is_trained_enough()
    with pytest.raises(ValueError, match="force_after_step"):
        MainPlayerSettings(one_phase_step=100, force_after_step=50)
    with pytest.raises(ValueError, match="pfsp_prob \\+ verification_prob"):
        MainPlayerSettings(pfsp_prob=0.9, verification_prob=0.2)


def test_population_based_player_copies_the_best_newest_snapshot_when_it_ranks_last():
    settings = PopulationBasedSettings(one_phase_step=1, min_results=3)
    players = [PopulationBasedPlayer(name, settings=settings) for name in ("a", "b", "c")]
    payoff = SoloSharedPayoff(buffer_size=4)
    for player in players:
        payoff.add_player(player)
    rng = random.Random(0)
    payoff.update("a", [1.0, 2.0])
    payoff.update("b", [5.0, 5.0, 5.0])
    payoff.update("c", [3.0, 3.0, 3.0])
    assert players[0].mutate(rng) is None  # "a" has 2 results < min_results: nobody is compared yet
    payoff.update("a", [0.0])
    assert players[0].mutate(rng) is None  # "a" ranks last but "b" has no snapshot to copy
    for step, path in ((10, "b_10.pt"), (20, "b_20.pt")):
        payoff.add_player(HistoricalPlayer(f"b_{step}", checkpoint_path=path, total_agent_step=step, parent_id="b"))
    assert players[0].mutate(rng) == "b_20.pt"  # the best player's newest snapshot
    assert players[1].mutate(rng) is None and players[2].mutate(rng) is None  # best, and not in the bottom 25%
    with pytest.raises(ValueError, match="bottom_fraction"):
        PopulationBasedSettings(bottom_fraction=1.5)
