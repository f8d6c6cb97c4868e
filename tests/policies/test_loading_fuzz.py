"""Files are data (lightmarl.trust): generated checkpoints, exports and league snapshots
whose strings name importable callables load, or fail with a ValueError, without importing or calling any of them.

Every string a saved population holds (class paths, keyword arguments, group and env fields, the
env constructor of an old checkpoint, hyper-parameters) is replaced by a payload: ``subprocess.run``,
``os.system``, or a module created here whose import, function and class each leave a trace. The
loaders run through ``policy_uri``, ``load_population``, ``--ckpt_path``, ``lightmarl export`` and the
league's snapshot store; afterwards nothing may have been recorded.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from lightmarl.cli import main
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.inference import load_population
from lightmarl.policies import PolicyDict
from lightmarl.policies.encoders import MLPEncoder
from lightmarl.policies.exported import DESCRIPTION_FILE, WEIGHTS_FILE
from lightmarl.policies.registry import PolicyRegistry, build_policy
from lightmarl.population import PolicyBinding
from lightmarl.trust import UntrustedCodeError

ROOT = Path(__file__).resolve().parents[2]
GROUP = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 25}).spec().groups["agent"]
MODULE = "lm_fuzz_payload"
PAYLOAD_SOURCE = f"""
import os
from pathlib import Path

import torch

MARKER = Path(os.environ["LM_FUZZ_MARKER"])
with MARKER.open("a") as trace:
    trace.write("imported {MODULE}\\n")


def boom(*args, **kwargs):
    with MARKER.open("a") as trace:
        trace.write("called boom\\n")


class Evil(torch.nn.Module):
    out_features = 4

    def __init__(self, *args, **kwargs):
        super().__init__()
        with MARKER.open("a") as trace:
            trace.write("built Evil\\n")
"""
PAYLOADS = [
    "subprocess.run",
    "os.system",
    MODULE,
    f"{MODULE}.boom",
    f"{MODULE}.Evil",
    "lightmarl.policies.registry.subprocess.run",  # through an allowed package to a function elsewhere
    "lightmarl.cli.main",
]


@pytest.fixture
def traps(tmp_path, monkeypatch):
    """The payload module on sys.path, and recorders in place of subprocess.run / os.system; yields the trace."""
    (tmp_path / "payload").mkdir()
    (tmp_path / "payload" / f"{MODULE}.py").write_text(PAYLOAD_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "payload"))
    marker = tmp_path / "trace.txt"
    monkeypatch.setenv("LM_FUZZ_MARKER", str(marker))
    calls: list[str] = []
    real_run = subprocess.run

    def run(*args: Any, **kwargs: Any) -> Any:
        # lightmarl's own use (the env runner asks a Python child for its sys.path) passes through.
        if args and isinstance(args[0], list) and args[0][:1] == [sys.executable]:
            return real_run(*args, **kwargs)
        calls.append(f"subprocess.run{args}{kwargs}")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(f"os.system{a}"))
    sys.modules.pop(MODULE, None)

    def happened() -> list[str]:
        trace = marker.read_text().splitlines() if marker.exists() else []
        return calls + trace + ([f"{MODULE} in sys.modules"] if MODULE in sys.modules else [])

    yield happened
    sys.modules.pop(MODULE, None)


def _population() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A real saved population: a shared encoder, an encoder spec inside policy_kwargs, two groups of fields."""
    shared_spec = {"class_path": "lightmarl.policies.encoders.MLPEncoder", "init_args": {"out_features": 8}}
    encoder = MLPEncoder(GROUP, out_features=8)
    a = build_policy(
        "lightmarl.policies.MLPActorCritic",
        {"hidden_sizes": [8], "activation": "tanh"},
        GROUP,
        field="a",
        injected={"encoder": ("enc", encoder)},
    )
    b = build_policy(
        "lightmarl.policies.MLPActorCritic",
        {"hidden_sizes": [8], "encoder": {"class_path": "lightmarl.policies.encoders.MLPEncoder", "init_args": {}}},
        GROUP,
        field="b",
    )
    policies = PolicyDict({"a": a, "b": b}, {"a": GROUP, "b": GROUP}, {"enc": shared_spec})
    state = {k: v.detach().clone() for k, v in policies.state_dict().items()}
    return json.loads(json.dumps(policies.population().to_dict())), state


DESCRIPTION, STATE = _population()


def _strings(node: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every string value (list items included) of a description."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _strings(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _strings(v, (*path, i))]
    return [path] if isinstance(node, str) else []


def _set(node: Any, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _is_reference(path: tuple) -> bool:
    """A string that names another part of the file (a group, a shared module) rather than code or data."""
    return (
        (path[0] == "bindings" and path[2] in ("group", "shared_modules"))
        or path[0] in ("groups", "agent_binding_map")
        or path == ("format",)
    )


@st.composite
def poisoned(draw: st.DrawFn) -> dict[str, Any]:
    """The real description with strings replaced by payloads, and more.

    Either every string is replaced, or a drawn subset of those that are not references inside the
    file (so that the loaders get as far as the classes and their arguments).
    """
    description = copy.deepcopy(DESCRIPTION)
    description["env"] = {"env_fn": "mpe2.simple_spread_v3.parallel_env", "env_kwargs": {"N": 3}}
    paths = _strings(description)
    if draw(st.sampled_from(["every string", "some", "some"])) == "every string":
        chosen = paths
    else:
        chosen = draw(st.lists(st.sampled_from([p for p in paths if not _is_reference(p)]), min_size=1, unique=True))
    for path in chosen:
        _set(description, path, draw(st.sampled_from(PAYLOADS)))
    if draw(st.booleans()):  # an encoder spec the recipe never saw
        entry = description["bindings"][draw(st.sampled_from(["a", "b"]))]
        entry["policy_kwargs"]["encoder"] = {"class_path": draw(st.sampled_from(PAYLOADS)), "init_args": {}}
    if draw(st.booleans()):  # no group specs: a file that would need the env it names to build them
        description.pop("groups")
        description["env"]["env_fn"] = draw(st.sampled_from(PAYLOADS))
    return description


def _checkpoint(description: dict[str, Any]) -> dict[str, Any]:
    state = {f"population.policies.{k}": v for k, v in STATE.items()}
    env_fn = description.get("env", {}).get("env_fn", "x.y")
    return {
        "state_dict": state,
        "pytorch-lightning_version": "2.6.6",
        "lightmarl": {"population": description},
        "hyper_parameters": {"env": {"env_fn": env_fn}, "policy_mapping_fn": env_fn},
    }


def _write_all(tmp: Path, description: dict[str, Any]) -> dict[str, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    files = {"checkpoint": tmp / "run.ckpt", "export": tmp / "exported"}
    torch.save(_checkpoint(description), files["checkpoint"])
    files["export"].mkdir()
    (files["export"] / DESCRIPTION_FILE).write_text(json.dumps(description))
    save_file({k: v.contiguous() for k, v in STATE.items()}, str(files["export"] / WEIGHTS_FILE))
    return files


def test_the_unpoisoned_files_load(tmp_path, traps):
    files = _write_all(tmp_path, {**copy.deepcopy(DESCRIPTION), "env": {"env_fn": "x.y"}})
    for path in files.values():
        assert set(load_population(path).bindings) == {"a", "b"}
        PolicyRegistry().get(PolicyBinding("npc", policy_uri=f"{path}#b", trainable=False), GROUP)
    assert traps() == []


@settings(max_examples=int(os.environ.get("LIGHTMARL_FUZZ_EXAMPLES", "25")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(description=poisoned(), binding=st.sampled_from(["a", "b"]), data=st.data())
def test_poisoned_files_run_nothing_through_policy_uri_and_load_population(
    description, binding, data, tmp_path_factory, traps
):
    files = _write_all(tmp_path_factory.mktemp("poisoned"), description)
    _load_both_ways(files[data.draw(st.sampled_from(sorted(files)))], binding)
    assert traps() == []


def _load_both_ways(path: Path, binding: str) -> int:
    """``load_population(path)`` and ``policy_uri: path#binding``; how many were refused by the loading rule.

    Any other ``ValueError`` is fine too: the poisoned data then did not describe a policy.
    """
    refused = 0
    for load in (
        lambda: load_population(path),
        lambda: PolicyRegistry().get(PolicyBinding("npc", policy_uri=f"{path}#{binding}"), GROUP),
    ):
        try:
            load()
        except UntrustedCodeError:
            refused += 1
        except ValueError:
            pass
    return refused


def test_each_string_field_alone_names_each_payload_and_nothing_runs(tmp_path, traps):
    """Exhaustively: one field at a time (the rest of the file intact, so loading gets as far as it can)."""
    base = {**copy.deepcopy(DESCRIPTION), "env": {"env_fn": "x.y"}}
    fields = [path for path in _strings(base) if not _is_reference(path)]
    assert len(fields) >= 6
    refused = 0
    for n, (path, payload) in enumerate((p, x) for p in fields for x in PAYLOADS):
        description = copy.deepcopy(base)
        _set(description, path, payload)
        files = _write_all(tmp_path / str(n), description)
        for kind, binding in (("checkpoint", "a"), ("export", "b")):
            refused += _load_both_ways(files[kind], binding)
        assert traps() == [], (path, payload)
    assert refused > 0


def test_the_recipe_may_allow_a_class_and_trust_code_opens_the_door(tmp_path, traps):
    description = copy.deepcopy(DESCRIPTION)
    description["bindings"]["b"]["policy_kwargs"]["encoder"]["class_path"] = f"{MODULE}.Evil"
    path = _write_all(tmp_path, description)["export"]
    with pytest.raises(ValueError, match=rf"names '{MODULE}.Evil'.*trust_code"):
        load_population(path)
    assert traps() == []
    # Named by the recipe (a binding's policy_kwargs): now it is the recipe's code, and it is built.
    recipe_kwargs = {"encoder": {"class_path": f"{MODULE}.Evil"}}
    binding = PolicyBinding("npc", policy_uri=f"{path}#b", policy_kwargs=recipe_kwargs, trainable=False)
    with pytest.raises(ValueError):  # Evil makes no features MLPActorCritic can use, but it was built
        PolicyRegistry().get(binding, GROUP)
    assert "built Evil" in traps()


@pytest.mark.parametrize("payload", [f"{MODULE}.boom", "subprocess.run"])
def test_poisoned_checkpoints_run_nothing_through_the_cli(payload, tmp_path, monkeypatch, traps, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    description = copy.deepcopy(DESCRIPTION)
    for path in _strings(description):
        _set(description, path, payload)
    description["env"] = {"env_fn": payload}
    description.pop("groups")
    files = _write_all(tmp_path / "files", description)
    commands = [
        ["validate", "--config", "recipes/quickstart.yaml", "--ckpt_path", str(files["checkpoint"])],
        ["fit", "--config", "recipes/quickstart.yaml", "--ckpt_path", str(files["checkpoint"])],
        ["export", str(files["checkpoint"]), "--out", str(tmp_path / "out1")],
        ["export", str(files["export"]), "--out", str(tmp_path / "out2")],
    ]
    for command in commands:
        with pytest.raises(SystemExit) as exit_info:
            main(command)
        assert exit_info.value.code == 2, command
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lightmarl: error: ")]
        assert len(errors) == 1, (command, errors)
    assert traps() == []


class _Payload:
    """Unpickling this imports the payload module and calls its ``boom`` (a classic pickle payload)."""

    def __init__(self, boom: Any) -> None:
        self.boom = boom

    def __reduce__(self):
        return (self.boom, ())


@pytest.mark.parametrize("content", ["payload alone", "payload inside a snapshot", "payload as a weight"])
def test_a_poisoned_league_snapshot_runs_nothing_and_is_named(content, tmp_path, traps):
    """The league reads its historical players' weights with ``SnapshotStore.load``: a file whose pickle
    would import and call code is refused in one ValueError naming the file, and nothing runs."""
    import importlib

    from lightmarl.keys import SNAPSHOT_FORMAT
    from lightmarl.league.snapshots import SnapshotStore

    payload = _Payload(importlib.import_module(MODULE).boom)
    content = {
        "payload alone": payload,
        "payload inside a snapshot": {"format": SNAPSHOT_FORMAT, "class_path": payload, "state_dict": {}},
        "payload as a weight": {"weight": payload},
    }[content]
    path = tmp_path / "historical_0.pt"
    torch.save(content, path)
    sys.modules.pop(MODULE)  # writing the file imported it: start from a clean trace
    Path(os.environ["LM_FUZZ_MARKER"]).unlink()
    with pytest.raises(ValueError, match=rf"league snapshot '{path}' cannot be read"):
        SnapshotStore().load(path)
    assert traps() == []


def test_resolve_class_is_the_allow_list_resolver_for_file_names(traps):
    from lightmarl.policies import MLPActorCritic
    from lightmarl.policies.loading import resolve_class

    assert resolve_class("lightmarl.policies.MLPActorCritic", field="f", source="x.json") is MLPActorCritic
    for refused in (f"{MODULE}.Evil", "subprocess.Popen", "lightmarl.policies.registry.torch.nn.Linear"):
        with pytest.raises(UntrustedCodeError, match=rf"f: 'x.json' names '{refused}'"):
            resolve_class(refused, field="f", source="x.json")
    assert traps() == []  # refused before the module was imported
    evil = resolve_class(f"{MODULE}.Evil", field="f", source="x.json", allowed=[f"{MODULE}.Evil"])
    assert evil.__name__ == "Evil"
    with pytest.raises(ValueError, match=r"is not a torch\.nn\.modules\.module\.Module subclass"):
        resolve_class(f"{MODULE}.boom", field="f", source="x.json", trust_code=True)
