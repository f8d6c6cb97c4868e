"""docs/howto/export.md, "Inference": every block of the section runs as written, on the shipped checkpoint laid out
as a run directory (`runs/quickstart`) and a tiny turn-based run (`runs/connect_four_vs_heuristic`)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import lightmarl
from expectations import tiny_cli_run
from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[2]
ASSET = ROOT / "assets/checkpoints/simple_spread_mappo_150k.ckpt"
CONNECT_FOUR = ROOT / "recipes/connect_four_vs_heuristic.yaml"
PAGE = "docs/howto/export.md"


def section() -> str:
    page = (ROOT / PAGE).read_text()
    return page.split("## Inference\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_inference_section_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "quickstart" / "checkpoints"
    run.mkdir(parents=True)
    shutil.copy(ASSET, run / "last.ckpt")
    main(
        [
            "fit",
            "--config",
            str(CONNECT_FOUR),
            *tiny_cli_run(CONNECT_FOUR),
            "--model.env.num_envs=4",
            "--trainer.logger=null",
        ]
    )
    text = section()
    python = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (bash,) = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    assert len(python) == 3
    for line in bash.strip().splitlines():
        command = shlex.split(line, comments=True)
        assert command[:2] == ["lightmarl", "export"], line
        main(command[1:])
    namespace: dict = {}
    exec(compile(python[0], PAGE, "exec"), namespace)
    assert "per-agent return -27.47 after 150400 training frames" in capsys.readouterr().out
    statements = [line for line in python[0].splitlines() if line.strip() and not line.startswith(("import ", "from "))]
    assert len(statements) <= 8, "the page promises a few lines (imports aside)"
    # The turn-based loop plays a whole game of the tiny run's population.
    exec(compile(python[1], PAGE, "exec"), namespace)
    assert not namespace["env"].agents, "the game ended"
    # ONNX: the graph's greedy actions are the population's.
    exec(compile(python[2], PAGE, "exec"), namespace)
    population = lightmarl.load_population("exported")
    observations, _ = namespace["env"].reset(seed=0)
    assert namespace["actions"] == population.act(observations)
