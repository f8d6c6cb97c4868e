from __future__ import annotations

import os

import pytest
import torch

from lightmarl.league import LeagueManager, LeagueRole, SnapshotStore, detached_copy


def train(module: torch.nn.Module, steps: int = 3) -> None:
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    for _ in range(steps):
        optimizer.zero_grad()
        module(torch.randn(8, 4)).pow(2).sum().backward()
        optimizer.step()
    with torch.no_grad():
        module[1].running_mean.add_(1.0)  # buffers change in place too


def make_module() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_detached_copy_shares_no_memory():
    module = make_module()
    copy = detached_copy(module.state_dict())
    for key, tensor in module.state_dict().items():
        assert copy[key].data_ptr() != tensor.data_ptr()
        assert torch.equal(copy[key], tensor)


def test_training_the_live_module_leaves_snapshots_bit_identical(tmp_path):
    store = SnapshotStore(max_resident=2)
    module = make_module()
    expected = {}
    for version in range(4):
        path = str(tmp_path / f"p_{version}.pt")
        store.save(path, module.state_dict())
        expected[path] = {k: v.clone() for k, v in module.state_dict().items()}
        train(module)
    live = module.state_dict()
    assert not torch.equal(live["0.weight"], next(iter(expected.values()))["0.weight"])
    for path, weights in expected.items():
        assert_same(store.load(path), weights)  # from memory or from disk
        assert_same(torch.load(path, weights_only=True), weights)
    from_disk = SnapshotStore(max_resident=2)
    for path, weights in expected.items():
        assert_same(from_disk.load(path), weights)
    assert from_disk.loads_from_disk == len(expected)


def test_cache_holds_at_most_max_resident_and_loads_the_rest_on_demand(tmp_path):
    store = SnapshotStore(max_resident=3)
    paths = [str(tmp_path / f"s{i}.pt") for i in range(10)]
    for i, path in enumerate(paths):
        store.save(path, {"w": torch.full((2,), float(i))})
        assert len(store.resident) <= 3
    assert store.resident == paths[-3:]
    assert store.loads_from_disk == 0
    store.load(paths[8])  # from memory, now most recently used
    assert store.loads_from_disk == 0
    store.load(paths[0])  # from disk, evicts the least recently used (s7)
    assert store.resident == [paths[9], paths[8], paths[0]]
    store.load(paths[7])
    assert store.resident == [paths[8], paths[0], paths[7]]
    assert store.loads_from_disk == 2
    for i, path in enumerate(paths):
        assert store.load(path)["w"].tolist() == [float(i)] * 2
        assert len(store.resident) <= 3
    uncached = SnapshotStore(max_resident=0)
    uncached.load(paths[1])
    uncached.load(paths[1])
    assert uncached.resident == [] and uncached.loads_from_disk == 2


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path):
    store = SnapshotStore()
    target = tmp_path / "sub" / "snap.pt"
    store.save(target, {"w": torch.ones(3)})
    store.save(target, {"w": torch.zeros(3)})  # replaced in place
    assert os.listdir(tmp_path / "sub") == ["snap.pt"]
    assert torch.load(target, weights_only=True)["w"].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(Exception):  # noqa: B017 - whatever torch.save raises for an unpicklable value
        store.save(tmp_path / "sub" / "bad.pt", {"w": lambda: None})
    assert os.listdir(tmp_path / "sub") == ["snap.pt"]
    with pytest.raises(FileNotFoundError, match="missing"):
        store.load(tmp_path / "missing.pt")


def test_manager_snapshots_through_the_store_with_resets(tmp_path):
    store = SnapshotStore(max_resident=1)
    modules = {}
    saved = {}

    def save(player, snapshot):
        store.save(snapshot.checkpoint_path, modules[player.player_id].state_dict())
        saved[snapshot.player_id] = detached_copy(modules[player.player_id].state_dict())

    def load(player, path):
        modules[player.player_id].load_state_dict(store.load(path))

    manager = LeagueManager(
        roles=[
            LeagueRole("MainPlayer", "main", settings={"one_phase_step": 10}),
            LeagueRole("MainExploiter", "main_exploiter", settings={"one_phase_step": 10}),
        ],
        snapshot_dir=str(tmp_path),
        save_checkpoint_fn=save,
        load_checkpoint_fn=load,
    )
    for player in manager.active_players:
        modules[player.player_id] = make_module()
        store.save(player.initial_checkpoint_path, modules[player.player_id].state_dict())
    initial_exploiter = detached_copy(modules["main_exploiter_default_0"].state_dict())
    for _ in range(3):
        for player_id, module in modules.items():
            train(module)
            manager.update_active_player(player_id, 20)
        events = manager.snapshot_due_players()
        assert len(events) == 2
        exploiter_event = events[1]
        assert exploiter_event.reset_to == str(tmp_path / "main_exploiter_default_0_init.pt")
        assert_same(modules["main_exploiter_default_0"].state_dict(), initial_exploiter)
    assert len(manager.historical_players) == 6
    for snapshot in manager.historical_players:
        assert_same(store.load(snapshot.checkpoint_path), saved[snapshot.player_id])
    assert len(store.resident) == 1


def test_a_snapshot_damaged_on_disk_is_named_when_it_is_read_again(tmp_path):
    store = SnapshotStore(max_resident=1)
    path = str(tmp_path / "main_1.pt")
    store.save(path, torch.nn.Linear(2, 2).state_dict())
    store.save(str(tmp_path / "main_2.pt"), torch.nn.Linear(2, 2).state_dict())  # evicts main_1 from memory
    (tmp_path / "main_1.pt").write_bytes(b"overwritten")
    with pytest.raises(ValueError, match=rf"league snapshot '{path}' cannot be read: .*the file is damaged"):
        store.load(path)
