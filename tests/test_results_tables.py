"""Every result table in the docs is what its committed JSON in benchmarks/results/ renders to
(scripts/render_results.py), so a table cannot be edited by hand or drift from its raw numbers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = load_module("render_results", ROOT / "scripts" / "render_results.py")
results = load_module("results", ROOT / "benchmarks" / "results.py")


def test_every_committed_table_matches_its_json():
    assert render.stale(render.pages()) == []


def test_every_json_is_shown_somewhere_and_has_its_provenance():
    shown = {m.group("name") for page in render.pages() for m in render.BLOCK.finditer(page.read_text())}
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert files, "no committed results"
    for path in files:
        result = json.loads(path.read_text())
        assert result["name"] == path.stem
        assert path.stem in shown, f"{path.name} is in no table of the docs"
        for field in ("command", "date", "machine", "per_seed"):
            assert result.get(field), f"{path.name}: {field} missing"
        assert result.get("commit"), f"{path.name}: the commit measured is missing"


def test_a_hand_edited_table_is_caught(tmp_path):
    name = "quickstart"
    text = (ROOT / "README.md").read_text()
    match = next(m for m in render.BLOCK.finditer(text) if m.group("name") == name)
    page = tmp_path / "page.md"
    page.write_text(match.group(0).replace("−21.70", "−19.70"))
    assert render.stale([page]) == [f"{page}: {name}"]
    page.write_text(render.rendered(page.read_text()))
    assert render.stale([page]) == []


def test_no_measured_table_is_typed_by_hand():
    # Measured figures in a table belong in benchmarks/results/*.json, shown through a results block.
    assert render.hand_typed(render.pages()) == []


def test_a_hand_typed_measured_table_is_caught_and_reference_tables_are_not(tmp_path):
    quickstart = next(
        m for m in render.BLOCK.finditer((ROOT / "README.md").read_text()) if m.group("name") == "quickstart"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "| env | observation | agents |\n| --- | --- | ---: |\n| spread | 18 float | 3 |\n\n"  # reference: sizes, counts
        + quickstart.group(0)  # a rendered results block: its figures come from JSON
        + "\n```text\n| scenario | return |\n| --- | --- |\n| a | -19.30 [-20.74, -17.86] |\n```\n\n"  # command output
        + "| run | score |\n| --- | --- |\n| league | 0.924 [0.899, 0.949] |\n| plain | 2,299 |\n"
    )
    lines = page.read_text().splitlines()
    flagged = [int(line.rsplit(":", 1)[1]) for line in render.hand_typed([page])]
    assert [lines[n - 1] for n in flagged] == ["| league | 0.924 [0.899, 0.949] |", "| plain | 2,299 |"]


def test_write_result_then_render(tmp_path):
    path = results.write_result(
        "toy",
        command="python benchmarks/toy.py --seeds 0 1",
        per_seed={"0": {"return": -20.25, "fps": 1000}, "1": {"return": -21.5, "fps": 1100}},
        directory=tmp_path,
    )
    result = json.loads(path.read_text())
    assert result["machine"]["cores"] and result["date"] and result["per_seed"]["1"]["return"] == -21.5
    block = render.render(result)
    assert "| seed | return | fps |" in block
    assert "| 1 | −21.5 | 1,100 |" in block
    assert "`python benchmarks/toy.py --seeds 0 1`" in block


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "bad name"},
        {"command": " "},
        {"columns": ["a"]},
        {"columns": ["a", "b"], "rows": [[1]]},
    ],
)
def test_write_result_rejects_bad_input(tmp_path, kwargs):
    args = {"name": "toy", "command": "python x.py", "per_seed": {"0": {"x": 1.0}}, "directory": tmp_path, **kwargs}
    with pytest.raises(ValueError):
        results.write_result(**args)


def test_write_result_keeps_the_gpu_the_settings_and_a_commit_given_outside_git(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "_git", lambda *args: None)  # a copy without .git, e.g. on a lent GPU machine
    monkeypatch.setenv("LIGHTMARL_COMMIT", "0123456789abcdef+dirty")
    path = results.write_result(
        "toy_gpu",
        command="python benchmarks/toy.py --device cuda",
        per_seed={"run": {"fps": 1000.0}},
        measured_on=results.machine(gpu="NVIDIA Toy"),
        extra={"seconds": 2.0, "load_before": [0.5, 0.2, 0.1]},
        directory=tmp_path,
    )
    result = json.loads(path.read_text())
    assert result["commit"] == "0123456789abcdef"
    assert result["extra"] == {"seconds": 2.0, "load_before": [0.5, 0.2, 0.1]}
    assert "Measured " in render.render(result) and " on NVIDIA Toy, " in render.render(result)
    assert "commit `0123456789`" in render.render(result)


def test_scaling_tables_are_what_their_scripts_make_of_the_per_run_numbers():
    # The VMAS-speed, worker-scaling, time-to-return and poker-league results (some converted from an earlier
    # format) must show the table their script would write from the same per-run numbers.
    from benchmark_scripts import load_benchmark

    # result file pattern -> the table its script writes from the file's per-run numbers
    tables = {
        "vmas_speed_*.json": lambda r: load_benchmark("vmas_speed.py").result_rows(r["per_seed"]),
        "worker_scaling_*.json": lambda r: load_benchmark("worker_scaling.py").result_rows(r["per_seed"]),
        "time_to_return_*.json": lambda r: load_benchmark("time_to_return.py").result_rows(
            r["table"]["rows"][0][0], r["per_seed"]["run"]
        ),
        "poker_league_*.json": lambda r: load_benchmark("poker_league.py").result_rows(r["per_seed"]),
        "ddp_league*.json": lambda r: load_benchmark("ddp_league.py").result_rows(r["per_seed"]),
    }
    directory = ROOT / "benchmarks" / "results"
    checked = 0
    for pattern, rows_of in tables.items():
        for path in sorted(directory.glob(pattern)):
            result = json.loads(path.read_text())
            assert result["table"]["rows"] == rows_of(result), path.name
            checked += 1
    assert checked >= 11
