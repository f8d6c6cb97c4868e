"""``--ckpt_path`` and recipe files through the real CLI: clear one-line errors, never a silent fallback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from expectations import TINY_CLI_RUN, tiny_cli_run
from lightmarl.cli import main
from lightmarl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "recipes/quickstart.yaml")
ASSET = ROOT / "assets/checkpoints/simple_spread_mappo_150k.ckpt"


def fails(capsys, *args: str) -> str:
    """Run the CLI, expect the user-error exit (2), return its one-line message."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lightmarl: error:")]
    assert len(lines) == 1, lines
    return lines[0]


class WritesMarker:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)  # recipes write under ./runs
    return tmp_path


def test_validate_last_without_a_checkpoint_is_an_error(in_tmp, capsys):
    message = fails(capsys, "validate", "--config", QUICKSTART, "--ckpt_path", "last", *TINY_CLI_RUN)
    assert re.search(r"--ckpt_path last: no last checkpoint in \S*runs/quickstart/checkpoints; train first", message)


def test_fit_last_without_a_checkpoint_starts_fresh_and_says_so(in_tmp, caplog):
    main(["fit", "--config", QUICKSTART, "--ckpt_path", "last", *tiny_cli_run(Path(QUICKSTART))])
    assert re.search(r"no checkpoint in \S*runs/quickstart/checkpoints; starting a fresh run", caplog.text)
    assert (in_tmp / "runs/quickstart/checkpoints/last.ckpt").is_file()


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: d / "absent.ckpt", r"--ckpt_path: no file at"),
        (lambda d: (d / "t.ckpt", (d / "t.ckpt").write_bytes(ASSET.read_bytes()[:5000]))[0], r"is not a torch file"),
        (lambda d: (d / "p.pt", torch.save({"w": torch.zeros(2)}, d / "p.pt"))[0], r"is not a Lightning checkpoint"),
    ],
    ids=["missing", "truncated", "not-lightning"],
)
def test_unreadable_checkpoints_fail_in_one_line(in_tmp, capsys, make, expected):
    path = make(in_tmp)
    assert re.search(
        expected, fails(capsys, "validate", "--config", QUICKSTART, "--ckpt_path", str(path), *TINY_CLI_RUN)
    )


def test_a_crafted_checkpoint_runs_no_code(in_tmp, capsys):
    marker = in_tmp / "marker"
    crafted = {**torch.load(ASSET, map_location="cpu", weights_only=True), "payload": WritesMarker(marker)}
    torch.save(crafted, in_tmp / "crafted.ckpt")
    message = fails(capsys, "validate", "--config", QUICKSTART, "--ckpt_path", "crafted.ckpt", *TINY_CLI_RUN)
    assert "pickled Python objects" in message and not marker.exists()


def test_a_checkpoint_of_another_population_is_named_as_such(in_tmp, capsys):
    saved = torch.load(ASSET, map_location="cpu", weights_only=True)
    saved["state_dict"] = {k.replace(".main.", ".other."): v for k, v in saved["state_dict"].items()}
    torch.save(saved, in_tmp / "other.ckpt")
    message = fails(capsys, "validate", "--config", QUICKSTART, "--ckpt_path", "other.ckpt", *TINY_CLI_RUN)
    assert (
        "the checkpoint does not fit this recipe's population" in message
        and "missing: population.policies.main." in message
    )


def test_an_empty_recipe_is_named(in_tmp, capsys):
    (in_tmp / "empty.yaml").write_text("\n")
    assert "--config empty.yaml: the file is empty" in fails(capsys, "fit", "--config", "empty.yaml")


def test_debug_shows_the_traceback(in_tmp, monkeypatch):
    monkeypatch.setenv("LIGHTMARL_DEBUG", "1")
    (in_tmp / "empty.yaml").write_text("")
    with pytest.raises(ConfigError, match="the file is empty"):
        main(["fit", "--config", "empty.yaml"])
