"""The README's random baseline for a recipe with several bindings and agent groups runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_multi_group_random_baseline_of_the_readme_validates(tmp_path, monkeypatch, capsys):
    readme = " ".join((ROOT / "README.md").read_text().split())  # the snippet spans lines
    bindings = re.search(r"`recipes/dual_policy.yaml`: `--model.policy_bindings '(.*?)'`", readme).group(1)
    monkeypatch.chdir(tmp_path)
    main(
        [
            "validate",
            "--config",
            str(ROOT / "recipes/dual_policy.yaml"),
            "--model.policy_bindings",
            bindings,
            "--model.eval_episodes=1",
            "--model.env.num_envs=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.logger=false",
        ]
    )
    out = capsys.readouterr().out
    assert "eval/predators/episode_return" in out and "eval/prey/episode_return" in out
