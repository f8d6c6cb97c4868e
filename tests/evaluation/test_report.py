"""The evaluation report: schema validation, round trip, marl-eval layout, Markdown table."""

from __future__ import annotations

import copy
import doctest
import importlib.resources
import json
import math

import pytest

from lightmarl.evaluation import report as report_module
from lightmarl.evaluation.head_to_head import PayoffMatrix
from lightmarl.evaluation.report import (
    SCHEMA_VERSION,
    build_report,
    load_report,
    markdown_summary,
    merge_marl_eval,
    report_schema,
    scenario_episodes,
    validate_report,
    write_report,
)
from lightmarl.evaluation.statistics import ScenarioEpisodes

pytest.importorskip("jsonschema")

HEAD_TO_HEAD = ScenarioEpisodes(
    returns={"learner": [1.0, 1.0, 0.0, -1.0], "heuristic": [-1.0, -1.0, 0.0, 1.0]},
    lengths={"learner": [9, 11, 42, 20], "heuristic": [9, 11, 42, 20]},
    outcomes={"learner": ["win", "win", "draw", "loss"], "heuristic": ["loss", "loss", "draw", "win"]},
    seats={"learner": ["player_0", "player_1", "player_0", "player_1"], "heuristic": ["player_1", "player_0"] * 2},
)
GAMES = [
    ("learner", "heuristic", "win"),
    ("heuristic", "learner", "loss"),
    ("learner", "heuristic", "draw"),
    ("heuristic", "learner", "win"),
]
SPREAD = ScenarioEpisodes(
    returns={"main": [-20.5, -18.25, -25.0], "npc": [-30.0, -28.5, -31.0]},
    lengths={"main": [25, 25, 25], "npc": [25, 25, 25]},
    info={"main": {"collisions": [2.0, 0.0, float("nan")]}},
)


@pytest.fixture
def report():
    return build_report(
        {"vs_heuristic": HEAD_TO_HEAD, "spread": SPREAD},
        env_name="connect_four_v3",
        head_to_head_games={"vs_heuristic": GAMES},
        run="seed_3",
        step_count=120_000,
        metadata={"recipe": "recipes/connect_four.yaml"},
    )


def test_module_examples():
    assert doctest.testmod(report_module).failed == 0


def test_schema_ships_with_the_package_and_is_a_valid_schema():
    import jsonschema

    text = importlib.resources.files("lightmarl.evaluation").joinpath("report.schema.json").read_text()
    schema = json.loads(text)
    assert schema == report_schema()
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    jsonschema.Draft202012Validator.check_schema(schema)


def test_report_validates_and_round_trips(report, tmp_path):
    validate_report(report)
    path = write_report(report, tmp_path / "eval" / "report.json")
    loaded = load_report(path)
    assert loaded == report
    assert loaded["schema_version"] == SCHEMA_VERSION and loaded["run"] == "seed_3"
    again = scenario_episodes(loaded, "vs_heuristic")
    assert again.returns == HEAD_TO_HEAD.returns and again.outcomes == HEAD_TO_HEAD.outcomes
    assert again.seats == HEAD_TO_HEAD.seats
    spread = scenario_episodes(loaded, "spread")
    assert spread.outcomes is None
    assert spread.info is not None and math.isnan(spread.info["main"]["collisions"][2])
    # The reloaded episodes summarise to the same numbers.
    rebuilt = build_report({"vs_heuristic": again, "spread": spread}, "connect_four_v3", {"vs_heuristic": GAMES})
    assert rebuilt["scenarios"] == report["scenarios"]


def test_report_contents(report):
    learner = report["scenarios"]["vs_heuristic"]["bindings"]["learner"]
    assert learner["episode_return"]["mean"] == pytest.approx(0.25)
    assert learner["outcomes"]["win"]["count"] == 2
    assert set(learner["outcomes"]["by_seat"]) == {"player_0", "player_1"}
    h2h = report["scenarios"]["vs_heuristic"]["head_to_head"]
    assert h2h["players"] == ["learner", "heuristic"]
    payoff = PayoffMatrix.from_dict(h2h)
    assert payoff.score_of("learner", "heuristic") == pytest.approx(2.5 / 4)
    assert h2h["elo"]["learner"] > h2h["elo"]["heuristic"]
    assert h2h["results"][0] == ["learner", "heuristic", "win"]
    assert report["scenarios"]["spread"]["head_to_head"] is None
    collisions = report["scenarios"]["spread"]["bindings"]["main"]["info"]["collisions"]
    assert (collisions["n"], collisions["mean"]) == (2, 1.0)
    assert report["metadata"] == {"recipe": "recipes/connect_four.yaml"}
    assert report["statistics"] == {
        "confidence": 0.95,
        "interval": "t",
        "bootstrap_seed": 0,
        "bootstrap_resamples": 10_000,
    }


def check_marl_eval_layout(data: dict) -> None:
    """What marl-eval's data_process_pipeline / DiagnoseData need of a raw-data JSON."""
    for env, tasks in data.items():
        metric_sets = set()
        for task, algorithms in tasks.items():
            for algorithm, runs in algorithms.items():
                for run, steps in runs.items():
                    keys = list(steps)
                    # Steps first, in order, then absolute_metrics last (marl-eval takes steps[-1]).
                    assert keys[-1] == "absolute_metrics", (env, task, algorithm, run)
                    assert keys[:-1] == [f"step_{i}" for i in range(len(keys) - 1)] and len(keys) >= 2
                    for step in keys[:-1]:
                        assert isinstance(steps[step]["step_count"], int)
                        metrics = {k: v for k, v in steps[step].items() if k != "step_count"}
                        metric_sets.add(frozenset(metrics))
                        assert all(
                            isinstance(v, list) and v and all(isinstance(x, float) for x in v) for v in metrics.values()
                        )
                    assert set(steps["absolute_metrics"]) == set(metrics)
                    json.dumps(steps, allow_nan=False)
        assert len(metric_sets) == 1, f"marl-eval needs one metric set per environment, got {metric_sets}"


def test_marl_eval_section_has_marl_evals_layout(report):
    marl_eval = report["marl_eval"]
    assert list(marl_eval) == ["connect_four_v3"]
    assert set(marl_eval["connect_four_v3"]) == {"vs_heuristic", "spread"}
    learner = marl_eval["connect_four_v3"]["vs_heuristic"]["learner"]
    assert list(learner) == ["seed_3"]
    step = learner["seed_3"]["step_0"]
    # "spread" has no winner, so win_rate is left out everywhere: one metric set per environment.
    assert step == {
        "step_count": 120_000,
        "episode_return": [1.0, 1.0, 0.0, -1.0],
        "episode_length": [9.0, 11.0, 42.0, 20.0],
    }
    assert learner["seed_3"]["absolute_metrics"] == {k: v for k, v in step.items() if k != "step_count"}
    check_marl_eval_layout(marl_eval)
    games_only = build_report({"vs_heuristic": HEAD_TO_HEAD}, "connect_four_v3")
    win_rate = games_only["marl_eval"]["connect_four_v3"]["vs_heuristic"]["learner"]["seed_0"]["step_0"]["win_rate"]
    assert win_rate == [0.5]  # a rate over all episodes is a one-element list in marl-eval
    check_marl_eval_layout(games_only["marl_eval"])


def test_merged_seeds_keep_marl_evals_layout():
    reports = [build_report({"spread": SPREAD}, "mpe2", run=f"seed_{seed}", step_count=1000) for seed in range(3)]
    merged = merge_marl_eval(reports)
    assert list(merged["mpe2"]["spread"]["main"]) == ["seed_0", "seed_1", "seed_2"]
    check_marl_eval_layout(merged)
    with pytest.raises(ValueError, match=r"run\(s\) \['seed_0'\] of mpe2/spread/main"):
        merge_marl_eval([reports[0], reports[0]])


def test_invalid_reports_fail_naming_the_field(report, tmp_path):
    broken = copy.deepcopy(report)
    broken["scenarios"]["spread"]["bindings"]["main"]["episode_return"]["n"] = "three"
    with pytest.raises(ValueError, match="scenarios/spread/bindings/main/episode_return/n"):
        validate_report(broken)
    newer = copy.deepcopy(report)
    newer["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    with pytest.raises(ValueError, match=f"schema_version {SCHEMA_VERSION + 1}"):
        load_report(tmp_path / "newer.json")
    (tmp_path / "bad.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_report(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="not a readable evaluation report"):
        load_report(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"scenarios \['nope'\]"):
        build_report({"spread": SPREAD}, "mpe2", head_to_head_games={"nope": GAMES})
    with pytest.raises(ValueError, match="scenario 'nope'"):
        scenario_episodes(report, "nope")


def test_markdown_summary(report):
    table = markdown_summary(report)
    lines = table.splitlines()
    assert lines[0] == "| scenario | binding | return (mean [95% CI]) | length | W / D / L | episodes |"
    assert lines[2].startswith("| vs_heuristic | learner | 0.25 [") and lines[2].endswith(
        "| 20.5 | 0.50 / 0.25 / 0.25 | 4 |"
    )
    assert "| spread | main | -21.25 [" in table and "| 25.0 | – | 3 |" in table
    assert "Head-to-head `vs_heuristic`" in table
    assert "| learner | – | 0.625 |" in table  # 2.5 / 4, the row player's score


def test_a_report_of_exploitability_alone_has_no_scenarios_and_validates():
    report = build_report({}, "kuhn_poker")
    assert report["scenarios"] == {} and report["marl_eval"] == {"kuhn_poker": {}}
    with pytest.raises(ValueError, match="scenarios"):  # nothing measured at all is not a report
        validate_report(report)
    report["exploitability"] = {"main": {"game": "kuhn_poker", "exploitability": 0.25, "nash_conv": 0.5}}
    validate_report(report)
    assert markdown_summary(report).splitlines()[0] == "| binding | game | exploitability | NashConv |"
