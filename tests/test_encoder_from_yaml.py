"""docs/environments.md's CNNEncoder snippet, taken from the page itself, works through the real CLI
in every way a user writes it: block-style YAML, flow-style YAML and a command-line override."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]
PURSUIT = str(ROOT / "recipes/pursuit.yaml")
TINY = [
    "--model.env.num_envs=2",
    "--model.env.env_kwargs.max_cycles=10",
    "--model.rollout_steps=5",
    "--model.algorithm.init_args.minibatch_size=10",  # one rollout: 2 copies x 5 steps
    "--model.max_frames=10",
    "--evaluation.validation.video_episodes=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
]


def documented_snippet() -> str:
    page = (ROOT / "docs/environments.md").read_text()
    section = page.split("## Image observations: `CNNEncoder`", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)


def as_block_recipe(snippet: str) -> str:
    return "model:\n" + "".join(f"  {line}\n" for line in snippet.splitlines())


def as_flow_recipe(snippet: str) -> str:
    return "model: " + json.dumps(yaml.safe_load(snippet))  # JSON is flow-style YAML


def as_override(snippet: str) -> list[str]:
    return ["--model.policy_bindings", json.dumps(yaml.safe_load(snippet)["policy_bindings"])]


@pytest.mark.parametrize("style", ["block", "flow", "override"])
def test_the_documented_cnn_encoder_is_built_from_yaml(style, tmp_path, monkeypatch):
    pytest.importorskip("pettingzoo.sisl")
    monkeypatch.chdir(tmp_path)
    snippet = documented_snippet()
    if style == "override":
        extra = as_override(snippet)
    else:
        (tmp_path / "encoder.yaml").write_text(
            as_block_recipe(snippet) if style == "block" else as_flow_recipe(snippet)
        )
        extra = ["--config", "encoder.yaml"]
    main(["fit", "--config", PURSUIT, *extra, *TINY])
    checkpoint = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=True)
    encoder = checkpoint["lightmarl"]["population"]["bindings"]["main"]["policy_kwargs"]["encoder"]
    assert encoder == yaml.safe_load(snippet)["policy_bindings"][0]["policy_kwargs"]["encoder"]
    assert any(".encoder.convs." in k for k in checkpoint["state_dict"]), "the policy has no CNN"
