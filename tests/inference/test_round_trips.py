"""Round trips that would have caught a population's artifact missing what it needs to act:
a normalized recipe exported and played again scores what `validate` scores on the same seeds; an NPC
from a normalized run used in another recipe sees normalized inputs; counters are public."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from mpe2 import simple_spread_v3
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

import lightmarl
from expectations import tiny_cli_run
from lightmarl.cli import main
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.population import PolicyBinding

ROOT = Path(__file__).resolve().parents[2]
NORMALIZED = ROOT / "recipes/ippo_normalized.yaml"
EPISODES, EVAL_SEED = 4, 10_000


@pytest.fixture(scope="module")
def normalized_run(tmp_path_factory):
    """A short run of recipes/ippo_normalized.yaml (statistics from 40 env steps), its export and validate's score."""
    where = tmp_path_factory.mktemp("normalized")
    old = Path.cwd()
    os.chdir(where)
    try:
        tiny = [*tiny_cli_run(NORMALIZED), "--model.max_frames=40"]
        main(["fit", "--config", str(NORMALIZED), *tiny])
        run = where / "runs" / "ippo_normalized"
        main(["export", str(run), "--out", str(where / "exported")])
        evaluation = [
            f"--evaluation.validation.episodes={EPISODES}",
            f"--evaluation.validation.num_envs={EPISODES}",
            "--trainer.logger=null",
        ]
        main(["validate", "--config", str(NORMALIZED), *tiny, *evaluation, "--ckpt_path", "last"])
        rows = [r for m in run.rglob("metrics.csv") for r in csv.DictReader(m.open())]
        score = next(float(r["eval/main/episode_return"]) for r in rows if r.get("eval/main/episode_return"))
    finally:
        os.chdir(old)
    return run, where / "exported", score


def play_export(population) -> float:
    """The mean per-agent return of the validate episodes, played by `population`: copy i is reset with
    EVAL_SEED + i, and simple_spread's episodes all last 25 steps, so the first episodes to end are those."""
    returns = []
    for i in range(EPISODES):
        env = simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)
        observations, _ = env.reset(seed=EVAL_SEED + i)
        population.reset()
        total = 0.0
        while env.agents:
            observations, rewards, *_ = env.step(population.act(observations))
            total += sum(rewards.values()) / 3
        returns.append(total)
    return float(np.mean(returns))


def test_the_export_scores_what_validate_scores_on_the_same_seeds(normalized_run):
    run, exported, score = normalized_run
    description = json.loads((exported / "population.json").read_text())
    assert description["format"] == "lightmarl.population/1"
    assert [t["class_path"].rsplit(".", 1)[-1] for t in description["transforms"]] == ["ObservationNorm", "RewardNorm"]
    population = lightmarl.load_population(exported)
    assert population.frames == 40 and population.iterations == 4  # public counters, as the checkpoint has them
    assert population.agent_map == {"agent_0": "main", "agent_1": "main", "agent_2": "main"}
    assert play_export(population) == pytest.approx(score, abs=1e-4)
    # The run directory and its checkpoint load the same population.
    assert play_export(lightmarl.load_population(run)) == pytest.approx(score, abs=1e-4)


def test_without_its_transforms_the_policy_would_act_otherwise(normalized_run):
    """The statistics are not the identity: dropping them changes actions (so the play-again test can fail)."""
    _, exported, _ = normalized_run
    population = lightmarl.load_population(exported)
    env = simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)
    observations, _ = env.reset(seed=EVAL_SEED)
    raw = torch.as_tensor(np.stack([observations[a] for a in env.possible_agents]))[None]
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        logits = population.bindings["main"](TensorDict({"agent": {"observation": raw}}, batch_size=[1]))
    norm = population.transforms[0]
    expected = norm.normalize("agent", raw, torch.ones(1, 3, dtype=torch.bool))
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        normalized = population.bindings["main"](TensorDict({"agent": {"observation": expected}}, batch_size=[1]))
    assert not torch.allclose(logits["agent", "logits"], normalized["agent", "logits"])


def test_an_npc_from_a_normalized_run_sees_normalized_inputs(normalized_run, tmp_path):
    run, _, _ = normalized_run
    group = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 25}).spec().groups["agent"]
    checkpoint = run / "checkpoints" / "last.ckpt"
    npc = PolicyRegistry().get(PolicyBinding("npc", policy_uri=f"{checkpoint}#main", trainable=False), group)
    population = lightmarl.load_population(checkpoint)
    env = simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)
    observations, _ = env.reset(seed=3)
    for _ in range(10):
        raw = torch.as_tensor(np.stack([observations[a] for a in env.possible_agents]))[None]
        rows = TensorDict({"agent": {"observation": raw}}, batch_size=[1])
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            npc_logits = npc(rows)["agent", "logits"]
        assert torch.equal(rows["agent", "observation"], raw), "the rows keep the env's observations"
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            normalized = population.transforms[0].normalize("agent", raw, torch.ones(1, 3, dtype=torch.bool))
            wanted = population.bindings["main"](TensorDict({"agent": {"observation": normalized}}, batch_size=[1]))
        assert torch.allclose(npc_logits, wanted["agent", "logits"], atol=1e-5)
        observations, *_ = env.step(population.act(observations))
    # In another recipe: the NPC plays through the real CLI, and the run's checkpoint keeps its normalization.
    other = tmp_path / "npc.yaml"
    other.write_text((ROOT / "recipes/ippo_simple_spread.yaml").read_text())
    bindings = json.dumps(
        [
            {"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"critic": "local"}},
            {"id": "npc", "policy_uri": f"{checkpoint}#main", "trainable": False},
        ]
    )
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        tiny = tiny_cli_run(ROOT / "recipes/ippo_simple_spread.yaml")
        main(
            [
                "fit",
                "--config",
                str(other),
                *tiny,
                f"--model.policy_bindings={bindings}",
                '--model.agent_binding_map=["main","npc","main"]',
            ]
        )
    finally:
        os.chdir(old)
    host = lightmarl.load_population(next(tmp_path.rglob("last.ckpt")))
    assert host.agent_map["agent_1"] == "npc"
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        again = host.bindings["npc"](TensorDict({"agent": {"observation": raw}}, batch_size=[1]))["agent", "logits"]
        wanted = population.bindings["main"](
            TensorDict(
                {
                    "agent": {
                        "observation": population.transforms[0].normalize(
                            "agent", raw, torch.ones(1, 3, dtype=torch.bool)
                        )
                    }
                },
                batch_size=[1],
            )
        )["agent", "logits"]
    assert torch.allclose(again, wanted, atol=1e-5)


def test_an_npc_in_a_recipe_that_normalizes_too_sees_its_own_runs_normalization(normalized_run, tmp_path, monkeypatch):
    """The recipe's ObservationNorm (its own statistics) is undone for the NPC, which applies its run's."""
    run, _, _ = normalized_run
    source = lightmarl.load_population(run)
    bindings = json.dumps(
        [
            {"id": "main", "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"critic": "local"}},
            {"id": "npc", "policy_uri": f"{run / 'checkpoints' / 'last.ckpt'}#main", "trainable": False},
        ]
    )
    monkeypatch.chdir(tmp_path)
    tiny = [*tiny_cli_run(NORMALIZED), "--model.max_frames=30", f"--model.policy_bindings={bindings}"]
    main(["fit", "--config", str(NORMALIZED), *tiny, '--model.agent_binding_map=["main","npc","main"]'])
    host = lightmarl.load_population(tmp_path / "runs" / "ippo_normalized")
    host_stats = host.transforms[0].statistics["agent"]
    assert not torch.allclose(host_stats.mean, source.transforms[0].statistics["agent"].mean), (
        "two runs, two statistics"
    )
    env = simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)
    observations, _ = env.reset(seed=11)
    group = PettingZooEnvConfig(env_kwargs={"N": 3, "max_cycles": 25}).spec().groups["agent"]
    # As the host run's collector built it: the recipe's transforms given to the registry.
    npc = PolicyRegistry(host.transforms).get(
        PolicyBinding("npc", policy_uri=f"{run / 'checkpoints' / 'last.ckpt'}#main", trainable=False), group
    )
    present = torch.ones(1, 3, dtype=torch.bool)
    while env.agents:
        mine, theirs = host.act(observations), source.act(observations)
        assert mine["agent_1"] == theirs["agent_1"], "the NPC acts as in its own run"
        raw = torch.as_tensor(np.stack([observations[a] for a in env.possible_agents]))[None]
        seen = TensorDict({"agent": {"observation": host.transforms[0].normalize("agent", raw, present)}}, [1])
        own = TensorDict({"agent": {"observation": source.transforms[0].normalize("agent", raw, present)}}, [1])
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            assert torch.allclose(
                npc(seen)["agent", "logits"], source.bindings["main"](own)["agent", "logits"], atol=1e-4
            )
        observations, *_ = env.step(mine)


def test_the_onnx_export_of_a_normalized_run_acts_as_the_population(normalized_run, tmp_path):
    """Normalization folded into the graph: onnxruntime on raw observations = load_population's actions."""
    ort = pytest.importorskip("onnxruntime")
    _, exported, _ = normalized_run
    main(["export", str(exported), "--out", str(tmp_path / "onnx"), "--format", "onnx"])
    manifest = json.loads((tmp_path / "onnx" / "manifest.json").read_text())["bindings"]["main"]
    assert manifest["folded"] == ["ObservationNorm"] and manifest["preprocess"] == []
    session = ort.InferenceSession(str(tmp_path / "onnx" / "main.onnx"))
    population = lightmarl.load_population(exported)
    env = simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)
    observations, _ = env.reset(seed=EVAL_SEED)
    while env.agents:
        rows = np.stack([observations[a] for a in env.agents]).astype(np.float32)
        (actions,) = session.run(["action"], {"observation": rows})
        expected = population.act(observations)
        assert dict(zip(env.agents, actions.tolist())) == expected
        observations, *_ = env.step(expected)


@pytest.mark.slow
def test_an_image_recipe_export_scores_what_validate_scores(tmp_path, monkeypatch):
    """recipes/pistonball.yaml (Resize, Grayscale where the env runs, FrameStack): the export played again
    on PettingZoo's own env scores what `validate` scores on the same seeds."""
    pistonball = pytest.importorskip("pettingzoo.butterfly.pistonball_v6")
    recipe = ROOT / "recipes/pistonball.yaml"
    env_kwargs = {"n_pistons": 4, "continuous": False, "max_cycles": 20, "render_mode": "rgb_array"}
    monkeypatch.chdir(tmp_path)
    tiny = [
        *tiny_cli_run(recipe),
        f"--model.env.env_kwargs={json.dumps(env_kwargs)}",
        "--model.max_frames=40",
        "--evaluation.validation.deterministic=true",
        "--trainer.callbacks=[]",
    ]
    main(["fit", "--config", str(recipe), *tiny])
    population = lightmarl.load_population(tmp_path / "runs" / "pistonball")
    # One episode per validate: with several copies the first episodes to end count, not one per seed.
    for seed in (EVAL_SEED, EVAL_SEED + 1):
        evaluation = [
            "--evaluation.validation.episodes=1",
            "--evaluation.validation.num_envs=1",
            f"--evaluation.validation.seed={seed}",
        ]
        main(["validate", "--config", str(recipe), *tiny, *evaluation, "--trainer.logger=null", "--ckpt_path", "last"])
        metrics = sorted((tmp_path / "runs").rglob("metrics.csv"))[-1]
        rows = [r for r in csv.DictReader(metrics.open()) if r.get("eval/main/episode_return")]
        score = float(rows[-1]["eval/main/episode_return"])
        env = pistonball.parallel_env(**env_kwargs)
        observations, _ = env.reset(seed=seed)
        population.reset()
        total = 0.0
        while env.agents:
            observations, rewards, *_ = env.step(population.act(observations))
            total += sum(rewards.values()) / len(rewards)
        assert total == pytest.approx(score, abs=1e-4), seed
