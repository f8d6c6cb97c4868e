"""The README's thirty-second example and the how-to page on several agent groups run as written:
their YAML, their two CLI lines and their Python, taken from the pages themselves."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MULTI_GROUP = ROOT / "docs" / "howto" / "multi_group.md"
OWN_ENV = ROOT / "docs" / "howto" / "bring_your_env.md"
SCRIPTED = ROOT / "docs" / "howto" / "scripted_policy.md"
#: a seconds-long run of a page's recipe: the page's own fields, fewer frames and episodes.
SHORT = ["--model.max_frames=800", "--evaluation.validation.episodes=2", "--trainer.enable_progress_bar=false"]


def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)


def commands(block: str) -> list[list[str]]:
    """The ``lightmarl ...`` lines of a bash block (backslash continuations joined), without ``lightmarl``."""
    lines = block.replace("\\\n", " ").strip().splitlines()
    out = [shlex.split(line.removeprefix("PYTHONPATH=. "), comments=True) for line in lines]
    assert all(command[0] == "lightmarl" for command in out), lines
    return [command[1:] for command in out]


def test_the_readme_example_trains_validates_and_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (recipe,) = blocks(README, "yaml")
    (tmp_path / "my_recipe.yaml").write_text(recipe)
    fit, validate = commands(blocks(README, "bash")[1])
    assert fit[:3] == ["fit", "--config", "my_recipe.yaml"] and validate[0] == "validate"
    main([*fit, *SHORT])
    # A recipe outside recipes/ writes to runs/<its file name>, as the README says.
    assert (tmp_path / "runs" / "my_recipe" / "checkpoints" / "last.ckpt").is_file()
    assert (tmp_path / "runs" / "my_recipe" / "csv" / "version_0" / "metrics.csv").is_file()
    capsys.readouterr()
    main([*validate, *SHORT])
    assert "eval/main/episode_return" in capsys.readouterr().out
    (python,) = blocks(README, "python")
    namespace: dict = {}
    exec(compile(python, str(README), "exec"), namespace)
    assert not namespace["env"].agents, "the episode ran to its end"
    assert namespace["population"].frames == 800


def test_the_readme_stays_a_front_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).is_file(), f"README links to {target}, which does not exist"


def test_the_multi_group_recipe_is_the_shipped_one_and_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (recipe,) = blocks(MULTI_GROUP, "yaml")
    shipped = yaml.safe_load((ROOT / "recipes" / "dual_policy.yaml").read_text())
    assert yaml.safe_load(recipe) == shipped
    (tmp_path / "tag.yaml").write_text(recipe)
    fit, validate = commands(blocks(MULTI_GROUP, "bash")[0])
    tiny = [*SHORT, "--model.env.num_envs=4", "--model.algorithm.init_args.minibatch_size=50"]
    tiny += ["--model.algorithms.prey.init_args.minibatch_size=50", "--trainer.logger=false"]
    main([*fit, *tiny])
    capsys.readouterr()
    main([*validate, *tiny])
    out = capsys.readouterr().out
    assert "eval/predators/episode_return" in out and "eval/prey/episode_return" in out
    # The random baseline of the page, on the same recipe and its agent map.
    (baseline,) = commands(blocks(MULTI_GROUP, "bash")[1])
    main([*baseline, *tiny])
    out = capsys.readouterr().out
    assert "eval/predators/episode_return" in out and "eval/prey/episode_return" in out


def test_the_agent_listing_prints_what_the_page_shows(capsys):
    shown = blocks(MULTI_GROUP, "text")[1]
    (python,) = blocks(MULTI_GROUP, "python")
    exec(compile(python, str(MULTI_GROUP), "exec"), {})
    assert capsys.readouterr().out == shown


def test_one_binding_over_two_groups_fails_with_the_message_the_page_shows(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    message = blocks(MULTI_GROUP, "text")[0].strip()
    (recipe,) = blocks(MULTI_GROUP, "yaml")
    quickstart = yaml.safe_load((ROOT / "recipes" / "quickstart.yaml").read_text())
    quickstart["model"]["env"] = yaml.safe_load(recipe)["model"]["env"]
    (tmp_path / "tag.yaml").write_text(yaml.safe_dump(quickstart))
    try:
        main(["fit", "--config", "tag.yaml", "--trainer.logger=false"])
    except SystemExit as stop:
        assert stop.code == 2
    else:
        raise AssertionError("one binding over two groups trained")
    assert capsys.readouterr().err.strip() == message


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    """Run in ``tmp_path`` as the pages do; what ``PYTHONPATH=.`` does for the CLI, done for this process."""
    monkeypatch.chdir(tmp_path)
    modules = set(sys.modules)
    yield lambda: monkeypatch.syspath_prepend(str(tmp_path))
    for name in set(sys.modules) - modules:
        if name in ("my_env", "my_policies"):
            del sys.modules[name]


@pytest.mark.parametrize(
    ("page", "module", "recipe"), [(OWN_ENV, "my_env", "cue.yaml"), (SCRIPTED, "my_policies", "npc.yaml")]
)
def test_a_howto_with_its_own_module_runs_top_to_bottom(page, module, recipe, tmp_path, own_module, capsys):
    (tmp_path / f"{module}.py").write_text(blocks(page, "python")[0])
    (recipe_text,) = blocks(page, "yaml")
    (tmp_path / recipe).write_text(recipe_text)
    bash = blocks(page, "bash")[0]
    assert all(line.startswith("PYTHONPATH=. lightmarl ") for line in bash.strip().splitlines())
    fit, validate = commands(bash)
    assert fit[:3] == ["fit", "--config", recipe]
    # Without the directory on the import path the run stops at once, as the scripted-policy page shows.
    with pytest.raises(SystemExit) as stop:
        main([*fit, *SHORT])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert f"no module {module!r} is installed" in error
    if page is SCRIPTED:
        assert error == blocks(SCRIPTED, "text")[0].strip()
    own_module()
    main([*fit, *SHORT])
    capsys.readouterr()
    main([*validate, *SHORT])
    out = capsys.readouterr().out
    bindings = ["main"] if page is OWN_ENV else ["learner", "npc"]
    assert all(f"eval/{binding}/episode_return" in out for binding in bindings), out[-2000:]
    if page is OWN_ENV:  # the page's check of the env passes on it
        exec(compile(blocks(OWN_ENV, "python")[1], str(OWN_ENV), "exec"), {})
        assert "VecEnvCheck(" in capsys.readouterr().out


def test_the_league_howto_is_the_shipped_recipe_and_trains(tmp_path, monkeypatch, capsys):
    page = ROOT / "docs" / "howto" / "league.md"
    monkeypatch.chdir(tmp_path)
    (recipe,) = blocks(page, "yaml")
    assert yaml.safe_load(recipe) == yaml.safe_load((ROOT / "recipes" / "league_rps.yaml").read_text())
    (tmp_path / "rps.yaml").write_text(recipe)
    fit, validate = commands(blocks(page, "bash")[0])
    main([*fit, *SHORT])
    metrics = (tmp_path / "runs" / "rps" / "csv" / "version_0" / "metrics.csv").read_text().splitlines()[0]
    assert "league/main/exploitability" in metrics and "league/historical_players" in metrics
    capsys.readouterr()
    main([*validate, *SHORT])
    assert "eval/main/episode_return" in capsys.readouterr().out


def test_the_evaluate_howto_is_the_shipped_recipe_and_evaluates(tmp_path, monkeypatch, capsys):
    page = ROOT / "docs" / "howto" / "evaluate.md"
    monkeypatch.chdir(tmp_path)
    (recipe,) = blocks(page, "yaml")
    assert yaml.safe_load(recipe) == yaml.safe_load((ROOT / "recipes" / "ippo_simple_spread.yaml").read_text())
    (tmp_path / "ippo.yaml").write_text(recipe)
    fit, evaluate = commands(blocks(page, "bash")[0])
    main([*fit, *SHORT, "--evaluation.every_n_frames=null"])
    main([*evaluate, "--evaluation.every_n_frames=null"])
    written = {p.name for p in (tmp_path / "runs" / "ippo" / "evaluation").iterdir()}
    assert {"report.json", "summary.md", "returns.png"} <= written
    (baseline,) = commands(blocks(page, "bash")[1])
    capsys.readouterr()
    main([*baseline, *SHORT])
    assert "eval/main/episode_return" in capsys.readouterr().out
