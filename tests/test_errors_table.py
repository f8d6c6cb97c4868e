"""Every row of docs/errors.md, run through the real CLI: exit code 2 and the documented one-line message."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
from pathlib import Path

import pytest
import torch

from lightmarl.cli import main
from lightmarl.training.run_lock import LOCK_NAME, _start_time

ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "assets/checkpoints/simple_spread_mappo_150k.ckpt"


def write_fixtures(folder: Path) -> None:
    """The files the table's commands name besides the shipped ones (docs/errors.md says which)."""
    (folder / "empty.yaml").write_text("")
    (folder / "comment.yaml").write_text("# a recipe with nothing in it yet\n")
    (folder / "dashes.yaml").write_text("---\n")
    (folder / "list.yaml").write_text("- a\n- b\n")
    (folder / "corrupt.pt").write_bytes(b"not a torch file\n")
    crafted = torch.load(ASSET, map_location="cpu", weights_only=True)
    crafted["lightmarl"]["population"]["bindings"]["main"]["class_path"] = "os.system"  # a file that names code
    torch.save(crafted, folder / "crafted.pt")
    # A run directory another live process (this test's parent) holds.
    (folder / "runs" / "busy").mkdir(parents=True)
    holder = {"pid": os.getppid(), "host": socket.gethostname(), "start_time": _start_time(os.getppid()),
              "since": "now", "command": "lightmarl fit --config busy.yaml"}  # fmt: skip
    (folder / "runs" / "busy" / LOCK_NAME).write_text(json.dumps(holder))
    (folder / "duplicate.yaml").write_text("model:\n  max_frames: 1600\n  max_frames: 999999\n")
    (folder / "twice.yaml").write_text("model:\n  max_frames: 1600\ntrainer: {}\nmodel:\n  rollout_steps: 5\n")
    ungrouped = torch.load(ASSET, map_location="cpu", weights_only=True)
    del ungrouped["lightmarl"]["population"]["groups"]  # a checkpoint without saved group specs
    torch.save(ungrouped, folder / "nogroups.ckpt")
    # A finished run: its directory holds a last.ckpt.
    (folder / "runs" / "finished" / "checkpoints").mkdir(parents=True)
    (folder / "runs" / "finished" / "checkpoints" / "last.ckpt").write_bytes(ASSET.read_bytes())


ROW = re.compile(r"^\| (?P<case>[^|]+?) \| `(?P<command>lightmarl [^`]+)` \| `` (?P<message>.+) `` \|$")


def documented_errors() -> list[tuple[str, str, str]]:
    rows = [ROW.match(line) for line in (ROOT / "docs/errors.md").read_text().splitlines()]
    return [(m["case"], m["command"], m["message"]) for m in rows if m]


def test_the_table_lists_every_case_the_issue_names():
    cases = {case for case, _, _ in documented_errors()}
    assert len(cases) >= 20
    for needed in ("unknown key", "wrong type", "minibatch larger than the batch", "loss profile names no loss"):
        assert needed in cases


@pytest.mark.parametrize(("case", "command", "message"), documented_errors(), ids=lambda v: v if " " not in v else None)
def test_documented_error(case, command, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # as from a checkout: recipes/ and assets/ beside, nothing trained yet
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    (tmp_path / "assets").symlink_to(ROOT / "assets")
    write_fixtures(tmp_path)
    fixtures = set(tmp_path.rglob("*.ckpt"))
    files_before = {p for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as exit_info:
        main(shlex.split(command)[1:])
    assert exit_info.value.code == 2, case
    # `lightmarl plot` names itself in its lines.
    prefix = "lightmarl plot: error: " if command.startswith("lightmarl plot") else "lightmarl: error: "
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith(prefix)]
    assert len(errors) == 1, errors
    expected = "^" + ".*".join(re.escape(part) for part in message.split("…")) + "$"
    assert re.match(expected, errors[0].removeprefix(prefix)), (case, errors[0])
    assert set(tmp_path.rglob("*.ckpt")) == fixtures, "nothing may train"
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and p not in files_before)
    assert written == [], f"a refused command wrote {written} (logs, config.yaml)"
    assert not (tmp_path / "pwned").exists(), "nothing the recipe names may run before it is checked"
