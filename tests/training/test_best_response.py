"""Approximate exploitability (``evaluation.best_response``): a best response trained by ``lightmarl evaluate``.

Kuhn poker, whose exact values are known: against the recipe's untrained (nearly uniform,
exploitable) network a best response trained for a few seconds earns clearly more than the
policy earns against itself (0 by symmetry), never more than the exact exploitability, and its
sampled return agrees with its exact one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from lightmarl.algorithms import PPO
from lightmarl.algorithms.magnet import Magnet
from lightmarl.cli import main
from lightmarl.errors import ConfigError
from lightmarl.evaluation.best_response import BestResponseConfig, check_best_response
from lightmarl.evaluation.report import validate_report
from lightmarl.training.best_response import (
    BEST_RESPONSE,
    BestResponseModule,
    best_response_algorithm,
    initial_map,
    seating,
)

ROOT = Path(__file__).resolve().parents[2]
KUHN = str(ROOT / "recipes" / "league_kuhn_poker.yaml")


@pytest.mark.timeout(300)
def test_a_best_response_on_kuhn_earns_what_the_exploitable_policy_gives_away(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "evaluation"
    main(
        [
            "evaluate",
            "--config",
            KUHN,
            "--ckpt_path=null",
            f"--out={out}",
            "--trainer.logger=false",
            "--evaluation.head_to_head.episodes=4",
            "--evaluation.best_response=[{name: vs_main, target: main, frames: 32768, episodes: 1000}, "
            "{name: frozen, target: main, frames: 32768, episodes: 200, algorithm: {lr: 1.0e-9}}]",
        ]
    )
    report = json.loads((out / "report.json").read_text())
    validate_report(report)
    block = report["best_response"]["vs_main"]
    assert block["target"] == {"binding": "main", "policy": "weights"}
    (run,) = block["runs"]
    assert run["frames"] == 32768 and block["frames"] == 32768
    exploitability = report["exploitability"]["main"]["exploitability"]
    assert block["exploitability"] == pytest.approx(exploitability, abs=1e-9)  # the same policy, measured twice
    assert exploitability > 0.3  # the untrained network is close to uniform play (0.458)
    # A trained best response takes most of what the policy gives away, and no policy beats a best response.
    assert 0.2 < block["exact_return"] <= exploitability + 1e-9
    assert run["exact_greedy_return"] <= exploitability + 1e-9
    assert block["gap"] == pytest.approx(exploitability - block["exact_return"])
    # The sampled return (1,000 episodes, seats drawn) estimates the exact one.
    value = block["value"]
    assert value["n"] == 1000 and value["ci_low"] > 0.1
    assert value["ci_low"] - 0.05 <= block["exact_return"] <= value["ci_high"] + 0.05
    assert all(seat_return is not None for seat_return in run["seat_returns"])  # both seats played
    assert "Approximate exploitability" in capsys.readouterr().out
    # The entry's own settings reach the best response's learner: with a learning rate of 1e-9 it stays
    # the untrained network, which earns about what the policy earns against itself.
    frozen = report["best_response"]["frozen"]
    assert frozen["algorithm"] == {"lr": 1.0e-9} and block["algorithm"] == {}
    assert abs(frozen["exact_return"]) < 0.1 < block["exact_return"] - 0.1


def test_bad_best_response_entries_fail_naming_the_field():
    with pytest.raises(ValueError, match=r"evaluation.best_response\['x'\].frames: expected a positive integer"):
        BestResponseConfig(name="x", target="main", frames=0)
    with pytest.raises(ValueError, match=r"\['x'\].algorithm: expected a mapping"):
        BestResponseConfig(name="x", target="main", algorithm=["lr"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="target: 'ghost' is not a binding"):
        check_best_response([BestResponseConfig(name="x", target="ghost")], {"main": True}, ["random"])
    with pytest.raises(ValueError, match="names \\['x'\\] appear more than once"):
        check_best_response([BestResponseConfig(name="x", target="main")] * 2, {"main": True}, [])
    with pytest.raises(ValueError, match="no trainable binding"):
        check_best_response([BestResponseConfig(name="x", target="random")], {"npc": False}, ["random"])


def test_an_entrys_algorithm_fields_replace_the_recipes_for_the_best_response_only():
    recipe = PPO(entropy_coeff=0.2, final_entropy_coeff=0.02, lr=0.003, magnet=Magnet(coeff=0.05))
    config = BestResponseConfig(
        name="tuned",
        target="main",
        algorithm={"entropy_coeff": 0.01, "final_entropy_coeff": None, "epochs": 8, "magnet": {"coeff": 0.1}},
    )
    tuned = best_response_algorithm(config, recipe)
    assert isinstance(tuned, PPO) and tuned is not recipe
    assert (tuned.entropy_coeff, tuned.final_entropy_coeff, tuned.epochs, tuned.lr) == (0.01, None, 8, 0.003)
    assert tuned.magnet is not None and tuned.magnet.coeff == 0.1 and tuned.magnet.mixing == recipe.magnet.mixing
    assert (recipe.entropy_coeff, recipe.final_entropy_coeff, recipe.epochs, recipe.magnet.coeff) == (
        0.2,
        0.02,
        4,
        0.05,
    )
    assert best_response_algorithm(BestResponseConfig(name="same", target="main"), recipe) == recipe
    assert (
        best_response_algorithm(BestResponseConfig(name="x", target="main", algorithm={"magnet": None}), recipe).magnet
        is None
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"entropy_coef": 0.0}, r"\['x'\].algorithm.entropy_coef: PPO has no field 'entropy_coef'"),
        ({"epochs": 2.5}, r"\['x'\].algorithm.epochs: 2.5 does not fit the field"),
        ({"lr": "fast"}, r"\['x'\].algorithm.lr: 'fast' does not fit"),
        ({"lr": None}, r"\['x'\].algorithm.lr: None does not fit"),
        ({"anneal_lr": 1}, r"\['x'\].algorithm.anneal_lr: 1 does not fit"),
        ({"distillation": {"teacher": "main"}}, r"\['x'\].algorithm.distillation: \{'teacher': 'main'\} does not fit"),
        ({"magnet": {"pull": 1.0}}, r"\['x'\].algorithm.magnet.pull: Magnet has no field 'pull'"),
        ({"entropy_coeff": -1.0}, r"\['x'\].algorithm: .*entropy_coeff"),
    ],
)
def test_bad_algorithm_fields_of_a_best_response_fail_naming_the_field(changes, message):
    recipe = PPO(magnet=Magnet())
    with pytest.raises(ConfigError, match=message):
        best_response_algorithm(BestResponseConfig(name="x", target="main", algorithm=changes), recipe)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "{name: br, target: main, algorithm: {entropy_coef: 0.0}}",
            "evaluation.best_response['br'].algorithm.entropy_coef: PPO has no field",
        ),
        ("{name: br, target: ghost}", "evaluation.best_response['br'].target: 'ghost'"),
    ],
    ids=["unknown algorithm field", "unknown target"],
)
def test_a_bad_best_response_entry_stops_evaluate_in_one_line(entry, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--config", KUHN, "--ckpt_path=null", f"--evaluation.best_response=[{entry}]"])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"lightmarl: error: {message}")


def test_each_finished_episode_draws_a_member_with_its_weight_and_swaps_the_seat():
    from types import SimpleNamespace

    import torch

    from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig

    agents, seats = ["player_0", "player_1"], [["player_0"], ["player_1"]]
    members = ["target_0", "target_1"]
    weights = np.array([0.8, 0.2])
    spec = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [8]}}
    module = BestResponseModule(
        members=members,
        weights=weights,
        seats=seats,
        draw_seed=3,
        env=PettingZooEnvConfig(
            env_fn="lightmarl.envs.openspiel.openspiel_env", env_kwargs={"game": "kuhn_poker"}, num_envs=4
        ),
        policy_bindings=[
            {"id": BEST_RESPONSE, **spec},
            *[{"id": m, **spec, "trainable": False} for m in members],
        ],
        agent_binding_map=initial_map(agents, seats, members, 4, weights, np.random.default_rng(0)),
    )
    assert module.table.per_env_maps[0] == seating(agents, seats, 0, "target_0")
    assert module.table.per_env_maps[1] == seating(agents, seats, 1, "target_1")
    drawn = []
    for _ in range(2000):
        step = SimpleNamespace(envs=slice(0, 4), ended=torch.tensor([True, False, False, False]))
        before = module.table.per_env_maps[0].index(BEST_RESPONSE)
        module._next_episodes(step)  # type: ignore[arg-type]
        after = module.table.per_env_maps[0]
        assert after.index(BEST_RESPONSE) == 1 - before  # the other seat each episode
        drawn.append(next(b for b in after if b != BEST_RESPONSE))
        assert module.table.per_env_maps[1] == seating(agents, seats, 1, "target_1")  # copies still playing keep theirs
    assert abs(drawn.count("target_0") / len(drawn) - 0.8) < 0.04
