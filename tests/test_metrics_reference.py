"""docs/reference/metrics.md names every metric a validation logs (each ``eval/<binding>/<name>``)."""

from __future__ import annotations

import re
from pathlib import Path

from expectations import TINY_CLI_RUN
from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "metrics.md"


def test_every_validation_metric_is_in_the_reference(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(
        [
            "validate",
            "--config",
            str(ROOT / "recipes/quickstart.yaml"),
            *TINY_CLI_RUN,
            "--evaluation.validation.episodes=2",
        ]
    )
    logged = set(re.findall(r"eval/main/(\w+)", capsys.readouterr().out))
    assert {"episode_return", "episode_return_std", "episodes", "episode_length"} <= logged
    page = PAGE.read_text()
    # A row names a metric in full (`eval/<binding>/x`) or after the first one of its row (`x`).
    rows = [line for line in page.splitlines() if line.startswith("| `eval/<binding>/")]
    named = {name for row in rows for name in re.findall(r"`(?:eval/<binding>/)?(\w+)`", row.split(" | ")[0])}
    assert not logged - named, f"metrics.md lacks {sorted(logged - named)}"
