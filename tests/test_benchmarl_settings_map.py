"""benchmarks/benchmarl/settings_map.py: every BenchMARL setting has a lightmarl key or a reason, and the
recipes of recipes/benchmarl/ are BenchMARL's defaults mapped."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
settings_map = load_benchmark("benchmarl/settings_map.py")
compare = load_benchmark("benchmarl/compare.py")
#: BenchMARL's package in the virtualenv compare.py --setup builds (absent on most machines).
INSTALLED_CONF = sorted((ROOT / "benchmarks" / "benchmarl" / "venv").glob("lib/python*/site-packages/benchmarl/conf"))
FILES = {
    "experiment": "experiment/base_experiment.yaml",
    "model": "model/layers/mlp.yaml",
    "critic_model": "model/layers/mlp.yaml",
    **{f"algorithm/{a}": f"algorithm/{a}.yaml" for a in settings_map.ALGORITHMS},
    **{f"task/vmas/{t}": f"task/vmas/{t}.yaml" for t in ("balance", "sampling", "navigation")},
}


def benchmarl_settings() -> dict[str, dict]:
    """BenchMARL's settings: from its installed YAMLs where compare.py --setup installed it, else the committed copy."""
    if not INSTALLED_CONF:
        return settings_map.BENCHMARL_DEFAULTS
    sections = {}
    for section, path in FILES.items():
        values = yaml.safe_load((INSTALLED_CONF[0] / path).read_text()) or {}
        values.pop("defaults", None)  # Hydra's composition list, not a setting
        sections[section] = values
    return sections


def test_every_benchmarl_setting_has_a_lightmarl_key_or_a_reason():
    settings = benchmarl_settings()
    assert settings_map.unmapped(settings) == []
    assert sum(len(values) for values in settings.values()) > 100
    # The rule is looked up, not assumed: a key nobody mapped is reported.
    assert settings_map.unmapped({"experiment": {"new_knob": 1}, "algorithm/masac": {"other": 2}}) == [
        "experiment.new_knob",
        "algorithm/masac.other",
    ]


@pytest.mark.skipif(
    not INSTALLED_CONF, reason="BenchMARL is not installed (python benchmarks/benchmarl/compare.py --setup)"
)
def test_the_committed_copy_is_benchmarls_release():
    assert benchmarl_settings() == settings_map.BENCHMARL_DEFAULTS


def test_values_are_converted_to_lightmarls_units():
    def settings(algorithm, task="vmas/balance", **changes):
        config = settings_map.benchmarl_config(algorithm, task, changes)
        return settings_map.lightmarl_settings(algorithm, config)

    masac, isac = settings("masac"), settings("isac")
    # A centralized critic learns from joint env steps, a local one from agent rows: 128 env steps x 4 agents.
    assert masac["algorithm.batch_size"] == 128 and isac["algorithm.batch_size"] == 512
    assert settings("iql", "vmas/navigation")["algorithm.buffer_size"] == 3_000_000
    assert masac["policy_kwargs.critic"] == "centralized" and isac["policy_kwargs.critic"] == "local"
    assert masac["algorithm.alpha_lr"] == masac["algorithm.actor_lr"] == 5e-5 and masac["algorithm.adam_eps"] == 1e-6
    # 6,000 frames per batch from 10 envs: 600 steps each; each of the 45 iterations is 15 minibatches of 400, a pass.
    mappo = settings("mappo")
    assert (mappo["model.rollout_steps"], mappo["env.num_envs"], mappo["algorithm.epochs"]) == (600, 10, 45)
    assert mappo["algorithm.normalize_advantage"] is False and mappo["policy_kwargs.init_action_std"] == 1.0
    # DDPG's sigma is absolute; lightmarl's noise a fraction of the [-1, 1] range; annealed over a third of the frames.
    maddpg = settings("maddpg", **{"experiment.max_n_frames": 60_000})
    assert maddpg["algorithm.noise_start"] == 0.4 and maddpg["algorithm.noise_decay_frames"] == 20_000
    assert settings("qmix")["algorithm.eps_start"] == 0.8 and settings("qmix")["env.continuous_actions"] is False
    assert settings("mappo", **{"experiment.prefer_continuous_actions": False})["env.continuous_actions"] is False
    assert settings("vdn", "vmas/sampling")["env.scenario_kwargs.n_gaussians"] == 3


@pytest.mark.parametrize(
    ("algorithm", "change", "named"),
    [
        ("masac", {"experiment.off_policy_use_prioritized_replay_buffer": True}, "off_policy_use_prioritized"),
        ("mappo", {"model.norm_class": "torch.nn.LayerNorm"}, "model.norm_class"),
        ("mappo", {"critic_model.num_cells": [64, 64]}, "critic_model.num_cells"),
        ("masac", {"experiment.prefer_continuous_actions": False}, "prefer_continuous_actions"),
        ("mappo", {"experiment.on_policy_minibatch_size": 700}, "on_policy_minibatch_size"),
    ],
)
def test_a_benchmarl_value_lightmarl_cannot_match_is_refused_by_name(algorithm, change, named):
    config = settings_map.benchmarl_config(algorithm, "vmas/balance", change)
    with pytest.raises(ValueError, match=named):
        settings_map.lightmarl_settings(algorithm, config)


def test_unknown_benchmarl_settings_are_refused():
    with pytest.raises(ValueError, match="no such key"):
        settings_map.benchmarl_config("masac", "vmas/balance", {"experiment.no_such": 1})
    with pytest.raises(ValueError, match="not one of BenchMARL's"):
        settings_map.benchmarl_config("ppo", "vmas/balance")


@pytest.mark.parametrize("algorithm", sorted(settings_map.ALGORITHMS))
def test_each_recipe_is_benchmarls_defaults_mapped(algorithm):
    """recipes/benchmarl/<algorithm>.yaml is what --write-recipes writes from the map (the map changed: rewrite them)."""
    recipe = ROOT / settings_map.RECIPES_DIR / f"{algorithm}.yaml"
    assert recipe.read_text() == settings_map.recipe_text(algorithm)


def test_the_reference_page_shows_the_map():
    page = (ROOT / "docs" / "reference" / "benchmarl_settings.md").read_text()
    assert settings_map.markdown_table() in page


def test_compare_offers_every_mapped_algorithm():
    assert set(compare.ALGORITHMS) == set(settings_map.ALGORITHMS)


def test_compare_counts_benchmarls_on_policy_optimizer_steps():
    # 45 iterations of 6,000 / 400 = 15 minibatches each (experiment.py's _collection_loop), one step per minibatch.
    run = compare.algorithm_run(compare.TASKS["vmas_balance"], "mappo", 30_000, 128)
    assert (run.optimizer_steps, run.batch_frames) == (675, 6000)


def test_compare_gives_both_frameworks_the_same_reduction():
    run = compare.algorithm_run(
        compare.TASKS["vmas_navigation"], "iql", 60_000, 32, ["experiment.off_policy_n_optimizer_steps=100"]
    )
    assert run.benchmarl_settings == ("experiment.off_policy_n_optimizer_steps=100",)
    assert run.optimizer_steps == 100 and run.recipe == "recipes/benchmarl/iql.yaml"
    algorithm = next(o for o in run.lightmarl_overrides if o.startswith("--model.algorithm="))
    init_args = yaml.safe_load(algorithm.partition("=")[2])["init_args"]
    assert init_args["updates_per_iteration"] == 100 and init_args["eps_decay_frames"] == 20_000
    assert init_args["batch_size"] == 3 * 128
    assert "--model.env.init_args.scenario=navigation" in run.lightmarl_overrides
    assert (
        "--evaluation.validation.episodes=32" in run.lightmarl_overrides
        and "--model.max_frames=60000" in run.lightmarl_overrides
    )
    with pytest.raises(SystemExit):  # the parser names a setting lightmarl cannot match, before anything runs
        compare.main(
            ["--algorithms", "masac", "--tasks", "vmas_balance", "--frameworks", "lightmarl", "--benchmarl-setting",
             "experiment.off_policy_use_prioritized_replay_buffer=true"]
        )  # fmt: skip
