"""The code on docs/league.md runs and does what the page says."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "league.md"


def run_doc_blocks(monkeypatch) -> list[types.ModuleType]:
    modules = []
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)):
        # Each block runs as an importable module, like a user's script, so class_path can name it.
        module = types.ModuleType(f"league_doc_block_{i}")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        exec(compile(block, str(DOC), "exec"), module.__dict__)
        modules.append(module)
    return modules


def test_league_page_examples_run(monkeypatch, capsys):
    example, new_role = run_doc_blocks(monkeypatch)
    league = example.league
    printed = capsys.readouterr().out.splitlines()
    # 5 iterations x 600 steps, one phase = 1000 steps: every active player is snapshotted.
    assert len(league.historical_players) >= 2
    assert any("exploiter_default_0_" in line and line.endswith("reset") for line in printed)
    assert {p.parent_id for p in league.historical_players} == {p.player_id for p in league.active_players}
    for snapshot in league.historical_players:
        weights = example.store.load(snapshot.checkpoint_path)
        assert set(weights) == {"weight", "bias"}
    assert torch.load(snapshot.checkpoint_path, weights_only=True).keys() == weights.keys()
    assert example.state["next_job_id"] == 10  # 2 players x 1 slot x 5 iterations
    assert new_role.league.active_players[0].settings.self_play_prob == 0.2


def test_league_and_ratings_import_neither_lightning_nor_torchrl():
    import subprocess

    code = "import sys, lightmarl.league, lightmarl.ratings; print(sorted(m for m in ('lightning', 'torchrl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
