"""``--ckpt_path`` and recipe files through the real CLI: clear one-line errors, never a silent fallback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from expectations import TINY_CLI_RUN, tiny_cli_run
from lightmarl.cli import main
from lightmarl.errors import ConfigError
from lightmarl.policies.registry import load_policy_from_uri

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


def test_evaluate_last_without_a_checkpoint_is_the_same_error_with_its_own_way_out(in_tmp, capsys):
    # One resolution of `--ckpt_path last` (lightmarl.cli.checkpoints.resolve_last) serves every command.
    recipe = str(ROOT / "recipes/ippo_simple_spread.yaml")  # a recipe with an evaluation: section
    message = fails(capsys, "evaluate", "--config", recipe, *TINY_CLI_RUN)
    assert re.search(r"--ckpt_path last: no last checkpoint in \S*runs/ippo_simple_spread/checkpoints; train", message)
    assert message.endswith("pass a checkpoint file, or --ckpt_path null")


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


def counters_of(path: Path) -> tuple[int, int]:
    saved = torch.load(path, map_location="cpu", weights_only=True)["lightmarl"]["population"]["counters"]
    return saved["frames"], saved["iterations"]


def test_a_moved_run_resumed_with_last_keeps_last_ckpt_its_newest_state(in_tmp, caplog):
    """Rename a finished run's folder and resume it: Lightning would write last-v1.ckpt beside the old
    last.ckpt; the run's last.ckpt is its newest state, and export / load_population / policy_uri /
    --ckpt_path last all read it (and say which file they read)."""
    import lightmarl

    main(["fit", "--config", QUICKSTART, *tiny_cli_run(Path(QUICKSTART))])  # 10 frames
    (in_tmp / "runs/quickstart").rename(in_tmp / "runs/moved")
    more = [*tiny_cli_run(Path(QUICKSTART)), "--model.max_frames=20"]
    with caplog.at_level("INFO"):
        main(["fit", "--config", QUICKSTART, "--run_name=moved", *more, "--ckpt_path", "last"])
    checkpoints = in_tmp / "runs/moved/checkpoints"
    assert re.search(r"--ckpt_path last: read \S*moved/checkpoints/last.ckpt \(frames 10, iterations 1\)", caplog.text)
    assert not list(checkpoints.glob("last-v*.ckpt"))
    assert counters_of(checkpoints / "last.ckpt") == (20, 2)
    assert lightmarl.load_population(in_tmp / "runs/moved").frames == 20
    main(["export", "runs/moved", "--out", "exported"])
    assert json.loads((in_tmp / "exported/population.json").read_text())["counters"]["frames"] == 20


def test_the_latest_of_a_run_goes_by_its_counters_not_its_file_names_or_times(in_tmp, caplog, capsys):
    """A stale last.ckpt (written later, fewer frames) beside a newer last-v1.ckpt: every reader of "the
    run's latest" takes last-v1.ckpt, and `fit --ckpt_path last` continues from it."""
    import lightmarl

    main(["fit", "--config", QUICKSTART, *tiny_cli_run(Path(QUICKSTART))])  # 10 frames
    checkpoints = in_tmp / "runs/quickstart/checkpoints"
    old = (checkpoints / "last.ckpt").read_bytes()
    main(["fit", "--config", QUICKSTART, *tiny_cli_run(Path(QUICKSTART)), "--model.max_frames=20", "--ckpt_path=last"])
    (checkpoints / "last.ckpt").rename(checkpoints / "last-v1.ckpt")
    for stale in checkpoints.glob("epoch=*.ckpt"):
        stale.unlink()
    (checkpoints / "last.ckpt").write_bytes(old)  # the newest file on disk, the oldest state
    assert counters_of(checkpoints / "last-v1.ckpt") == (20, 2) and counters_of(checkpoints / "last.ckpt") == (10, 1)
    with caplog.at_level("INFO"):
        population = lightmarl.load_population("runs/quickstart")
    assert population.frames == 20
    assert re.search(r"read \S*last-v1.ckpt \(frames 20, iterations 2\).*last.ckpt: frames 10", caplog.text)
    main(["export", "runs/quickstart", "--out", "exported"])
    assert "(from runs/quickstart/checkpoints/last-v1.ckpt)" in capsys.readouterr().out
    # policy_uri: runs/<run>#binding (an NPC of that run): the same file, weight for weight.
    npc = load_policy_from_uri("runs/quickstart#main", "npc", population.groups["agent"], {})
    saved = torch.load(checkpoints / "last-v1.ckpt", map_location="cpu", weights_only=True)["state_dict"]
    weights = {k.removeprefix("population.policies.main."): v for k, v in saved.items() if ".main." in k}
    assert weights and all(torch.equal(npc.state_dict()[k], v) for k, v in weights.items())
    caplog.clear()
    with caplog.at_level("INFO"):
        main(
            [
                "fit",
                "--config",
                QUICKSTART,
                *tiny_cli_run(Path(QUICKSTART)),
                "--model.max_frames=30",
                "--ckpt_path=last",
            ]
        )
    assert re.search(r"--ckpt_path last: read \S*last-v1.ckpt \(frames 20", caplog.text)
    assert counters_of(checkpoints / "last.ckpt") == (30, 3)


def test_a_fresh_fit_into_a_finished_run_is_refused_in_one_line(in_tmp, capsys, monkeypatch):
    main(["fit", "--config", QUICKSTART, *tiny_cli_run(Path(QUICKSTART)), "--model.max_frames=20"])
    message = fails(capsys, "fit", "--config", QUICKSTART, *tiny_cli_run(Path(QUICKSTART)))
    assert re.search(r"run directory '\S*runs/quickstart' holds checkpoints of a run \(\S*checkpoints: ", message)
    assert "--ckpt_path last" in message and "--run_name" in message and "LIGHTMARL_OVERWRITE_RUN=1" in message
    checkpoints = in_tmp / "runs/quickstart/checkpoints"
    assert counters_of(checkpoints / "last.ckpt") == (20, 2), "the refused run wrote nothing"
    monkeypatch.setenv("LIGHTMARL_OVERWRITE_RUN", "1")
    main(["fit", "--config", QUICKSTART, *tiny_cli_run(Path(QUICKSTART))])
    assert counters_of(checkpoints / "last.ckpt") == (10, 1)
    assert {p.name for p in checkpoints.glob("*.ckpt")} == {"last.ckpt", "epoch=0-step=4.ckpt"}
