from __future__ import annotations

import io
import random
import re
import sys
import threading
from collections import Counter

import pytest
import torch

from lightmarl.league import (
    ActivePlayer,
    BattleSharedPayoff,
    Job,
    LeagueManager,
    MainPlayer,
    PretrainedSpec,
    RoleSpec,
    SoloSharedPayoff,
)

ALPHASTAR = [
    {"class_path": "lightmarl.league.MainPlayer", "count": 2, "settings": {"one_phase_step": 30}},
    {"class_path": "MainExploiter", "settings": {"one_phase_step": 30}},
    {"class_path": "LeagueExploiter", "settings": {"one_phase_step": 40, "reset_prob": 0.5}},
]


def make(**kwargs) -> LeagueManager:
    defaults = {
        "roles": ALPHASTAR,
        "categories": ["zerg", "terran"],
        "pretrained": [{"checkpoint_path": "sl.pt", "category": "zerg"}],
    }
    return LeagueManager(**{**defaults, **kwargs})


def test_players_per_category_and_pretrained_history():
    manager = make(snapshot_dir="runs/league")
    ids = [p.player_id for p in manager.active_players]
    assert ids == [
        "main_player_zerg_0",
        "main_player_zerg_1",
        "main_exploiter_zerg_0",
        "league_exploiter_zerg_0",
        "main_player_terran_0",
        "main_player_terran_1",
        "main_exploiter_terran_0",
        "league_exploiter_terran_0",
    ]
    assert manager.active_players[0].checkpoint_path == "runs/league/main_player_zerg_0.pt"
    assert manager.active_players[0].settings.one_phase_step == 30
    (pretrained,) = manager.historical_players
    assert (pretrained.player_id, pretrained.parent_id, pretrained.checkpoint_path) == (
        "pretrained_zerg_0",
        "main_player_zerg_0",
        "sl.pt",
    )
    assert [p.player_id for p in manager.players] == [*ids, "pretrained_zerg_0"]
    assert isinstance(manager.payoff, BattleSharedPayoff)
    assert all(p.payoff is manager.payoff for p in manager.players)


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match=re.escape("no.such.Role")):
        LeagueManager(roles=[{"class_path": "no.such.Role"}])
    with pytest.raises(ValueError, match=re.escape("'lightmarl.league.BattleSharedPayoff' is not an ActivePlayer")):
        LeagueManager(roles=[{"class_path": "lightmarl.league.BattleSharedPayoff"}])
    with pytest.raises(ValueError, match="MainExploiter but no MainPlayer"):
        LeagueManager(roles=[{"class_path": "MainExploiter"}])
    with pytest.raises(ValueError, match=r"SoloActivePlayer.*'battle'"):
        LeagueManager(roles=[{"class_path": "SoloActivePlayer"}])
    with pytest.raises(ValueError, match=r"'main_player_default_0'.*subclass SoloActivePlayer"):
        LeagueManager(roles=[RoleSpec("MainPlayer")], payoff={"kind": "solo"})
    with pytest.raises(ValueError, match="no active player"):
        LeagueManager(roles=[RoleSpec("MainPlayer", count=0)])
    with pytest.raises(TypeError, match=r"MainPlayer.*pfsp_probability"):
        LeagueManager(roles=[RoleSpec("MainPlayer", settings={"pfsp_probability": 0.5})])


def test_jobs_honour_the_concurrency_limit():
    launched: list[Job] = []
    manager = make(max_active_player_job=2, launch_job_fn=launched.append)
    jobs = manager.step()
    assert launched == jobs
    assert len(jobs) == 2 * len(manager.active_players)
    assert [j.job_id for j in jobs] == list(range(len(jobs)))
    assert all(len(j.opponent_ids) == 1 for j in jobs)
    assert manager.step() == []
    assert manager.get_job("main_player_zerg_0") is None
    first = jobs[0]
    manager.finish_job(first, ["win", "loss"])
    (again,) = manager.step()
    assert again.player_id == first.player_id
    with pytest.raises(ValueError, match="not running"):
        manager.finish_job(first, ["win"])
    manager.cancel_job(again.job_id)
    assert manager.get_job(first.player_id) is not None
    with pytest.raises(ValueError, match="historical"):
        manager.get_job("pretrained_zerg_0")


def test_finish_job_updates_payoff_and_ratings():
    manager = LeagueManager(
        roles=[RoleSpec("MainPlayer")], pretrained=[PretrainedSpec("sl.pt")], payoff={"min_games": 0, "decay": 1.0}
    )
    job = None
    while job is None or job.opponent_ids != ("pretrained_default_0",):
        if job is not None:
            manager.cancel_job(job)
        job = manager.get_job("main_player_default_0")
    manager.finish_job(job, ["win", "win", "draw", "loss"])
    assert manager.payoff.record("main_player_default_0", "pretrained_default_0") == {
        "wins": 2,
        "draws": 1,
        "losses": 1,
        "games": 4,
    }
    assert manager.payoff.win_rate("pretrained_default_0", "main_player_default_0") == pytest.approx(0.375)
    assert manager.elo["main_player_default_0"] > 1000 > manager.elo["pretrained_default_0"]
    assert manager.skill["main_player_default_0"][0] > manager.skill["pretrained_default_0"][0]


def test_solo_league_records_results():
    manager = LeagueManager(roles=[RoleSpec("SoloActivePlayer", count=2)], payoff={"kind": "solo", "buffer_size": 2})
    jobs = manager.step()
    assert [(j.player_id, j.opponent_ids, j.branch) for j in jobs] == [
        ("solo_active_player_default_0", (), "solo"),
        ("solo_active_player_default_1", (), "solo"),
    ]
    manager.finish_job(jobs[0], [1.0, 2.0, 3.0])
    assert isinstance(manager.payoff, SoloSharedPayoff)
    assert manager.payoff.results("solo_active_player_default_0") == [2.0, 3.0]


def test_steps_snapshots_and_mutation():
    saved, loaded = [], []
    manager = make(
        seed=1,
        save_checkpoint_fn=lambda p, s: saved.append((p.player_id, s.player_id)),
        load_checkpoint_fn=lambda p, path: loaded.append((p.player_id, path)),
    )
    manager.update_active_player("main_exploiter_zerg_0", 59)
    manager.update_active_player("main_player_zerg_0", 59)
    assert manager.snapshot_due_players() == []  # one phase passed, not strong enough, not forced
    manager.update_active_player("main_exploiter_zerg_0", 1)
    (event,) = manager.snapshot_due_players()
    assert (event.player_id, event.historical_id, event.total_agent_step) == (
        "main_exploiter_zerg_0",
        "main_exploiter_zerg_0_60",
        60,
    )
    assert event.reset_to == manager.get_player("main_exploiter_zerg_0").initial_checkpoint_path
    assert saved == [("main_exploiter_zerg_0", "main_exploiter_zerg_0_60")]
    assert loaded == [("main_exploiter_zerg_0", event.reset_to)]
    assert manager.historical_players[-1].parent_id == "main_exploiter_zerg_0"
    assert manager.snapshot_due_players() == []
    with pytest.raises(ValueError, match="'nobody'"):
        manager.update_active_player("nobody", 1)


def test_concurrent_finish_job_keeps_counts_consistent():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # make the threads interleave as much as possible
    try:
        manager = LeagueManager(
            roles=[RoleSpec("MainPlayer", count=4)], max_active_player_job=1000, payoff={"decay": 1.0}
        )
        jobs = manager.step()
        assert len(jobs) == 4000
        chunks = [jobs[i::8] for i in range(8)]

        def work(chunk):
            for job in chunk:
                manager.finish_job(job, ["win"])
                manager.update_active_player(job.player_id, 1)

        threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(old)
    assert manager.running_jobs == []
    assert sum(p.total_agent_step for p in manager.active_players) == 4000
    played = Counter((j.player_id, j.opponent_ids[0]) for j in jobs if j.player_id != j.opponent_ids[0])
    assert sum(played.values()) > 1000
    for (home, away), count in played.items():
        record = manager.payoff.record(home, away)
        assert record["games"] == count + played[away, home]
        assert record["wins"] == count and record["losses"] == played[away, home]
    assert all(manager.get_job(p.player_id) is not None for p in manager.active_players)


def test_background_threads_launch_and_stop():
    launched = threading.Semaphore(0)
    manager = make(time_interval=0.01, launch_job_fn=lambda job: launched.release())
    manager.run()
    try:
        for _ in range(len(manager.active_players)):
            assert launched.acquire(timeout=5)
        with pytest.raises(RuntimeError, match="already"):
            manager.run()
    finally:
        manager.close()
    assert len(manager.running_jobs) == len(manager.active_players)
    assert not any(t.name.startswith("league-") for t in threading.enumerate())


def drive(manager: LeagueManager, rounds: int, results: random.Random) -> list[tuple]:
    """A scripted training loop: jobs, random results, steps, snapshots."""
    trace = []
    for _ in range(rounds):
        for job in manager.step():
            trace.append((job.job_id, job.player_id, job.opponent_ids, job.branch))
        for job in manager.running_jobs[::2]:  # leave some jobs running across rounds
            manager.finish_job(job, results.choices(["win", "draw", "loss"], k=3))
        for player in manager.active_players:
            manager.update_active_player(player.player_id, results.randrange(5, 15))
        trace.extend((e.historical_id, e.reset_to) for e in manager.snapshot_due_players())
    return trace


def roundtrip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_round_trip_reproduces_the_future_jobs():
    results = random.Random(7)
    first = make(seed=3, max_active_player_job=2)
    drive(first, 10, results)
    assert first.historical_players[1:] and first.running_jobs
    state = roundtrip(first.state_dict())
    results_state = results.getstate()
    expected = drive(first, 10, results)

    second = make(seed=99, max_active_player_job=2)  # a different seed: the state must override it
    second.load_state_dict(state)
    results.setstate(results_state)
    assert drive(second, 10, results) == expected
    assert roundtrip(second.state_dict()) == roundtrip(first.state_dict())
    assert {b for *_, b in expected if isinstance(b, str)} >= {"pfsp", "self_play"}

    with pytest.raises(ValueError, match="active players"):
        LeagueManager(roles=[RoleSpec("MainPlayer")]).load_state_dict(state)


def test_same_seed_same_jobs_different_seed_different_jobs():
    def trace(seed):
        return drive(make(seed=seed), 5, random.Random(0))

    assert trace(5) == trace(5)
    assert trace(5) != trace(6)


def test_roles_and_manager_build_from_a_class_path_config():
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--league", type=LeagueManager)
    parser.add_argument("--player", type=ActivePlayer)
    config = parser.parse_args(
        [
            "--league",
            '{"class_path": "lightmarl.league.LeagueManager", "init_args": {"roles": ['
            '{"class_path": "MainPlayer", "count": 2, "settings": {"one_phase_step": 5}},'
            '{"class_path": "lightmarl.league.MainExploiter"}], "payoff": {"decay": 0.9}, "seed": 3}}',
            "--player",
            '{"class_path": "lightmarl.league.MainPlayer", "init_args": {"player_id": "m", "settings": {"pfsp_prob": 0.2}}}',
        ]
    )
    built = parser.instantiate(config)
    league, player = built.league, built.player
    assert [p.player_id for p in league.players] == [
        "main_player_default_0",
        "main_player_default_1",
        "main_exploiter_default_0",
    ]
    assert league.payoff.decay == 0.9 and league.seed == 3
    assert league.active_players[1].settings.one_phase_step == 5
    assert isinstance(player, MainPlayer) and player.settings.pfsp_prob == 0.2
