"""League snapshots describe themselves: each opens alone (`load_population`, `policy_uri`) and plays the
games it plays inside the league; an export carries the snapshots and mixtures."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

import lightmarl
from lightmarl.algorithms import PPO
from lightmarl.cli import main
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.pettingzoo.one_hot import one_hot_parallel_env
from lightmarl.league import LeagueRole, SnapshotStore
from lightmarl.policies import MLPActorCritic
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.population import PolicyBinding
from lightmarl.training.league import LeagueConfig
from lightmarl.training.module import MARLModule

RPS = {"env_fn": "pettingzoo.classic.rps_v2.parallel_env", "max_cycles": 3}


@pytest.fixture(scope="module")
def league_run(tmp_path_factory):
    where = tmp_path_factory.mktemp("league")
    league = LeagueConfig(
        roles=[LeagueRole("lightmarl.league.SelfPlayPlayer", "main", {"one_phase_step": 24, "pfsp_prob": 0.7})],
        seats=[["player_0"], ["player_1"]],
        max_resident=2,
        snapshot_dir=str(where / "league"),
        heatmap=False,
    )
    module = MARLModule(
        env=PettingZooEnvConfig(
            env_fn="lightmarl.envs.pettingzoo.one_hot.one_hot_parallel_env", env_kwargs=RPS, num_envs=4
        ),
        policy_bindings=[
            {"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [8]}}
        ],
        algorithm=PPO(minibatch_size=12, epochs=1, lr=0.05),
        rollout_steps=6,
        max_frames=4 * 6 * 8,
        iterations_per_epoch=2,
        league=league,
    )
    trainer = Trainer(
        max_epochs=-1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=str(where),
        callbacks=[ModelCheckpoint(dirpath=str(where / "checkpoints"), save_last=True, every_n_epochs=1)],
    )
    trainer.fit(module)
    return where, module


def _logits(policy, observations: torch.Tensor) -> torch.Tensor:
    rows = TensorDict({"player": {"observation": observations}}, batch_size=[observations.shape[0]])
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        return policy(rows)["player", "logits"]


def test_a_league_run_loads_as_its_bindings_with_the_snapshots_beside_them(league_run):
    """The league's opponent slots (league_opponent_<k>, holding whichever snapshot was last loaded)
    are no bindings of the loaded population; the snapshots are listed, and shown in its repr."""
    where, module = league_run
    assert any(b.startswith("league_opponent_") for b in module.policies)
    population = lightmarl.load_population(where)
    assert sorted(population.bindings) == ["main"]
    assert set(population.agent_map.values()) == {"main"}
    snapshots = [s.id for s in population.snapshots()]
    assert snapshots and all(s.startswith("main") for s in snapshots)
    assert "bindings ['main']" in repr(population) and f"{len(snapshots)} league snapshots" in repr(population)
    seated = lightmarl.load_population(where)
    seated.seat({"player_1": snapshots[-1]})  # a snapshot joins as a frozen binding on demand
    assert seated.agent_map["player_1"] == snapshots[-1]


def test_a_snapshot_opens_alone_and_acts_as_inside_the_league(league_run):
    where, module = league_run
    files = sorted((where / "league").glob("*.pt"))
    historical = [p for p in files if not p.stem.endswith("init")]
    assert historical, "the run made snapshots"
    group = module.env_spec.groups["player"]
    observations = torch.eye(4).unsqueeze(1).expand(4, 2, 4).clone()  # every one-hot observation, both seats
    for path in files:
        # Inside the league: an opponent slot (the player's class and kwargs) loads the file's weights.
        slot = MLPActorCritic(group, hidden_sizes=[8])
        slot.load_state_dict(SnapshotStore(max_resident=0).load(path))
        alone = lightmarl.load_population(path)
        (player,) = alone.bindings
        assert alone.agent_map == {"player_0": player, "player_1": player}
        assert torch.equal(_logits(alone.bindings[player], observations), _logits(slot, observations)), path.name
        npc = PolicyRegistry().get(PolicyBinding("npc", policy_uri=str(path), trainable=False), group)
        assert torch.equal(_logits(npc, observations), _logits(slot, observations)), path.name


def test_a_snapshot_plays_the_same_games_seated_from_the_checkpoint_or_the_export(league_run, tmp_path):
    where, module = league_run
    checkpoint = where / "checkpoints" / "last.ckpt"
    population = lightmarl.load_population(checkpoint)
    snapshots = population.snapshots()
    assert [s.id for s in snapshots] == [p.player_id for p in module.league.manager.historical_players]
    snapshot = snapshots[-1]
    main(["export", str(checkpoint), "--out", str(tmp_path / "exported"), "--mixture", f"late=main:1,{snapshot.id}:3"])
    exported = lightmarl.load_population(tmp_path / "exported")
    assert [s.id for s in exported.snapshots()] == [s.id for s in snapshots]
    assert exported.mixtures == {"late": {"main": 0.25, snapshot.id: 0.75}}
    alone = lightmarl.load_population(snapshot.path)  # the league's own file
    games = []
    for seated in (population, exported):
        seated.seat({"player_1": snapshot.id})
        torch.manual_seed(0)
        env = one_hot_parallel_env(**RPS)
        observations, _ = env.reset(seed=5)
        moves = []
        while env.agents:
            actions = seated.act(observations, greedy=False)
            moves.append(actions)
            observations, *_ = env.step(actions)
        games.append(moves)
        with torch.no_grad():
            eye = torch.eye(4).unsqueeze(1).expand(4, 2, 4).clone()
            assert torch.equal(
                _logits(seated.bindings[snapshot.id], eye), _logits(next(iter(alone.bindings.values())), eye)
            )
    assert games[0] == games[1] and len(games[0]) == 3


def test_bare_state_dicts_name_what_they_lack(tmp_path):
    path = tmp_path / "bare.pt"
    torch.save(MLPActorCritic(PettingZooEnvConfig(env_kwargs={"N": 3}).spec().groups["agent"]).state_dict(), path)
    with pytest.raises(ValueError, match=r"is a plain state dict .*policy_uri: PATH\?class_path="):
        lightmarl.load_population(path)
