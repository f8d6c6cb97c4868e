"""Saved policies load without running code from the file, unless a binding opts in."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.inference import load_population
from lightmarl.policies import MLPActorCritic, PolicyDict
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.population import PolicyBinding

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "assets/checkpoints/simple_spread_mappo_150k.ckpt"
GROUP = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 25}).spec().groups["agent"]


class WritesMarker:
    """Unpickling it opens ``path`` for writing: proof that code from the file ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def crafted(tmp_path: Path, valid: dict) -> tuple[Path, Path]:
    """``valid`` (a legitimate saved dict) with a payload appended, and the marker it would write."""
    marker = tmp_path / "marker"
    path = tmp_path / "crafted.ckpt"
    torch.save({**valid, "payload": WritesMarker(marker)}, path)
    return path, marker


def test_lightmarl_files_load_weights_only(tmp_path):
    policy = PolicyRegistry().get(PolicyBinding("npc", policy_uri=f"{ASSET}#main", trainable=False), GROUP)
    assert isinstance(policy, MLPActorCritic)
    PolicyDict({"main": policy}, {"main": GROUP}).export(tmp_path / "population")
    assert set(load_population(tmp_path / "population").bindings) == {"main"}
    torch.save(policy.state_dict(), tmp_path / "weights.pt")
    uri = f"{tmp_path / 'weights.pt'}?class_path=lightmarl.policies.MLPActorCritic"
    assert isinstance(PolicyRegistry().get(PolicyBinding("b", policy_uri=uri), GROUP), MLPActorCritic)


def test_a_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path):
    path, marker = crafted(tmp_path, torch.load(ASSET, map_location="cpu", weights_only=True))
    binding = PolicyBinding("npc", policy_uri=f"{path}#main", trainable=False)
    with pytest.raises(ValueError, match=r"binding 'npc'.policy_uri: .*pickled Python objects.*trust_pickle: true"):
        PolicyRegistry().get(binding, GROUP)
    with pytest.raises(ValueError, match=r"load_population: .*trust_pickle"):
        load_population(path)
    assert not marker.exists()


def test_a_crafted_state_dict_is_refused_and_runs_nothing(tmp_path):
    path, marker = crafted(tmp_path, MLPActorCritic(GROUP).state_dict())
    binding = PolicyBinding("npc", policy_uri=f"{path}?class_path=lightmarl.policies.MLPActorCritic")
    with pytest.raises(ValueError, match=r"pickled Python objects"):
        PolicyRegistry().get(binding, GROUP)
    assert not marker.exists()


def test_trust_pickle_is_an_explicit_per_binding_opt_in(tmp_path):
    path, marker = crafted(tmp_path, torch.load(ASSET, map_location="cpu", weights_only=True))
    policy = PolicyRegistry().get(PolicyBinding("npc", policy_uri=f"{path}#main", trust_pickle=True), GROUP)
    assert isinstance(policy, MLPActorCritic)
    assert marker.exists()  # the opt-in really unpickles: the docs warn that code in the file runs


def test_truncated_and_missing_files_are_config_errors(tmp_path):
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(ASSET.read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"is not a torch file"):
        PolicyRegistry().get(PolicyBinding("npc", policy_uri=f"{truncated}#main"), GROUP)
    with pytest.raises(ValueError, match=r"no file at"):
        PolicyRegistry().get(PolicyBinding("npc", policy_uri=f"{tmp_path / 'absent.ckpt'}#main"), GROUP)
