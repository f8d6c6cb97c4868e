from __future__ import annotations

import copy
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
    LeagueRole,
    MainPlayer,
    PretrainedSpec,
    SoloSharedPayoff,
)

ALPHASTAR = [
    {"class_path": "lightmarl.league.MainPlayer", "binding": "main_a", "settings": {"one_phase_step": 30}},
    {"class_path": "MainPlayer", "binding": "main_b", "settings": {"one_phase_step": 30}},
    {"class_path": "MainExploiter", "binding": "exploiter", "settings": {"one_phase_step": 30}},
    {"class_path": "LeagueExploiter", "binding": "league", "settings": {"one_phase_step": 40, "reset_prob": 0.5}},
]


def make(**kwargs) -> LeagueManager:
    defaults = {"roles": ALPHASTAR, "pretrained": [{"checkpoint_path": "sl.pt"}]}
    return LeagueManager(**{**defaults, **kwargs})


def test_one_player_per_role_and_pretrained_history():
    manager = make(snapshot_dir="runs/league")
    ids = [p.player_id for p in manager.active_players]
    assert ids == ["main_a_default_0", "main_b_default_0", "exploiter_default_0", "league_default_0"]
    assert manager.active_players[0].checkpoint_path == "runs/league/main_a_default_0.pt"
    assert manager.active_players[0].settings.one_phase_step == 30
    (pretrained,) = manager.historical_players
    assert (pretrained.player_id, pretrained.parent_id, pretrained.checkpoint_path) == (
        "pretrained_default_0",
        "main_a_default_0",
        "sl.pt",
    )
    assert [p.player_id for p in manager.players] == [*ids, "pretrained_default_0"]
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
    with pytest.raises(ValueError, match=r"'main_default_0'.*subclass SoloActivePlayer"):
        LeagueManager(roles=[LeagueRole("MainPlayer")], payoff={"kind": "solo"})
    with pytest.raises(ValueError, match="no active player"):
        LeagueManager(roles=[])
    with pytest.raises(ValueError, match=re.escape("each role needs a binding of its own, got ['main', 'main']")):
        LeagueManager(roles=[LeagueRole("MainPlayer"), LeagueRole("MainExploiter")])
    with pytest.raises(ValueError, match=re.escape("roles[0]: unknown keys ['name']; valid keys are ['binding',")):
        LeagueManager(roles=[{"class_path": "MainPlayer", "name": "main"}])
    with pytest.raises(TypeError, match=r"MainPlayer.*pfsp_probability"):
        LeagueManager(roles=[LeagueRole("MainPlayer", settings={"pfsp_probability": 0.5})])


def test_jobs_honour_the_concurrency_limit():
    manager = make(max_active_player_job=2)
    jobs: list[Job] = manager.step()
    assert len(jobs) == 2 * len(manager.active_players)
    assert [j.job_id for j in jobs] == list(range(len(jobs)))
    assert all(len(j.opponent_ids) == 1 for j in jobs)
    assert manager.step() == []
    assert manager.get_job("main_a_default_0") is None
    first = jobs[0]
    manager.finish_job(first, ["win", "loss"])
    (again,) = manager.step()
    assert again.player_id == first.player_id
    with pytest.raises(ValueError, match="not running"):
        manager.finish_job(first, ["win"])
    manager.cancel_job(again.job_id)
    assert manager.get_job(first.player_id) is not None
    with pytest.raises(ValueError, match="historical"):
        manager.get_job("pretrained_default_0")


def test_finish_job_updates_payoff_and_ratings():
    manager = LeagueManager(
        roles=[LeagueRole("MainPlayer")], pretrained=[PretrainedSpec("sl.pt")], payoff={"min_games": 0, "decay": 1.0}
    )
    job = None
    while job is None or job.opponent_ids != ("pretrained_default_0",):
        if job is not None:
            manager.cancel_job(job)
        job = manager.get_job("main_default_0")
    manager.finish_job(job, ["win", "win", "draw", "loss"])
    assert manager.payoff.record("main_default_0", "pretrained_default_0") == {
        "wins": 2,
        "draws": 1,
        "losses": 1,
        "games": 4,
    }
    assert manager.payoff.win_rate("pretrained_default_0", "main_default_0") == pytest.approx(0.375)
    assert manager.elo["main_default_0"] > 1000 > manager.elo["pretrained_default_0"]
    assert manager.skill["main_default_0"][0] > manager.skill["pretrained_default_0"][0]


def test_solo_league_records_results():
    manager = LeagueManager(
        roles=[LeagueRole("SoloActivePlayer", "a"), LeagueRole("SoloActivePlayer", "b")],
        payoff={"kind": "solo", "buffer_size": 2},
    )
    jobs = manager.step()
    assert [(j.player_id, j.opponent_ids, j.branch) for j in jobs] == [
        ("a_default_0", (), "solo"),
        ("b_default_0", (), "solo"),
    ]
    manager.finish_job(jobs[0], [1.0, 2.0, 3.0])
    assert isinstance(manager.payoff, SoloSharedPayoff)
    assert manager.payoff.results("a_default_0") == [2.0, 3.0]


def test_steps_snapshots_and_mutation():
    saved, loaded = [], []
    manager = make(
        seed=1,
        save_checkpoint_fn=lambda p, s: saved.append((p.player_id, s.player_id)),
        load_checkpoint_fn=lambda p, path: loaded.append((p.player_id, path)),
    )
    manager.update_active_player("exploiter_default_0", 59)
    manager.update_active_player("main_a_default_0", 59)
    assert manager.snapshot_due_players() == []  # one phase passed, not strong enough, not forced
    manager.update_active_player("exploiter_default_0", 1)
    (event,) = manager.snapshot_due_players()
    assert (event.player_id, event.historical_id, event.total_agent_step) == (
        "exploiter_default_0",
        "exploiter_default_0_60",
        60,
    )
    assert event.reset_to == manager.get_player("exploiter_default_0").initial_checkpoint_path
    assert saved == [("exploiter_default_0", "exploiter_default_0_60")]
    assert loaded == [("exploiter_default_0", event.reset_to)]
    assert manager.historical_players[-1].parent_id == "exploiter_default_0"
    assert manager.snapshot_due_players() == []
    with pytest.raises(ValueError, match="'nobody'"):
        manager.update_active_player("nobody", 1)


def test_concurrent_finish_job_keeps_counts_consistent():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # make the threads interleave as much as possible
    try:
        manager = LeagueManager(
            roles=[LeagueRole("MainPlayer", f"main_{i}") for i in range(4)],
            max_active_player_job=1000,
            payoff={"decay": 1.0},
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
        LeagueManager(roles=[LeagueRole("MainPlayer")]).load_state_dict(state)


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
            '{"class_path": "MainPlayer", "binding": "a", "settings": {"one_phase_step": 5}},'
            '{"class_path": "MainPlayer", "binding": "b"},'
            '{"class_path": "lightmarl.league.MainExploiter", "binding": "x"}], "payoff": {"decay": 0.9}, "seed": 3}}',
            "--player",
            '{"class_path": "lightmarl.league.MainPlayer", "init_args": {"player_id": "m", "settings": {"pfsp_prob": 0.2}}}',
        ]
    )
    built = parser.instantiate(config)
    league, player = built.league, built.player
    assert [p.player_id for p in league.players] == ["a_default_0", "b_default_0", "x_default_0"]
    assert league.payoff.decay == 0.9 and league.seed == 3
    assert league.active_players[0].settings.one_phase_step == 5
    assert isinstance(player, MainPlayer) and player.settings.pfsp_prob == 0.2


def test_a_state_with_player_categories_and_job_kwargs_still_loads():
    """League states written while players had a category and jobs carried per-role kwargs resume alike."""
    results = random.Random(7)
    first = make(seed=3, max_active_player_job=2)
    drive(first, 10, results)
    state = roundtrip(first.state_dict())
    assert state["historical"] and state["running_jobs"]
    old = copy.deepcopy(state)
    for player in old["historical"]:
        player["category"] = "default"
    for job in old["running_jobs"]:
        job.update(forward_kwargs={}, adder_kwargs={}, env_kwargs={})
    second = make(seed=99, max_active_player_job=2)
    second.load_state_dict(old)
    assert roundtrip(second.state_dict()) == state
