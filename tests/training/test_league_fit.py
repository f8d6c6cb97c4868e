"""League training through the real fit path: seatings per env copy and episode, snapshots, residency, resume."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from lightmarl import keys
from lightmarl.algorithms import PPO
from lightmarl.algorithms.dqn import DQN
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.errors import ConfigError
from lightmarl.league import LeagueRole, PayoffSettings, SnapshotStore
from lightmarl.training.league import SLOT_PREFIX, LeagueConfig, LeagueTraining
from lightmarl.training.module import MARLModule

ONE_HOT = "lightmarl.envs.pettingzoo.one_hot.one_hot_parallel_env"
CYCLES, NUM_ENVS, ROLLOUT = 3, 4, 6  # rollouts end on episode boundaries


def _module(
    tmp_path: Path, iterations: int, outcome: str | None = None, max_resident: int = 2, cycles: int = CYCLES
) -> MARLModule:
    league = LeagueConfig(
        roles=[
            LeagueRole(
                class_path="lightmarl.league.SelfPlayPlayer",
                binding="main",
                settings={"one_phase_step": 24, "pfsp_prob": 0.7},
            )
        ],
        seats=[["player_0"], ["player_1"]],
        max_resident=max_resident,
        snapshot_dir=str(tmp_path / "league"),
        heatmap=False,
        **({"outcome": outcome} if outcome else {}),
    )
    return MARLModule(
        env=PettingZooEnvConfig(
            env_fn=ONE_HOT,
            env_kwargs={"env_fn": "pettingzoo.classic.rps_v2.parallel_env", "max_cycles": cycles},
            num_envs=NUM_ENVS,
        ),
        policy_bindings=[
            {"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [8]}}
        ],
        algorithm=PPO(minibatch_size=12, epochs=1, lr=0.05),
        rollout_steps=ROLLOUT,
        max_frames=NUM_ENVS * ROLLOUT * iterations,
        iterations_per_epoch=2,
        league=league,
    )


def _trainer(tmp_path: Path, checkpoints: bool = False) -> Trainer:
    return Trainer(
        max_epochs=-1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
        enable_checkpointing=checkpoints,
        callbacks=[ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), save_last=True, every_n_epochs=1)]
        if checkpoints
        else [],
    )


def _on_disk(path: str | Path) -> dict[str, torch.Tensor]:
    """A snapshot file's weights (the files describe themselves: the weights are one entry)."""
    return SnapshotStore(max_resident=0).load(path)


def _record(module: MARLModule) -> dict[str, list[Any]]:
    """Keep every rollout, every seating and every snapshot's weights as saved."""
    seen: dict[str, list[Any]] = {"experience": [], "seatings": [], "snapshots": []}
    league = module.league
    assert league is not None
    after, apply, save = league.after_iteration, league._apply, league.store.save

    def after_iteration(experience):
        seen["experience"].append(experience.clone())
        return after(experience)

    def record_apply(seatings, on_deck=False):
        seen["seatings"].extend(seatings)
        return apply(seatings, on_deck)

    def record_save(path, state_dict, description=None):
        seen["snapshots"].append((str(path), copy.deepcopy({k: v.clone() for k, v in state_dict.items()})))
        return save(path, state_dict, description)

    league.after_iteration, league._apply, league.store.save = after_iteration, record_apply, record_save  # type: ignore[method-assign]
    return seen


def _fit_recorded(tmp_path: Path, iterations: int) -> tuple[MARLModule, LeagueTraining, dict[str, list[Any]]]:
    module = _module(tmp_path, iterations=iterations, max_resident=2)
    seen = _record(module)
    _trainer(tmp_path).fit(module)
    assert module.league is not None
    return module, module.league, seen


def test_opponents_swap_only_at_episode_ends_and_copies_play_different_opponents(tmp_path):
    module = _module(tmp_path, iterations=12)
    seen = _record(module)
    _trainer(tmp_path).fit(module)
    table = module.table
    slots = {table.index[b] for b in table.ids if b.startswith(SLOT_PREFIX)}
    main = table.index["main"]
    differ = swaps = 0
    for experience in seen["experience"]:
        rows = experience.get("player")
        binding, episode = rows.get(keys.BINDING_ID), rows.get(keys.EPISODE_ID)
        # One binding per (episode, agent): an episode never mixes two opponents.
        for e in episode.unique().tolist():
            for agent in range(2):
                mine = binding[..., agent][episode[..., agent] == e]
                assert mine.unique().numel() == 1, f"episode {e} agent {agent} played by {mine.tolist()}"
        # Each episode has the player (main) in one seat.
        assert bool(((binding == main).any(-1)).all())
        opponents = torch.where(binding[..., 0] == main, binding[..., 1], binding[..., 0])  # [E, T]
        differ += int(sum(opponents[:, t].unique().numel() > 1 for t in range(opponents.shape[1])))
        swaps += int((opponents[:, 1:] != opponents[:, :-1]).sum())
        assert set(opponents.unique().tolist()) <= slots | {main}
    assert differ > 0, "the copies of one vector never played different opponents at once"
    assert swaps > 0
    assert module.league.manager.historical_players  # type: ignore[union-attr]


def test_snapshots_stay_bit_identical_while_the_live_binding_trains(tmp_path):
    module, league, seen = _fit_recorded(tmp_path, iterations=12)
    snapshots = [(p, s) for p, s in seen["snapshots"] if not p.endswith("_init.pt")]
    assert len(snapshots) >= 3
    live = module.get_weights("main")
    for path, saved in snapshots:
        on_disk = _on_disk(path)
        assert all(torch.equal(on_disk[k], saved[k]) for k in saved), f"{path} changed after it was saved"
    # The live binding moved on after the snapshots it took before its last update.
    assert any(not torch.equal(snapshots[0][1][k], live[k]) for k in live)
    # Slots hold exactly the snapshot file of the player they name.
    assert league.matchmaker is not None
    for k, player_id in enumerate(league.matchmaker.slots):
        if player_id is not None:
            path = league.manager.get_player(player_id).checkpoint_path
            weights = module.get_weights(f"{SLOT_PREFIX}{k}")
            assert all(torch.equal(weights[name], value) for name, value in _on_disk(path).items())


def test_opponent_weights_in_memory_are_bounded_by_max_resident(tmp_path):
    module, league, seen = _fit_recorded(tmp_path, iterations=16)
    assert len(league.manager.historical_players) > 2
    assert [b for b in module.policies if b.startswith(SLOT_PREFIX)] == [f"{SLOT_PREFIX}0", f"{SLOT_PREFIX}1"]
    assert len(league.store.resident) <= 2
    assert sum(s.load is not None for s in seen["seatings"]) > 2  # snapshots were swapped through the slots
    # Every episode launched is counted under the branch of its job; the openskill rating is logged.
    logs = league.metrics()
    jobs = {k.rsplit("/", 1)[1]: v for k, v in logs.items() if k.startswith("league/main_default_0/jobs/")}
    assert sum(jobs.values()) == len(seen["seatings"])
    assert set(jobs) <= {"pfsp", "self_play", "fallback"} and jobs["pfsp"] > 0 and jobs["self_play"] > 0
    assert logs["league/main_default_0/openskill_ordinal"] == league.manager.skill.ordinal("main_default_0") != 0.0


def _league_trace(seen: dict[str, list[Any]]) -> list[tuple]:
    return [(s.copy, s.job_id, s.opponent_id, s.seat, s.opponent_binding) for s in seen["seatings"]]


@pytest.mark.parametrize("cycles", [CYCLES, 5], ids=["episode-boundary", "mid-episode"])
def test_resume_continues_the_league_exactly(tmp_path, cycles):
    """fit 2N iterations == fit N, then ``ckpt_path=last`` for N more: the same jobs, payoff, league state and
    weights, also when the checkpoint falls mid-episode (5-step games, 12 steps per copy between checkpoints)."""
    n = 8  # iterations_per_epoch is 2: the checkpoint after N lands on an epoch end
    torch.manual_seed(0)  # the same initial weights and action samples in both runs
    whole = _module(tmp_path / "whole", iterations=2 * n, outcome="league_scripts.always_draw", cycles=cycles)
    seen_whole = _record(whole)
    _trainer(tmp_path / "whole").fit(whole)

    torch.manual_seed(0)
    first = _module(tmp_path / "split", iterations=n, outcome="league_scripts.always_draw", cycles=cycles)
    seen_first = _record(first)
    _trainer(tmp_path / "split", checkpoints=True).fit(first)
    second = _module(tmp_path / "split", iterations=2 * n, outcome="league_scripts.always_draw", cycles=cycles)
    seen_second = _record(second)
    _trainer(tmp_path / "split", checkpoints=True).fit(second, ckpt_path=str(tmp_path / "split" / "ckpt" / "last.ckpt"))

    assert _league_trace(seen_first) + _league_trace(seen_second) == _league_trace(seen_whole)
    state_whole = whole.league.state_dict()["matchmaker"]  # type: ignore[union-attr]
    state_split = second.league.state_dict()["matchmaker"]  # type: ignore[union-attr]
    for state in (state_whole, state_split):
        for player in state["manager"]["historical"]:
            player["checkpoint_path"] = Path(player["checkpoint_path"]).name  # the runs write to two folders
        for seating in state["seatings"]:
            seating["load"] = seating["load"] and Path(seating["load"]).name
    assert state_split == state_whole
    assert len(state_whole["manager"]["historical"]) >= 2
    weights_whole, weights_split = whole.get_weights("main"), second.get_weights("main")
    assert all(torch.equal(weights_whole[k], weights_split[k]) for k in weights_whole)


def _main_and_exploiter(tmp_path: Path, spec: dict[str, Any], algorithm: Any) -> MARLModule:
    """A MainPlayer ("main") and a MainExploiter ("exploiter") on one-round rock-paper-scissors."""
    league = LeagueConfig(
        roles=[
            LeagueRole(class_path="lightmarl.league.MainPlayer", binding="main", settings={"one_phase_step": 24}),
            LeagueRole(
                class_path="lightmarl.league.MainExploiter", binding="exploiter", settings={"one_phase_step": 24}
            ),
        ],
        max_resident=2,
        snapshot_dir=str(tmp_path / "league"),
        heatmap=False,
    )
    return MARLModule(
        env=PettingZooEnvConfig(
            env_fn=ONE_HOT, env_kwargs={"env_fn": "pettingzoo.classic.rps_v2.parallel_env", "max_cycles": 1}, num_envs=4
        ),
        policy_bindings=[{"id": "main", **spec}, {"id": "exploiter", **spec}],
        algorithm=algorithm,
        rollout_steps=4,
        max_frames=16 * 12,
        iterations_per_epoch=4,
        league=league,
    )


def test_a_main_exploiter_resets_to_its_initial_weights_and_a_fresh_optimizer(tmp_path):
    spec = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [8]}}
    module = _main_and_exploiter(tmp_path, spec, PPO(minibatch_size=8, epochs=1, lr=0.05))
    assert module.league is not None
    resets: list[str] = []
    load_live = module.league._load_live

    def checked_load_live(player_id: str, path: str) -> None:
        load_live(player_id, path)
        resets.append(player_id)
        binding = module.league.binding_of(player_id)  # type: ignore[union-attr]
        initial = _on_disk(path)
        assert path.endswith("_init.pt")
        assert all(torch.equal(module.get_weights(binding)[k], v) for k, v in initial.items())
        optimizer = module.named_optimizers()[binding]
        assert not getattr(optimizer, "optimizer", optimizer).state  # Adam's moments are gone

    module.league._load_live = checked_load_live  # type: ignore[method-assign]
    _trainer(tmp_path).fit(module)
    assert "exploiter_default_0" in resets and "main_default_0" not in resets
    parents = {p.parent_id for p in module.league.manager.historical_players}
    assert parents == {"main_default_0", "exploiter_default_0"}


def test_a_solo_league_records_returns_and_the_last_player_copies_the_best(tmp_path):
    """Two PopulationBasedPlayers on a cooperative task: each copy is the worse player loading the better one's newest snapshot."""
    league = LeagueConfig(
        roles=[
            LeagueRole(
                class_path="lightmarl.league.PopulationBasedPlayer",
                binding=binding,
                settings={"one_phase_step": 32, "min_results": 2},
            )
            for binding in ("fast", "slow")
        ],
        payoff=PayoffSettings(kind="solo", buffer_size=8),
        snapshot_dir=str(tmp_path / "league"),
    )
    spec = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [8]}}
    module = MARLModule(
        env=PettingZooEnvConfig(
            env_fn="lightmarl.envs.testing.match.parallel_env",
            env_kwargs={"num_agents": 2, "nvec": [2], "action_mask": False, "max_cycles": 4},
            num_envs=4,
        ),
        policy_bindings=[{"id": "fast", **spec}, {"id": "slow", **spec}],
        algorithm=PPO(minibatch_size=8, epochs=1, lr=0.05),
        algorithms={"slow": PPO(minibatch_size=8, epochs=1, lr=1e-5)},
        rollout_steps=8,
        max_frames=4 * 8 * 12,
        iterations_per_epoch=4,
        league=league,
    )
    assert module.league is not None and module.league.slot_ids == []  # nothing to hold: no opponents
    copies: list[tuple[str, str]] = []
    load_live = module.league._load_live

    def checked_load_live(player_id: str, path: str) -> None:
        payoff = module.league.manager.payoff  # type: ignore[union-attr]
        means = {p: sum(payoff.results(p)) / len(payoff.results(p)) for p in ("fast_default_0", "slow_default_0")}
        other = "slow_default_0" if player_id == "fast_default_0" else "fast_default_0"
        assert means[player_id] <= means[other]  # only the last-ranked player copies
        assert Path(path).name.startswith(other)  # a snapshot of the other player, never its own
        load_live(player_id, path)
        binding = module.league.binding_of(player_id)  # type: ignore[union-attr]
        copied = _on_disk(path)
        assert all(torch.equal(module.get_weights(binding)[k], v) for k, v in copied.items())
        copies.append((player_id, path))

    module.league._load_live = checked_load_live  # type: ignore[method-assign]
    _trainer(tmp_path).fit(module)
    assert copies
    payoff = module.league.manager.payoff
    for player in ("fast_default_0", "slow_default_0"):
        returns = payoff.results(player)  # type: ignore[union-attr]
        assert len(returns) == 8 and all(0.0 <= r <= 8.0 for r in returns)  # 2 agents x 4 steps x at most 1
    logs = module.league.metrics()
    assert logs["league/fast_default_0/resets"] + logs["league/slow_default_0/resets"] == len(copies)


def test_a_reset_off_policy_player_restarts_its_targets_and_replay(tmp_path):
    """A main exploiter learning with DQN: after each reset its target network equals the loaded weights and its replay is empty."""
    spec = {"class_path": "lightmarl.policies.qnet.QNetworkPolicy", "policy_kwargs": {"hidden_sizes": [8]}}
    module = _main_and_exploiter(tmp_path, spec, DQN(batch_size=8, learning_starts=8, buffer_size=1000))
    assert module.league is not None
    restarts: list[int] = []
    load_live = module.league._load_live

    def checked_load_live(player_id: str, path: str) -> None:
        unit = module.marl_trainer.unit_trainers[module.league.binding_of(player_id)]  # type: ignore[union-attr]
        assert len(unit.replay) > 0  # it had learned from transitions before the reset
        load_live(player_id, path)
        assert len(unit.replay) == 0
        online = [p.detach() for p in unit.loss.value_network_params.values(True, True)]
        assert all(torch.equal(t, o) for t, o in zip(unit.target_parameters(), online, strict=True))
        restarts.append(len(online))

    module.league._load_live = checked_load_live  # type: ignore[method-assign]
    _trainer(tmp_path).fit(module)
    assert restarts and restarts[0] > 0


def test_a_moved_run_directory_resumes_with_its_snapshots(tmp_path):
    """The league state keeps snapshot paths relative to the snapshot folder: move the run, resume, same league."""
    n = 8
    torch.manual_seed(0)
    whole = _module(tmp_path / "whole", iterations=2 * n, outcome="league_scripts.always_draw")
    seen_whole = _record(whole)
    _trainer(tmp_path / "whole").fit(whole)

    torch.manual_seed(0)
    first = _module(tmp_path / "before", iterations=n, outcome="league_scripts.always_draw")
    seen_first = _record(first)
    _trainer(tmp_path / "before", checkpoints=True).fit(first)
    (tmp_path / "before").rename(tmp_path / "after")
    second = _module(tmp_path / "after", iterations=2 * n, outcome="league_scripts.always_draw")
    seen_second = _record(second)
    _trainer(tmp_path / "after", checkpoints=True).fit(second, ckpt_path=str(tmp_path / "after" / "ckpt" / "last.ckpt"))

    assert _league_trace(seen_first) + _league_trace(seen_second) == _league_trace(seen_whole)
    historical = second.league.manager.historical_players  # type: ignore[union-attr]
    assert len(historical) >= 2
    assert all(Path(h.checkpoint_path).parent == tmp_path / "after" / "league" for h in historical)
    weights_whole, weights_split = whole.get_weights("main"), second.get_weights("main")
    assert all(torch.equal(weights_whole[k], weights_split[k]) for k in weights_whole)


def test_an_exact_meta_game_needs_an_openspiel_game(tmp_path):
    module = _module(tmp_path, 2)
    module.league.config.meta_game = "exact"
    with pytest.raises(ConfigError, match=r"league\.meta_game: exact needs an OpenSpiel game"):
        _trainer(tmp_path).fit(module)
