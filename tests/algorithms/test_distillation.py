from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from lightmarl.algorithms import PPO, Distillation, IndependentMARLTrainer, KickstarterLoss, PlainStepper
from lightmarl.cli import main
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.errors import ConfigError
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, NoOpPolicy, ScriptedPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl_examples.simple_spread import SpreadToLandmarkPolicy

ROOT = Path(__file__).resolve().parents[2]


def population(spread_config, agent_map, profiles=None, teacher_profile="default", student_profile="default"):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [
            PolicyBinding("teacher", class_path="x.y", trainable=False, loss_profile=teacher_profile),
            PolicyBinding("student", class_path="x.y", loss_profile=student_profile),
        ],
        spec,
        agent_map,
        profiles,
    )
    return table, {"teacher": SpreadToLandmarkPolicy(group), "student": MLPActorCritic(group, hidden_sizes=[32])}


def mean_kl(policies, experience, table):
    """KL(teacher || student) over the student's valid rows of ``experience``."""
    loss = KickstarterLoss(policies["student"], policies["teacher"])
    data = experience.copy()
    rows = data.get("agent")
    rows.set("distill_mask", rows.get("binding_id") == table.index["student"])
    with torch.no_grad():
        return float(loss(data.reshape(-1))["kl_teacher_student"])


def test_kickstarting_pulls_the_student_towards_the_teacher(spread_config):
    table, policies = population(spread_config, ["teacher", "teacher", "student"])
    experience = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 10).collect()
    start = copy.deepcopy(policies["student"].state_dict())
    before = mean_kl(policies, experience, table)
    after = {}
    for coeff in (0.0, 1.0):
        policies["student"].load_state_dict(start)
        torch.manual_seed(0)
        algorithm = PPO(minibatch_size=10, epochs=2, distillation=Distillation("teacher", coeff=coeff))
        trainer = IndependentMARLTrainer(table, policies, {"student": algorithm})
        optimizers = trainer.make_optimizers()
        for _ in range(5):
            metrics = trainer.update(experience, optimizers, PlainStepper())["student"]
        assert metrics["distill_coeff"] == coeff and metrics["distill_rows"] == 4 * 10
        after[coeff] = mean_kl(policies, experience, table)
    assert after[1.0] < 0.5 * before, (before, after)
    assert after[1.0] < 0.5 * after[0.0], (before, after)


def test_coefficient_schedule():
    annealed = Distillation("t", coeff=1.0, final_coeff=0.2, anneal_iterations=4)
    assert [annealed.coefficient(u) for u in range(7)] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.2, 0.2])
    over_budget = Distillation("t", coeff=2.0, final_coeff=0.0)
    assert [over_budget.coefficient(99, f) for f in (0.0, 0.25, 1.0, 1.5)] == pytest.approx([2.0, 1.5, 0.0, 0.0])
    assert Distillation("t", coeff=0.3).coefficient(1000, 1.0) == 0.3  # no final_coeff: constant


def test_the_unit_trainer_follows_the_schedule(spread_config):
    table, policies = population(spread_config, ["teacher", "student", "student"])
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5)
    distillation = Distillation("teacher", coeff=1.0, final_coeff=0.0, anneal_iterations=2)
    trainer = IndependentMARLTrainer(table, policies, {"student": PPO(minibatch_size=20, distillation=distillation)})
    unit = trainer.unit_trainers["student"]
    assert unit.loss_names == ("ppo", "distill")
    optimizers = trainer.make_optimizers()
    coeffs = [
        trainer.update(collector.collect(), optimizers, PlainStepper())["student"]["distill_coeff"] for _ in range(3)
    ]
    assert coeffs == pytest.approx([1.0, 0.5, 0.0])
    assert unit.state_dict() == {"updates": 3}


def clone_gradient(table, policies, experience):
    """The student's gradient from one clone-only update (its profile excludes ppo)."""
    distillation = Distillation("teacher", mode="clone")
    trainer = IndependentMARLTrainer(
        table, policies, {"student": PPO(minibatch_size=1000, epochs=1, distillation=distillation)}
    )
    grads = []

    class Capture(PlainStepper):
        def step(self, optimizer, parameters, max_grad_norm):
            grads.append(torch.cat([p.grad.flatten() for p in parameters if p.grad is not None]).clone())
            optimizer.zero_grad()  # measure only
            return 0.0  # the gradient norm: finite, so no fault is reported

    metrics = trainer.update(experience, trainer.make_optimizers(), Capture())["student"]
    assert "loss_objective" not in metrics and metrics["rows"] == 0  # no ppo rows
    return grads[0], metrics


def test_sliced_clone_reads_only_the_teacher_rows_its_profile_allows(spread_config):
    profiles = {"student": [], "teacher_rows": ["clone"]}
    table, policies = population(
        spread_config,
        ["teacher", "student", "teacher"],
        profiles,
        teacher_profile="teacher_rows",
        student_profile="student",
    )
    experience = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5).collect()
    experience["agent", "valid"][0, 0, 0] = False  # one teacher row where the agent was absent
    before, metrics = clone_gradient(table, policies, experience)
    assert metrics["clone_rows"] == 4 * 5 * 2 - 1
    assert 0 < metrics["clone_accuracy"] <= 1 and metrics["loss_clone"] > 0

    # Anything on the student's own rows (agent 1), or on the invalid teacher row, leaves the gradient alone.
    other = experience.clone()
    other["agent", "observation"][..., 1, :] += 5.0
    other["agent", "action"][..., 1] = (other["agent", "action"][..., 1] + 1) % 5
    other["agent", "action"][0, 0, 0] = (other["agent", "action"][0, 0, 0] + 1) % 5
    other["next", "agent", "reward"] += 100.0
    assert torch.allclose(clone_gradient(table, policies, other)[0], before, atol=1e-6)
    # The teacher's actions are what the student clones.
    changed = experience.clone()
    changed["agent", "action"][..., 2] = (changed["agent", "action"][..., 2] + 1) % 5
    assert not torch.allclose(clone_gradient(table, policies, changed)[0], before, atol=1e-6)


class FixedForcePolicy(ScriptedPolicy):
    """A deterministic continuous script: the same action every step, ``fractions`` of the way up each action range."""

    def __init__(self, group, fractions):
        super().__init__(group)
        low, high = torch.tensor(group.action_low), torch.tensor(group.action_high)
        self.action = low + (high - low) * torch.tensor(fractions)

    def act(self, observation, action_mask=None, agent_id=None):
        self.calls = getattr(self, "calls", 0) + 1
        batch = observation.shape[: observation.ndim - len(self.group.observation_shape)]
        return self.action.expand(*batch, -1).clone()


@pytest.mark.parametrize("mode", ["kl", "clone"])
def test_continuous_students_learn_a_deterministic_teachers_actions(mode):
    config = PettingZooEnvConfig(  # continuous simple_spread: forces in [0, 1]^5
        env_fn="mpe2.simple_spread_v3.parallel_env",
        env_kwargs={"N": 3, "max_cycles": 5, "continuous_actions": True},
        num_envs=4,
    )
    spec = config.spec()
    group = spec.groups["agent"]
    # kl: the teacher plays no agent (PPO reserves it in the student's group, as the LightningModule
    # asks every algorithm to before building policies); clone: it plays agent 0 and its rows teach.
    agent_map = ["student"] * 3 if mode == "kl" else ["teacher", "student", "student"]
    table = BindingTable(
        [
            PolicyBinding("teacher", class_path="x.y", trainable=False, loss_profile="teacher"),
            PolicyBinding("student", class_path="x.y", loss_profile="student"),
        ],
        spec,
        agent_map,
        {"student": ["ppo", "distill"], "teacher": ["clone"]},
    )
    PPO(distillation=Distillation("teacher", mode=mode)).reserve_bindings("student", table)
    assert table.group_of_binding.get("teacher") == "agent"
    teacher = FixedForcePolicy(group, [0.9, 0.1, 0.1, 0.9, 0.5])
    policies = {"teacher": teacher, "student": MLPActorCritic(group, hidden_sizes=[32])}
    experience = RolloutCollector(config.make_vector(0), MultiAgentPolicy(policies, table), 10).collect()
    start = copy.deepcopy(policies["student"].state_dict())
    rows_name, loss_name = ("distill_rows", "loss_distill") if mode == "kl" else ("clone_rows", "loss_clone")
    errors = {}
    for coeff in (0.0, 1.0):
        policies["student"].load_state_dict(start)
        torch.manual_seed(0)
        algorithm = PPO(
            lr=0.003, minibatch_size=40, epochs=2, distillation=Distillation("teacher", mode=mode, coeff=coeff)
        )
        trainer = IndependentMARLTrainer(table, policies, {"student": algorithm})
        optimizers = trainer.make_optimizers()
        history = [trainer.update(experience, optimizers, PlainStepper())["student"] for _ in range(20)]
        assert history[0][rows_name] == 4 * 10 * (3 if mode == "kl" else 1)
        assert "kl_teacher_student" not in history[0]  # a script has no distribution to compare with
        errors[coeff] = (history[0]["teacher_action_error"], history[-1]["teacher_action_error"])
    assert errors[1.0][1] < 0.5 * errors[1.0][0], errors
    assert errors[1.0][1] < 0.5 * errors[0.0][1], errors
    if mode == "kl":
        # Asked once per update for the whole batch (20 updates of the coeff-1 run), not once per
        # minibatch of every pass (3 minibatches x 2 passes); its answers are what the loss reads.
        teacher.calls = 0
        trainer.update(experience, optimizers, PlainStepper())
        assert teacher.calls == 1
        loss = trainer.unit_trainers["student"].auxiliary[0].module
        rows = experience.reshape(-1)[:40].clone()
        rows.set(loss.tensor_keys.mask, torch.ones(40, 3, dtype=torch.bool))
        asked_each_time = loss(rows)["loss_distill"]
        rows.set(loss.tensor_keys.teacher_target, loss.teacher_targets(rows))
        assert rows["agent", "teacher_target"].shape == (40, 3, 5)
        assert torch.allclose(loss(rows)["loss_distill"], asked_each_time)

    # A teacher on the bounds (a script that clamps its forces) is learned as if it acted a thousandth
    # of the range inside them: exactly at a bound the squashed Gaussian's -log likelihood is huge and
    # would drive the student's pre-tanh mean far out, where tanh saturates.
    loss = trainer.unit_trainers["student"].auxiliary[0].module

    def loss_for(action):
        teacher.action = torch.tensor(action)
        data = experience.reshape(-1).clone()
        data.set(loss.tensor_keys.mask, torch.ones(data.shape[0], 3, dtype=torch.bool))
        data["agent"].pop("teacher_target", None)  # ask the teacher now
        if mode == "clone":
            data["agent", "action"][:, 0] = teacher.action
        return loss(data)[loss_name]

    on_bounds = loss_for([1.0, 0.0, 0.0, 1.0, 1.0])
    assert torch.isfinite(on_bounds)
    assert torch.allclose(on_bounds, loss_for([0.999, 0.001, 0.001, 0.999, 0.999]))
    assert not torch.allclose(on_bounds, loss_for([0.99, 0.01, 0.01, 0.99, 0.99]))


def test_teacher_mistakes_fail_at_setup_and_say_what_to_do(spread_config):
    group = spread_config.spec().groups["agent"]
    table, policies = population(spread_config, ["teacher", "student", "student"])

    def build(distillation, table=table, policies=policies):
        return IndependentMARLTrainer(table, policies, {"student": PPO(distillation=distillation)})

    with pytest.raises(ConfigError, match=r"teacher: 'nobody' is not a binding; bindings are \['teacher', 'student'\]"):
        build(Distillation("nobody"))
    with pytest.raises(ConfigError, match="cannot be its own teacher"):
        build(Distillation("student"))
    with pytest.raises(ConfigError, match=r"'teacher' \(NoOpPolicy\) gives no action distribution.*action_logits"):
        build(Distillation("teacher"), policies={**policies, "teacher": NoOpPolicy(group)})
    build(Distillation("teacher", mode="clone"), policies={**policies, "teacher": NoOpPolicy(group)})  # actions suffice
    with pytest.raises(ConfigError, match=r"value_coeff: 0\.5 needs a teacher with a value critic"):
        build(Distillation("teacher", value_coeff=0.5))
    idle_table, _ = population(spread_config, ["student", "student", "student"])
    with pytest.raises(ConfigError, match="'teacher' controls no agent"):
        build(Distillation("teacher"), table=idle_table, policies={"student": policies["student"]})
    gated, _ = population(
        spread_config,
        ["teacher", "student", "student"],
        {"s": ["ppo"], "t": ["ppo"]},
        teacher_profile="t",
        student_profile="s",
    )
    with pytest.raises(ConfigError, match=r"student's loss profile 's' \(\['ppo'\]\) does not include 'distill'"):
        build(Distillation("teacher"), table=gated)
    with pytest.raises(ConfigError, match=r"teacher's loss profile 't' \(\['ppo'\]\) does not include 'clone'"):
        build(Distillation("teacher", mode="clone"), table=gated)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"mode": "dagger"}, "mode"), ({"coeff": -1.0}, "coeff"), ({"anneal_iterations": 0}, "anneal_iterations")],
)
def test_bad_distillation_settings_are_named(kwargs, field):
    with pytest.raises(ValueError, match=f"distillation.{field}"):
        Distillation("teacher", **kwargs)


def test_frozen_neural_teacher_with_value_distillation(spread_config):
    spec = spread_config.spec()
    group = spec.groups["agent"]
    table = BindingTable(
        [PolicyBinding("teacher", class_path="x.y", trainable=False), PolicyBinding("student", class_path="x.y")],
        spec,
        ["teacher", "student", "student"],
    )
    teacher = MLPActorCritic(group, hidden_sizes=[16]).requires_grad_(False)
    policies = {"teacher": teacher, "student": MLPActorCritic(group, hidden_sizes=[16])}
    frozen = copy.deepcopy(teacher.state_dict())
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy(policies, table), 5)
    distillation = Distillation("teacher", coeff=1.0, value_coeff=0.5)
    trainer = IndependentMARLTrainer(table, policies, {"student": PPO(minibatch_size=20, distillation=distillation)})
    optimizers = trainer.make_optimizers()
    first = trainer.update(collector.collect(), optimizers, PlainStepper())["student"]
    assert first["loss_distill_value"] > 0 and first["kl_teacher_student"] > 0
    for key, value in teacher.state_dict().items():
        assert torch.equal(value, frozen[key]), key


def test_an_unknown_teacher_stops_the_cli_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                str(ROOT / "recipes/kickstarter.yaml"),
                "--model.algorithm.init_args.distillation.init_args.teacher=nobody",
                "--model.env.num_envs=2",
                "--model.algorithm.init_args.minibatch_size=50",  # one rollout: 2 copies x 25 steps
                "--trainer.enable_progress_bar=false",
            ]
        )
    assert exit_info.value.code == 2
    assert "distillation.teacher: 'nobody' is not a binding" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.ckpt"))


@pytest.mark.parametrize("mode", ["kl", "clone"])
def test_ppo_reserves_an_idle_kickstarting_teacher_in_its_students_group(spread_config, mode):
    table, _ = population(spread_config, ["student", "student", "student"])
    assert "teacher" not in table.group_of_binding
    PPO(distillation=Distillation("teacher", mode=mode)).reserve_bindings("student", table)
    # A kl teacher reads the student's rows: it needs a policy for them. A clone teacher must play.
    assert table.group_of_binding.get("teacher") == ("agent" if mode == "kl" else None)
    PPO().reserve_bindings("student", table)  # no distillation: nothing to reserve


def test_the_lightning_module_builds_an_idle_kickstarting_teacher_for_its_students_group(spread_config):
    from lightmarl.training import MARLModule

    module = MARLModule(
        env=spread_config,
        policy_bindings=[
            {
                "id": "teacher",
                "class_path": "lightmarl_examples.simple_spread.SpreadToLandmarkPolicy",
                "trainable": False,
            },
            {"id": "student", "class_path": "lightmarl.policies.MLPActorCritic"},
        ],
        agent_binding_map=["student", "student", "student"],
        algorithm=PPO(distillation=Distillation("teacher")),
    )
    assert module.table.group_of_binding["teacher"] == "agent"
    assert isinstance(module.policies["teacher"], SpreadToLandmarkPolicy)
