"""`lightmarl export`: a run's policies as population.json + safetensors, loadable for inference,
as a frozen NPC through `policy_uri`, with shared modules still shared (the README's inference section
runs in tests/inference/test_readme_inference.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from expectations import tiny_cli_run
from lightmarl.cli import main
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.inference import load_population
from lightmarl.policies import MLPActorCritic
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.population import PolicyBinding

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "assets/checkpoints/simple_spread_mappo_150k.ckpt"
GROUP = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 25}).spec().groups["agent"]


def test_export_writes_weights_and_a_description_that_load_back(tmp_path, capsys):
    main(["export", str(ASSET), "--out", str(tmp_path / "exported")])
    assert "lightmarl: exported main to" in capsys.readouterr().out
    description = json.loads((tmp_path / "exported/population.json").read_text())
    assert description["format"] == "lightmarl.population/1" and set(description["bindings"]) == {"main"}
    assert sorted(p.name for p in (tmp_path / "exported").iterdir()) == ["population.json", "weights.safetensors"]
    trained = load_population(ASSET).bindings["main"].state_dict()
    exported = load_population(tmp_path / "exported").bindings["main"].state_dict()
    assert exported.keys() == trained.keys()
    for key, value in trained.items():
        assert torch.equal(exported[key], value), key
    # As a frozen NPC in another recipe: `policy_uri: DIR#binding`.
    npc = PolicyRegistry().get(PolicyBinding("npc", policy_uri=f"{tmp_path / 'exported'}#main", trainable=False), GROUP)
    assert isinstance(npc, MLPActorCritic)
    assert all(torch.equal(npc.state_dict()[k], v) for k, v in exported.items())


def test_export_keeps_shared_modules_shared_and_can_select_bindings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(
        [
            "fit",
            "--config",
            str(ROOT / "recipes/centralized_critic.yaml"),
            *tiny_cli_run(ROOT / "recipes/centralized_critic.yaml"),
        ]
    )
    checkpoint = next(tmp_path.rglob("last.ckpt"))
    main(["export", str(checkpoint), "--out", "all"])
    policies = load_population("all").bindings
    shared = json.loads(Path("all/population.json").read_text())["shared_modules"]
    assert shared, "the recipe shares modules"
    for name, spec in shared.items():
        users = [getattr(policies[b], argument) for b, argument in spec["shared_between"].items()]
        assert len(users) > 1 and all(u is users[0] for u in users), name
    first = sorted(policies)[0]
    main(["export", str(checkpoint), "--out", "one", "--bindings", first])
    assert list(load_population("one").bindings) == [first]


def test_bad_exports_fail_in_one_line(tmp_path, capsys):
    main(["export", str(ASSET), "--out", str(tmp_path / "exported")])
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(ASSET), "--out", str(tmp_path / "x"), "--bindings", "ghost"])
    assert exit_info.value.code == 2 and "no bindings ['ghost']" in capsys.readouterr().err
    weights = tmp_path / "exported/weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"cannot read .*weights.safetensors"):
        load_population(tmp_path / "exported")
