"""Every code snippet of docs/environments.md runs, taken from the page itself so it cannot drift.

YAML snippets go through the real CLI on a tiny budget, Python snippets are executed. The
placeholder package of the page (``my_package.envs.parallel_env``) is a small stand-in written
here. A snippet added to the page without a runner here fails :func:`test_every_snippet_of_the_page_is_run`.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from lightmarl._imports import import_object
from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/environments.md"
TINY = [
    "--model.rollout_steps=2",
    "--model.iterations_per_epoch=1",
    # PPO's minibatch fits in the smallest tiny rollout (4 copies x 2 steps).
    '--model.algorithm={"class_path": "lightmarl.algorithms.PPO", "init_args": {"minibatch_size": 8}}',
    "--evaluation.validation.episodes=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
]
MY_PACKAGE = '''
from lightmarl.envs.testing.match import MatchTargetEnv


def parallel_env(size=8, max_cycles=100):
    """The page's placeholder env: `size` choices per step, `max_cycles` steps."""
    return MatchTargetEnv(num_agents=2, nvec=[size], max_cycles=max_cycles, action_mask=False)
'''


def snippets() -> list[tuple[str, str, str]]:
    """``(section heading, language, code)`` of every fenced block of the page, in order."""
    found, heading = [], ""
    for part in re.split(r"(^#{2,3} [^\n]*$|^```\w*\n.*?^```$)", PAGE.read_text(), flags=re.M | re.S):
        if part.startswith("#"):
            heading = part.lstrip("#").strip()
        elif part.startswith("```"):
            language, _, body = part[3:].partition("\n")
            found.append((heading, language, body.rsplit("```", 1)[0]))
    return found


def snippet(heading: str, language: str) -> str:
    (code,) = [c for h, lang, c in snippets() if h == heading and lang == language]
    return code


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A working directory with the page's placeholder package importable (``my_package``)."""
    monkeypatch.chdir(tmp_path)
    package = tmp_path / "my_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "envs.py").write_text(MY_PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] == "my_package"]:
        del sys.modules[name]


def fit_yaml(code: str, workdir: Path, *extra: str) -> dict:
    """``lightmarl fit`` of a snippet (under ``model:`` if it is not a whole recipe); returns the checkpoint."""
    recipe = code if code.startswith("model:") else "model:\n" + textwrap.indent(code, "  ")
    (workdir / "snippet.yaml").write_text(recipe)
    main(["fit", "--config", "snippet.yaml", *TINY, *extra])
    return torch.load(next(workdir.rglob("last.ckpt")), map_location="cpu", weights_only=False)


def run_bring_your_own_env(workdir: Path) -> None:
    checkpoint = fit_yaml(snippet("Bring your own env", "yaml"), workdir, "--model.max_frames=32")
    assert checkpoint["lightmarl"]["population"]["counters"]["frames"] == 32  # 16 copies x 2 steps


def run_large_observations(workdir: Path) -> None:
    pytest.importorskip("pettingzoo.butterfly.pistonball_v6")
    code = snippet("Large observations", "yaml")
    checkpoint = fit_yaml(code, workdir, "--model.max_frames=8", "--model.env.env_kwargs.max_cycles=4")
    assert any(".encoder.convs." in k for k in checkpoint["state_dict"]), "the policy has no CNN"
    from lightmarl.envs import PettingZooEnvConfig

    env = yaml.safe_load(code)["model"]["env"]
    transforms = [import_object(t["class_path"], field="t")(**t.get("init_args", {})) for t in env["transforms"]]
    (group,) = PettingZooEnvConfig(env["env_fn"], env["env_kwargs"], transforms=transforms).spec().groups.values()
    # 457x120x3 -> 32x16x3 -> gray 32x16x1 -> 3 frames stacked as channels, uint8 throughout
    assert (group.observation_shape, group.observation_dtype) == ((32, 16, 3), "uint8")


def run_multi_discrete(workdir: Path) -> None:
    from lightmarl.envs import PettingZooEnvConfig
    from lightmarl.policies import MultiCategorical

    (group,) = PettingZooEnvConfig("lightmarl.envs.testing.match.parallel_env").spec().groups.values()
    scope: dict = {"group": group}
    exec(snippet("`MultiDiscrete` actions", "python"), scope)  # the page's own code
    assert scope["distribution_class"] is MultiCategorical and scope["distribution_kwargs"]["nvec"] == (3, 4)


def run_worker_processes(workdir: Path) -> None:
    checkpoint = fit_yaml(snippet("Worker processes", "yaml"), workdir, "--model.max_frames=64")
    assert (
        checkpoint["lightmarl"]["population"]["counters"]["frames"] == 64
    )  # 32 copies in 2 worker processes x 2 steps


def run_check_vec_env(workdir: Path, capsys) -> None:
    exec(snippet("Checking an env: `check_vec_env`", "python"), {})  # the page's own code
    assert "VecEnvCheck(steps=200" in capsys.readouterr().out


def run_mettagrid(workdir: Path) -> None:
    pytest.importorskip("mettagrid")
    code = snippet("MettaGrid: token observations", "yaml")
    checkpoint = fit_yaml(code, workdir, "--model.max_frames=32", "--model.env.env_kwargs.max_steps=4")
    assert any(".encoder.feature_embedding." in k for k in checkpoint["state_dict"]), "the policy has no TokenEncoder"


def run_openspiel(workdir: Path) -> None:
    pytest.importorskip("pyspiel")
    checkpoint = fit_yaml(snippet("OpenSpiel games", "yaml"), workdir, "--model.max_frames=64")
    assert (
        checkpoint["lightmarl"]["population"]["counters"]["frames"] == 64
    )  # 2 iterations of 16 copies x 2 turns of Leduc poker


RUNNERS: dict[tuple[str, str], Callable[..., None]] = {
    ("Bring your own env", "yaml"): run_bring_your_own_env,
    ("Large observations", "yaml"): run_large_observations,
    ("`MultiDiscrete` actions", "python"): run_multi_discrete,
    ("Worker processes", "yaml"): run_worker_processes,
    ("Checking an env: `check_vec_env`", "python"): run_check_vec_env,
    ("MettaGrid: token observations", "yaml"): run_mettagrid,
    ("OpenSpiel games", "yaml"): run_openspiel,
}
#: snippets other test modules run, parsed from this page too.
ELSEWHERE = {("Image observations: `CNNEncoder`", "yaml"): "tests/test_encoder_from_yaml.py"}


def test_every_snippet_of_the_page_is_run():
    blocks = [(heading, language) for heading, language, _ in snippets()]
    assert len(blocks) == len(set(blocks)), "one snippet per language per section, so each has one runner"
    assert set(blocks) == set(RUNNERS) | set(ELSEWHERE), set(blocks) ^ (set(RUNNERS) | set(ELSEWHERE))


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "runner", sorted(set(RUNNERS.values()), key=lambda f: f.__name__), ids=lambda f: f.__name__.removeprefix("run_")
)
def test_the_snippet_runs(runner, workdir, capsys):
    if runner is run_check_vec_env:
        runner(workdir, capsys)
    else:
        runner(workdir)
