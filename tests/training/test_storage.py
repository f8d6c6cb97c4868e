"""Checkpoint writes are atomic, a failing one (a full disk) leaves the previous checkpoint, and says so in one line."""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from expectations import tiny_cli_run
from lightmarl.cli import main
from lightmarl.errors import CheckpointWriteError
from lightmarl.training import storage
from lightmarl.training.storage import AtomicCheckpointIO

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "recipes/quickstart.yaml"


class _FullDisk:
    """A file whose writes fail with ENOSPC once ``room`` bytes are written (what a full disk does)."""

    def __init__(self, path: str, room: int) -> None:
        self.file = open(path, "wb")
        self.room = room

    def write(self, data: Any) -> int:
        if len(data) > self.room:
            self.file.write(bytes(data[: self.room]))
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def _fill_the_disk(monkeypatch, when: Any) -> None:
    """From now on, writes of partial checkpoint files for which ``when(path)`` holds hit a full disk."""

    def opener(path: str, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode and when(path):
            return _FullDisk(path, room=1000)
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(storage, "open", opener, raising=False)


def test_a_failed_write_keeps_the_previous_checkpoint_and_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"w": torch.arange(3)}, target)
    _fill_the_disk(monkeypatch, lambda path: True)
    with pytest.raises(
        CheckpointWriteError, match=r"No space left on device\); the previous checkpoint there is unchanged"
    ):
        io.save_checkpoint({"w": torch.zeros(100_000)}, target)
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_partial_file_of_a_killed_writer_is_never_a_checkpoint_and_is_cleaned_up(tmp_path):
    target = tmp_path / "last.ckpt"
    stale = tmp_path / ".last.ckpt.999999.partial"
    stale.write_bytes(b"cut short by SIGKILL")
    AtomicCheckpointIO().save_checkpoint({"w": torch.ones(2)}, target)
    assert not stale.exists() and torch.equal(torch.load(target, weights_only=True)["w"], torch.ones(2))


def test_a_full_disk_during_fit_stops_in_one_line_and_last_survives(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    writes: list[str] = []

    def second_last(path: str) -> bool:  # the first epoch's last.ckpt is written; the second finds the disk full
        if ".last.ckpt." in path:
            writes.append(path)
        return len(writes) >= 2 and ".last.ckpt." in path

    _fill_the_disk(monkeypatch, second_last)
    args = [*tiny_cli_run(QUICKSTART), "--model.max_frames=40", "--model.iterations_per_epoch=2"]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(QUICKSTART), *args])
    assert exit_info.value.code == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lightmarl: error: ")]
    assert len(errors) == 1, errors
    documented = _documented_fault("a full disk while writing a checkpoint")
    assert re.match("^" + ".*".join(re.escape(p) for p in documented.split("…")) + "$", errors[0][18:]), errors
    last = torch.load(tmp_path / "runs/quickstart/checkpoints/last.ckpt", weights_only=True)
    assert last["lightmarl"]["population"]["counters"]["iterations"] == 2  # the first epoch's, whole


def _documented_fault(case: str) -> str:
    """The message docs/errors.md gives for ``case`` in its "Faults during a run" table."""
    for line in (ROOT / "docs/errors.md").read_text().splitlines():
        match = re.match(r"^\| (?P<case>[^|]+?) \| (?P<how>[^|]+?) \| `` (?P<message>.+) `` \|$", line)
        if match and match["case"] == case:
            return match["message"]
    raise AssertionError(f"docs/errors.md has no row {case!r}")
