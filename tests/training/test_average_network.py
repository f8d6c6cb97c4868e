"""The league's shown mixture distilled into one network (``league.average_networks``), on Kuhn poker.

A short league with a Nash meta-solver: the average network ``main_average`` plays close to the
mixture it distils (exact exploitability within 0.05 of the mixture's, both far from the live
binding's when they differ), its exact exploitability is logged, and the network travels with the
checkpoint: ``load_population`` and the ONNX export rebuild it and it plays the same exploitability.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")

from expectations import fit_in_process
from lightmarl.evaluation.exploitability import measure, mixture_policy, openspiel_game, tabular_policy
from lightmarl.training.average_network import AverageNetworkConfig
from lightmarl.training.exploitability import OpenSpielExploitability

ROOT = Path(__file__).resolve().parents[2]


def short_league(tmp_path: Path, *overrides: str):
    module = fit_in_process(
        ROOT / "recipes" / "league_kuhn_poker.yaml",
        tmp_path,
        "--model.env.num_envs=32",
        "--model.rollout_steps=16",
        "--model.max_frames=8192",
        "--model.league.roles=[{class_path: lightmarl.league.MetaStrategyPlayer, binding: main, settings: "
        "{one_phase_step: 512, meta_solver: {class_path: lightmarl.league.NashMetaSolver}}}]",
        "--model.league.average_networks=[{player: main, every_n_iterations: 8, frames: 30000, epochs: 10, "
        "minibatch_size: 256, lr: 0.003}]",
        "--trainer.callbacks=[{class_path: lightmarl.training.exploitability.OpenSpielExploitability, "
        "init_args: {binding: main, every_n_iterations: 8}}]",
        *overrides,
    )
    (callback,) = [c for c in module.trainer.callbacks if isinstance(c, OpenSpielExploitability)]
    return module, callback


class OnnxPolicy:
    """An exported ONNX graph read as a scripted policy with a distribution (what exploitability reads)."""

    has_distribution = True

    def __init__(self, path: Path, inputs: list[str]):
        import onnxruntime

        self.session = onnxruntime.InferenceSession(str(path))
        self.inputs = inputs

    def action_logits(self, observation, mask, agent_id):
        feeds = {"observation": observation[:, 0].numpy(), "action_mask": mask[:, 0].numpy()}
        (logits,) = self.session.run(["logits"], {k: v for k, v in feeds.items() if k in self.inputs})
        return torch.as_tensor(logits).unsqueeze(1)


@pytest.mark.timeout(600)
def test_the_average_network_plays_the_mixture_it_distils_and_ships_like_any_binding(tmp_path):
    from lightmarl.inference import load_population, read_artifact, write_artifact
    from lightmarl.inference.onnx import export_onnx

    module, callback = short_league(tmp_path)
    last = callback.last
    assert last["league/main/mixture_size"] >= 2  # a mixture, not the live binding, is distilled
    mixture, average = last["league/main/exploitability"], last["league/main/average_exploitability"]
    assert abs(average - mixture) < 0.05, last
    # The distilled network is not the live one: it was trained on the mixture, not copied.
    live = module.policies["main"].state_dict()
    distilled = module.policies["main_average"].state_dict()
    assert any(not torch.equal(live[k], distilled[k]) for k in live)
    assert not any(p.requires_grad for p in module.policies["main_average"].parameters())  # frozen between distils

    spiel = openspiel_game("kuhn_poker")
    checkpoint = tmp_path / "last.ckpt"
    module.trainer.save_checkpoint(checkpoint)
    population = load_population(checkpoint)
    assert "main_average" in population.bindings
    loaded = measure(spiel, tabular_policy(spiel, population.bindings["main_average"], "player")).exploitability
    assert loaded == pytest.approx(average, abs=1e-6)
    exported = write_artifact(read_artifact(checkpoint, field="test"), tmp_path / "exported")
    assert "main_average" in load_population(exported).bindings
    onnx_dir = export_onnx(read_artifact(exported), tmp_path / "onnx")
    manifest = json.loads((onnx_dir / "manifest.json").read_text())["bindings"]["main_average"]
    onnx = OnnxPolicy(onnx_dir / manifest["file"], list(manifest["inputs"]))
    assert measure(spiel, tabular_policy(spiel, onnx, "player")).exploitability == pytest.approx(average, abs=1e-4)


def test_distilling_an_explicit_mixture_matches_its_realization_equivalent_policy(tmp_path):
    """Two fixed members with weights 0.7 / 0.3: the student's exact exploitability ends near the
    mixture's, far from either member's own."""
    from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
    from lightmarl.policies import MLPActorCritic
    from lightmarl.training.average_network import distill_mixture

    env = PettingZooEnvConfig(env_fn="lightmarl.envs.openspiel.openspiel_env", env_kwargs={"game": "kuhn_poker"})
    env.num_envs = 64
    group = env.spec().groups["player"]
    torch.manual_seed(0)
    members = []
    for scale in (4.0, -4.0):  # two confident, opposite players
        member = MLPActorCritic(group, hidden_sizes=[16])
        with torch.no_grad():
            for p in member.parameters():
                p.mul_(scale)
        members.append(member.eval())
    spiel = openspiel_game("kuhn_poker")
    tables = [tabular_policy(spiel, m, "player") for m in members]
    target = measure(spiel, mixture_policy(spiel, tables, [0.7, 0.3])).exploitability
    own = [measure(spiel, t).exploitability for t in tables]
    student = MLPActorCritic(group, hidden_sizes=[16])
    config = AverageNetworkConfig(player="main", frames=40000, epochs=15, minibatch_size=256, lr=0.003)
    found = distill_mixture(student, members, [0.7, 0.3], env, [["player_0"], ["player_1"]], config, 16)
    assert found["kl"] < found["kl_before"]
    table = tabular_policy(spiel, student.eval(), "player")
    learned = measure(spiel, table).exploitability
    assert abs(learned - target) < 0.03, (learned, target, own)
    # Information state by information state, the student plays the mixture, not one of its members.
    mixed = mixture_policy(spiel, tables, [0.7, 0.3]).action_probability_array
    to_mixture = np.abs(table.action_probability_array - mixed).max()
    to_members = [np.abs(table.action_probability_array - t.action_probability_array).max() for t in tables]
    assert to_mixture < 0.1 and min(to_members) > 2 * to_mixture, (to_mixture, to_members)


def test_bad_average_networks_fail_naming_the_field():
    with pytest.raises(ValueError, match=r"league\.average_networks\.frames: expected a positive integer"):
        AverageNetworkConfig(player="main", frames=0)
    np.testing.assert_equal(AverageNetworkConfig(player="main").binding_id, "main_average")


def test_distilling_where_some_actions_are_illegal(tmp_path):
    """Leduc poker masks actions (no check after a raise, ...): the KL skips illegal actions, so it
    stays small and falls, and the student ends near the mixture's exploitability."""
    from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
    from lightmarl.policies import MLPActorCritic
    from lightmarl.training.average_network import distill_mixture

    env = PettingZooEnvConfig(env_fn="lightmarl.envs.openspiel.openspiel_env", env_kwargs={"game": "leduc_poker"})
    env.num_envs = 64
    group = env.spec().groups["player"]
    torch.manual_seed(1)
    members = [MLPActorCritic(group, hidden_sizes=[32]).eval() for _ in range(2)]
    spiel = openspiel_game("leduc_poker")
    tables = [tabular_policy(spiel, m, "player") for m in members]
    target = measure(spiel, mixture_policy(spiel, tables, [0.5, 0.5])).exploitability
    student = MLPActorCritic(group, hidden_sizes=[32])
    config = AverageNetworkConfig(player="main", frames=20000, epochs=10, minibatch_size=256, lr=0.003)
    found = distill_mixture(student, members, [0.5, 0.5], env, [["player_0"], ["player_1"]], config, 16)
    assert found["kl"] < found["kl_before"] and found["kl"] < 0.1, found
    learned = measure(spiel, tabular_policy(spiel, student.eval(), "player")).exploitability
    assert abs(learned - target) < 0.15, (learned, target)


def test_an_exploring_seat_takes_the_given_share_of_episodes_and_never_both_seats():
    """``explore``: in that share of episodes one seat, never two, plays the uniform explorer; the
    others play members drawn with their meta weights."""
    from lightmarl.training.average_network import EXPLORER, draw_seats

    members, weights, rng = ["a", "b"], np.array([0.8, 0.2]), np.random.default_rng(0)
    draws = [draw_seats(rng, members, weights, 2, 0.5) for _ in range(4000)]
    exploring = [d for d in draws if EXPLORER in d]
    assert abs(len(exploring) / len(draws) - 0.5) < 0.03
    assert all(d.count(EXPLORER) == 1 for d in exploring)
    played = [m for d in draws for m in d if m != EXPLORER]
    assert abs(played.count("a") / len(played) - 0.8) < 0.03
    assert not any(EXPLORER in draw_seats(rng, members, weights, 2, 0.0) for _ in range(500))
    assert not any(EXPLORER in draw_seats(rng, members, weights, 1, 0.9) for _ in range(500))
    with pytest.raises(ValueError, match=r"league\.average_networks\.explore: expected a number in \[0, 1\)"):
        AverageNetworkConfig(player="main", explore=1.0)


def test_the_explorers_rows_are_not_learned_from():
    """With ``explore: 0.5`` a quarter of the seats play the explorer: that many fewer rows are kept."""
    from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
    from lightmarl.policies import MLPActorCritic
    from lightmarl.training.average_network import distill_mixture

    env = PettingZooEnvConfig(env_fn="lightmarl.envs.openspiel.openspiel_env", env_kwargs={"game": "kuhn_poker"})
    env.num_envs = 32
    group = env.spec().groups["player"]
    torch.manual_seed(0)
    members = [MLPActorCritic(group, hidden_sizes=[8]).eval() for _ in range(2)]
    rows = {}
    for explore in (0.0, 0.5):
        config = AverageNetworkConfig(player="main", frames=4096, epochs=1, explore=explore)
        student = MLPActorCritic(group, hidden_sizes=[8])
        rows[explore] = distill_mixture(student, members, [0.5, 0.5], env, [["player_0"], ["player_1"]], config, 16)[
            "rows"
        ]
    assert 0.65 < rows[0.5] / rows[0.0] < 0.85, rows
