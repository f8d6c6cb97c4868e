"""One saved-population description: `SavedPopulation.to_dict` / `from_dict` keep every field, and what
each writer (a checkpoint, a league snapshot, an export, `PolicyDict`) writes is read by the one reader,
`read_artifact`, into the same description."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import torch

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.transforms import ObservationNorm
from lightmarl.league.snapshots import SnapshotStore
from lightmarl.policies import PolicyDict
from lightmarl.policies.artifact import FIELDS, SavedPopulation, Snapshot, read_artifact, write_artifact
from lightmarl.training.checkpoint import describe_population
from lightmarl.training.module import MARLModule

MLP = "lightmarl.policies.MLPActorCritic"
ENCODER = {"class_path": "lightmarl.policies.encoders.MLPEncoder", "init_args": {"hidden_sizes": [], "out_features": 8}}


def plain(value: Any) -> Any:
    """``value`` with tensors as lists and tuples as lists (what JSON keeps), to compare descriptions."""
    return json.loads(json.dumps(value, default=lambda t: t.tolist()))


def a_module() -> MARLModule:
    """Two bindings sharing an encoder, one of them frozen, in env copies seated differently, with an
    ObservationNorm whose statistics have moved, and counters that are not zero."""
    env = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 5}, num_envs=2, transforms=[ObservationNorm(clip=5.0)])
    module = MARLModule(
        env=env,
        policy_bindings=[
            {"id": "a", "class_path": MLP, "policy_kwargs": {"hidden_sizes": [8]}},
            {"id": "b", "class_path": MLP, "policy_kwargs": {"hidden_sizes": [8]}, "trainable": False},
        ],
        agent_binding_map={"default": ["a", "b", "b"], "per_env": {1: ["b", "a", "a"]}},
        shared_modules={"enc": {**ENCODER, "shared_between": {"a": "encoder", "b": "encoder"}}},
    )
    norm = env.transforms[0]
    norm.load_state_dict({k: v + 1.5 if isinstance(v, torch.Tensor) else v for k, v in norm.state_dict().items()})
    module.frames, module.iterations = 1234, 7
    return module


def full_population() -> SavedPopulation:
    """A description with every field set to something other than its default."""
    population = describe_population(a_module())
    population.snapshots = [Snapshot("a_1", "a", {**population.bindings["a"], "trainable": False}, "league/a_1.pt")]
    population.mixtures = {"a": {"a": 0.25, "a_1": 0.75}}
    return population


def test_the_dataclass_and_its_layout_name_the_same_fields():
    own = {f.name for f in dataclasses.fields(SavedPopulation)} - {"state", "source"}
    assert own == set(FIELDS)
    assert set(full_population().to_dict()) == {"format", *FIELDS}


def test_to_dict_from_dict_keeps_every_field():
    population = full_population()
    for name in FIELDS:
        assert getattr(population, name), f"the fixture leaves {name} empty: the round trip would not test it"
    data = population.to_dict()
    again = SavedPopulation.from_dict(data, state={}, source="x")
    assert plain(again.to_dict()) == plain(data)
    for name in FIELDS:
        if name != "snapshots":
            assert plain(getattr(again, name)) == plain(getattr(population, name)), name
    assert [dataclasses.astuple(s) for s in again.snapshots] == [dataclasses.astuple(s) for s in population.snapshots]


@pytest.mark.parametrize("name", FIELDS)
def test_a_description_without_a_field_is_refused_by_name(name):
    data = full_population().to_dict()
    del data[name]
    with pytest.raises(ValueError, match=rf"does not describe a lightmarl population \(no \['{name}'\]\)"):
        SavedPopulation.from_dict(data, state={}, source="x")


def test_every_writer_is_read_by_the_one_reader(tmp_path):
    module = a_module()
    expected = plain(describe_population(module).to_dict())
    weights = {k[len("population.policies.") :]: v for k, v in module.state_dict().items()}

    # A training checkpoint (MARLModule.on_save_checkpoint).
    checkpoint = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, tmp_path / "run.ckpt")
    from_checkpoint = read_artifact(tmp_path / "run.ckpt")
    assert plain(from_checkpoint.to_dict()) == expected
    assert from_checkpoint.state.keys() == weights.keys()
    assert all(torch.equal(from_checkpoint.state[k], v) for k, v in weights.items())

    # An export of it (lightmarl export): the same description, JSON and safetensors inside.
    write_artifact(from_checkpoint, tmp_path / "exported")
    from_export = read_artifact(tmp_path / "exported")
    assert plain(from_export.to_dict()) == expected
    assert all(torch.equal(from_export.state[k], v) for k, v in weights.items())

    # A league snapshot of binding "a", saved as player "a_1".
    description = {**module.snapshot_description("a"), "player": "a_1"}
    SnapshotStore().save(tmp_path / "a_1.pt", module.get_weights("a"), description)
    snapshot = read_artifact(tmp_path / "a_1.pt")
    assert list(snapshot.bindings) == ["a_1"]
    entry = {k: v for k, v in expected["bindings"]["a"].items() if k != "trainable"}
    assert plain(snapshot.bindings["a_1"]) == entry
    for name in ("transforms", "env", "shared_modules", "counters"):
        assert plain(getattr(snapshot, name)) == expected[name], name
    assert snapshot.agent_binding_map["default"] == dict.fromkeys(module.env_spec.groups["agent"].agents, "a_1")
    assert all(torch.equal(snapshot.state[f"a_1.{k}"], v) for k, v in module.get_weights("a").items())

    # PolicyDict (policies held in Python): bindings, groups and shared modules, as the module has them.
    PolicyDict.from_module(module).export(tmp_path / "policies")
    from_dict = read_artifact(tmp_path / "policies")
    for name in ("bindings", "groups", "shared_modules"):
        mine = plain(getattr(from_dict, name))
        theirs = expected[name] if name != "bindings" else {
            b: {k: v for k, v in e.items() if k != "trainable"} for b, e in expected["bindings"].items()
        }  # fmt: skip
        assert mine == theirs, name
    assert all(torch.equal(from_dict.state[k], v) for k, v in weights.items())
