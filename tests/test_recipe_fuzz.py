"""Random mutations of valid recipes through the real CLI: it runs, or stops with a one-line user
error and exit code 2, never with an uncaught exception (a property test; docs/errors.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from expectations import TINY_CLI_RUN
from lightmarl.cli import main

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["quickstart", "ppo_vs_dqn", "qmix_simple_spread", "connect_four_vs_heuristic"]
# One rollout of 16 copies x 25 steps: large enough for every recipe's minibatch, a few seconds long.
ONE_ROLLOUT = [*TINY_CLI_RUN, "--model.env.num_envs=16", "--model.rollout_steps=25", "--model.max_frames=400"]
ODD_VALUES = st.sampled_from([None, 0, -1, 1, 2.5, -0.5, "", "x", "main", [], [1], {}, {"class_path": "x.y"}, True])


def leaves(node: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every value of a recipe's ``model`` section (list items included)."""
    if isinstance(node, dict):
        return [path] + [p for k, v in node.items() for p in leaves(v, (*path, k))]
    if isinstance(node, list):
        return [path] + [p for i, v in enumerate(node) for p in leaves(v, (*path, i))]
    return [path]


def mutated(model: dict, path: tuple, action: str, value: Any) -> dict:
    model = yaml.safe_load(yaml.safe_dump(model))  # a deep copy
    if not path:
        return {**model, "no_such_field": value} if action == "add" else model
    parent = model
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "delete" and isinstance(parent, dict):
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[f"{last}_typo"] = value
    else:
        parent[last] = value
    return model


def test_mutated_recipes_run_or_fail_with_a_user_error_and_both_happen(tmp_path_factory, monkeypatch, capsys):
    """A property test over mutated recipes; it means something only if some mutations train and
    others are refused, so that is checked over the same examples."""
    outcomes: list[str] = []

    @settings(max_examples=int(os.environ.get("LIGHTMARL_FUZZ_EXAMPLES", "12")), deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
    @given(data=st.data())
    def a_mutated_recipe_runs_or_fails_with_a_user_error(data):
        workdir = tmp_path_factory.mktemp("fuzz")
        monkeypatch.chdir(workdir)
        (workdir / "assets").symlink_to(ROOT / "assets")
        recipe = yaml.safe_load((ROOT / "recipes" / f"{data.draw(st.sampled_from(RECIPES))}.yaml").read_text())
        paths = leaves(recipe["model"])
        path = data.draw(st.sampled_from(paths))
        action = data.draw(st.sampled_from(["set", "set", "delete", "add"]))
        recipe["model"] = mutated(recipe["model"], path, action, data.draw(ODD_VALUES))
        recipe["trainer"] = {**recipe.get("trainer", {}), "default_root_dir": str(workdir)}
        (workdir / "recipe.yaml").write_text(yaml.safe_dump(recipe))
        capsys.readouterr()
        try:
            main(["fit", "--config", "recipe.yaml", *ONE_ROLLOUT])
            outcomes.append("ran")
        except SystemExit as stop:
            errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lightmarl: error: ")]
            assert stop.code == 2 and len(errors) == 1, (path, action, stop.code, errors)
            outcomes.append(errors[0])

    a_mutated_recipe_runs_or_fails_with_a_user_error()
    assert "ran" in outcomes and any(o != "ran" for o in outcomes), outcomes
