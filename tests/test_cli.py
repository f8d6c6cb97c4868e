"""Every recipe through the real CLI on a tiny budget, and bad recipes failing early and clearly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import yaml

from cli_runner import run_console_script, run_in_process
from expectations import minibatches_within
from lightmarl.algorithms import IndependentMARLTrainer
from lightmarl.cli import main
from lightmarl.inference import load_population
from lightmarl.trust import recipe_class_paths

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").rglob("*.yaml"))
TINY = [
    "--model.env.num_envs=4",
    "--model.rollout_steps=10",
    "--model.max_frames=120",  # 3 iterations: the 25-step episodes end once
    "--model.iterations_per_epoch=2",
    # The last epoch is partial and not validated: its checkpoint must still be written.
    "--trainer.check_val_every_n_epoch=2",
    "--evaluation.validation.episodes=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]
TINY_ENV_STEPS = 4 * 10  # one tiny rollout: the most a minibatch may hold


def tiny(recipe_name: str) -> list[str]:
    """TINY for one recipe of recipes/, its on-policy minibatches shrunk to fit the tiny rollout."""
    return [*TINY, *minibatches_within(ROOT / "recipes" / f"{recipe_name}.yaml", TINY_ENV_STEPS)]


# Recipes whose episodes outlast the tiny run's 30 env steps would finish none: shorten them there.
TINY_EPISODES = {
    "knights_archers_zombies.yaml": ["--model.env.env_kwargs.max_cycles=20"],
    # and 4 pistons instead of 20: the full env steps about 40 times a second here.
    "pistonball.yaml": [
        '--model.env.env_kwargs={"n_pistons": 4, "continuous": false, "max_cycles": 20, "render_mode": "rgb_array"}'
    ],
    "pursuit.yaml": ["--model.env.env_kwargs.max_cycles=20"],
    "multiwalker.yaml": ["--model.env.env_kwargs.max_cycles=20"],
    "vmas_balance.yaml": ["--model.env.max_steps=10"],
    "mettagrid_mines.yaml": ["--model.env.env_kwargs.max_steps=20"],
    "vmas_navigation.yaml": ["--model.env.max_steps=10"],
    "vmas_transport.yaml": ["--model.env.max_steps=10"],
    "vmas_transport_kickstart.yaml": ["--model.env.max_steps=10"],
    # recipes/benchmarl/: BenchMARL's algorithms with its settings on VMAS balance; the off-policy ones
    # learn from the tiny run's first batch (BenchMARL's batch of 128 env steps would not fill).
    "mappo.yaml": ["--model.env.max_steps=10"],
    "ippo.yaml": ["--model.env.max_steps=10"],
    **{
        f"{a}.yaml": [
            "--model.env.max_steps=10",
            "--model.algorithm.init_args.batch_size=8",
            "--model.algorithm.init_args.learning_starts=8",
            "--model.algorithm.init_args.buffer_size=1000",
            "--model.algorithm.init_args.updates_per_iteration=2",
        ]
        for a in ("maddpg", "iddpg", "masac", "isac", "qmix", "vdn", "iql")
    },
    # The GPU-sized recipe simulates on the GPU: here on the CPU (the `gpu` case still trains on the GPU).
    "vmas_navigation_gpu.yaml": ["--model.env.max_steps=10", "--model.env.device=cpu", "--trainer.accelerator=cpu"],
    "mappo_simple_spread_continuous.yaml": ["--model.env.env_kwargs.max_cycles=20"],
    # Connect four has no turn limit. Each league player has one of the 4 copies; with seed 0 the
    # main exploiter's copy plays a game of sampled untrained moves longer than 30 turns, with
    # seed 1 every player's copy ends a game (seeded: the same games every run).
    "league_connect_four.yaml": ["--seed_everything=1"],
}
# Recipes whose tiny run ends a game for every binding only through the seed above: the seed fixes
# the CPU's random stream, and a GPU samples from its own.
SEEDED_GAME_LENGTHS = {"league_connect_four.yaml"}
# Recipes of optional env families: skipped where the package is not installed.
NEEDS = {
    "vmas_balance.yaml": "vmas",
    "vmas_navigation.yaml": "vmas",
    "vmas_navigation_gpu.yaml": "vmas",
    "vmas_transport.yaml": "vmas",
    "vmas_transport_kickstart.yaml": "vmas",
    **{f"{a}.yaml": "vmas" for a in ("mappo", "ippo", "maddpg", "iddpg", "masac", "isac", "qmix", "vdn", "iql")},
    "mettagrid_mines.yaml": "mettagrid",
    **{
        f"league_{game}.yaml": "pyspiel"
        for game in (
            "rps",
            "rps_selfplay",
            "kuhn_poker",
            "kuhn_poker_selfplay",
            "leduc_poker",
            "leduc_poker_selfplay",
            "leduc_poker_roles",
            "leduc_poker_pfsp",
            "liars_dice",
            "liars_dice_selfplay",
            "goofspiel",
            "goofspiel_selfplay",
        )
    },
}


def trainable_bindings(recipe: Path) -> list[str]:
    bindings = yaml.safe_load(recipe.read_text())["model"].get("policy_bindings") or [{"id": "main"}]
    return [b["id"] for b in bindings if b.get("trainable", True)]


def test_every_recipe_is_documented_and_every_documented_recipe_exists():
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])
    named = set(re.findall(r"recipes/[\w/]+\.yaml", docs))
    # A README row may name a recipe's siblings by file name: `recipes/two_trainers/ppo_run.yaml` + `dqn_run.yaml`.
    undocumented = [
        str(p.relative_to(ROOT)) for p in RECIPES if str(p.relative_to(ROOT)) not in named and f"`{p.name}`" not in docs
    ]
    assert len(RECIPES) >= 20 and not undocumented, f"recipes no doc names: {undocumented}"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"docs name recipes that do not exist: {missing}"


ON_GPU = pytest.param(
    ["--trainer.accelerator=gpu", "--trainer.devices=1"],
    marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")],
    id="gpu",
)


@pytest.mark.parametrize("device", [pytest.param([], id="cpu"), ON_GPU])
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(ROOT / "recipes")))
def test_recipe_fits_and_validates_through_the_cli(recipe, device, tmp_path, monkeypatch):
    """Each recipe: fit, checkpoint, logs, validate, evaluate and reload; `gpu`: the trainer on one GPU."""
    if recipe.name in NEEDS:
        pytest.importorskip(NEEDS[recipe.name])
    monkeypatch.chdir(tmp_path)  # recipes write under ./runs and read ./assets, like a checkout
    (tmp_path / "assets").symlink_to(ROOT / "assets")
    tiny = [*TINY, *TINY_EPISODES.get(recipe.name, []), *minibatches_within(recipe, TINY_ENV_STEPS), *device]
    main(["fit", "--config", str(recipe), *tiny])
    checkpoints = list(tmp_path.rglob("last.ckpt"))
    assert len(checkpoints) == 1, "the recipe must keep a last checkpoint"
    checkpoint = torch.load(checkpoints[0], map_location="cpu", weights_only=False)
    assert (
        checkpoint["lightmarl"]["population"]["counters"]["frames"] == 120
        and checkpoint["lightmarl"]["population"]["counters"]["iterations"] == 3
    )
    assert list(tmp_path.rglob("config.yaml")), "the resolved config is saved"
    metrics = list(tmp_path.rglob("metrics.csv"))
    header = metrics[0].read_text().splitlines()[0].split(",")
    assert "time/fps" in header
    for binding in trainable_bindings(recipe):
        # Each algorithm logs its own loss terms (PPO: loss_objective, ...; DQN: TorchRL's loss).
        assert any(h.startswith(f"train/{binding}/loss") for h in header), (binding, header)
        if not (device and recipe.name in SEEDED_GAME_LENGTHS):
            assert f"collect/{binding}/episode_return" in header
    assert list(tmp_path.rglob("events.out.tfevents.*")), "TensorBoard events are written"
    main(["validate", "--config", str(recipe), "--ckpt_path", "last", *tiny])
    if set(yaml.safe_load(recipe.read_text()).get("evaluation", {})) - {"validation"}:
        # The recipe's evaluation scenarios, two episodes per mix, on the last checkpoint.
        main(["evaluate", "--config", str(recipe), *tiny, "--evaluation.episodes=2"])
        assert list(tmp_path.rglob("evaluation/report.json")), "lightmarl evaluate writes the report"
    # The checkpoint alone rebuilds the population for inference, shared modules still shared; classes
    # outside lightmarl (an example package's) load because the recipe names them (files are data).
    model = yaml.safe_load(recipe.read_text())["model"]
    allowed = recipe_class_paths(model.get("policy_bindings", []), model.get("shared_modules", {}))
    policies = load_population(checkpoints[0], allow=sorted(allowed)).bindings
    for name, spec in checkpoint["lightmarl"]["population"]["shared_modules"].items():
        # A league's opponent slots are no bindings of the saved population (its snapshots are).
        users = [getattr(policies[b], argument) for b, argument in spec["shared_between"].items() if b in policies]
        assert all(u is users[0] for u in users), name


def test_print_config_shows_overrides(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                str(ROOT / "recipes/quickstart.yaml"),
                "--model.algorithm.init_args.lr=0.5",
                "--print_config",
            ]
        )
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["algorithm"]["init_args"]["lr"] == 0.5
    assert printed["seed_everything"] == 0


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("--model.bogus=1", "bogus"),
        ("--model.max_frames=lots", "model.max_frames"),
        ("--model.env.env_fn=nosuchpackage.parallel_env", "env.env_fn: cannot import 'nosuchpackage.parallel_env'"),
        ("--model.agent_binding_map=[main,ghost,main]", "unknown binding 'ghost'"),
        ("--model.algorithm.init_args.lr=-1", "algorithm.lr: invalid value -1.0"),
        # A policy without what the algorithm reads: named with the binding, the algorithm and the policy class.
        (
            "--model.policy_bindings=[{id: main, class_path: lightmarl.policies.QNetworkPolicy}]",
            "binding 'main': algorithm PPO needs a stochastic `actor`",
        ),
        (
            "--model.policy_bindings=[{id: main, class_path: lightmarl.policies.QNetworkPolicy}]",
            "QNetworkPolicy lacks them (use lightmarl.policies.MLPActorCritic",
        ),
        # Loss profiles name the trainers' losses exactly (today's names: ppo, dqn, ...).
        (
            "--model.loss_profiles={default: [PPO]}",
            "loss_profiles.default: 'PPO' is not a loss of this run; valid names are ['ppo']",
        ),
        ("--model.loss_profiles={default: [ppo, nosuchloss]}", "loss_profiles.default: 'nosuchloss' is not a loss"),
        ("--model.loss_profiles={default: []}", "loss_profiles.default: [] names none of trainable binding 'main'"),
    ],
)
def test_bad_recipes_fail_before_training_with_the_field_named(override, expected, tmp_path):
    result = run_in_process("fit", "--config", str(ROOT / "recipes/quickstart.yaml"), override, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert expected in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "runs" / "quickstart" / "checkpoints").exists(), "nothing may train"


def test_console_script_trains_and_validates(tmp_path):
    """The installed ``lightmarl`` executable trains (its run stores no ``__main__`` class paths); the
    run then validates through the same entry point in this process."""
    fit = run_console_script(
        "fit", "--config", str(ROOT / "recipes/quickstart.yaml"), *tiny("quickstart"), cwd=tmp_path
    )
    assert fit.returncode == 0, fit.stderr[-3000:]
    validate = run_in_process(
        "validate",
        "--config",
        str(ROOT / "recipes/quickstart.yaml"),
        "--ckpt_path",
        "last",
        *tiny("quickstart"),
        cwd=tmp_path,
    )
    assert validate.returncode == 0, validate.stderr[-3000:]
    assert "eval/main/episode_return" in validate.stdout
    config = yaml.safe_load(next(tmp_path.rglob("config.yaml")).read_text())
    assert "class_path: __main__" not in next(tmp_path.rglob("config.yaml")).read_text()
    assert config["model"]["policy_bindings"][0]["id"] == "main"


def test_validate_a_scripted_population_without_a_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(
        [
            "validate",
            "--config",
            str(ROOT / "recipes/quickstart.yaml"),
            "--model.policy_bindings=[{id: random, class_path: lightmarl.policies.UniformRandomPolicy}]",
            *TINY,
        ]
    )
    assert "eval/random/episode_return" in capsys.readouterr().out


def test_fit_without_a_trainable_binding_is_refused(tmp_path):
    result = run_in_process(
        "fit",
        "--config",
        str(ROOT / "recipes/quickstart.yaml"),
        "--model.policy_bindings=[{id: random, class_path: lightmarl.policies.UniformRandomPolicy, trainable: false}]",
        *TINY,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "trainable: true" in result.stderr


def test_frozen_npc_from_a_checkpoint_plays_and_never_changes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "assets").symlink_to(ROOT / "assets")
    main(["fit", "--config", str(ROOT / "recipes/npc_frozen.yaml"), *tiny("npc_frozen")])
    after = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=False)
    source = torch.load(
        ROOT / "assets/checkpoints/simple_spread_mappo_150k.ckpt", map_location="cpu", weights_only=False
    )
    npc = {k.removeprefix("population.policies.npc."): v for k, v in after["state_dict"].items() if ".npc." in k}
    teacher = {k.removeprefix("population.policies.main."): v for k, v in source["state_dict"].items()}
    assert npc and npc.keys() == teacher.keys()
    assert all(torch.equal(npc[k], teacher[k]) for k in npc)
    student_rows = after["lightmarl"]["population"]["bindings"]
    assert student_rows["npc"]["trainable"] is False and student_rows["student"]["trainable"] is True


def test_fit_resumes_from_the_last_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recipe = str(ROOT / "recipes/quickstart.yaml")
    main(["fit", "--config", recipe, *tiny("quickstart")])
    first = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=False)
    main(["fit", "--config", recipe, *tiny("quickstart"), "--model.max_frames=240", "--ckpt_path", "last"])
    resumed = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=False)
    # The frame budget is global: the resumed run only plays the 3 iterations still owed.
    assert (
        first["lightmarl"]["population"]["counters"]["iterations"],
        resumed["lightmarl"]["population"]["counters"]["iterations"],
    ) == (3, 6)
    assert resumed["lightmarl"]["population"]["counters"]["frames"] == 240
    adam_steps = [s["step"] for s in resumed["optimizer_states"][0]["state"].values()]
    assert all(int(step) == 2 * first["global_step"] for step in adam_steps)


@pytest.mark.timeout(120)
def test_resuming_a_finished_run_ends_at_once(tmp_path, monkeypatch, caplog):
    """A run killed after its last iteration was checkpointed: the resume has nothing to train and must
    stop, not spin on empty epochs (max_epochs is -1)."""
    monkeypatch.chdir(tmp_path)
    recipe = str(ROOT / "recipes/quickstart.yaml")
    main(["fit", "--config", recipe, *tiny("quickstart")])
    checkpoint = next(tmp_path.rglob("last.ckpt"))
    before = torch.load(checkpoint, map_location="cpu", weights_only=False)
    with caplog.at_level("INFO"):
        main(["fit", "--config", recipe, *tiny("quickstart"), "--ckpt_path", "last"])
    after = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert (
        after["lightmarl"]["population"]["counters"]["iterations"]
        == before["lightmarl"]["population"]["counters"]["iterations"]
        == 3
    )
    assert "nothing to train" in caplog.text


def test_a_resumed_run_keeps_the_target_networks_it_saved(tmp_path, monkeypatch):
    """Target networks are built from the policy before a resumed run loads its weights: they come from the checkpoint."""
    monkeypatch.chdir(tmp_path)
    recipe = yaml.safe_load((ROOT / "recipes/ppo_vs_dqn.yaml").read_text())
    dqn = recipe["model"]["algorithms"]["dqn_policy"]["init_args"]
    dqn.update(target_update="hard", target_update_interval=2, learning_starts=16, updates_per_iteration=4)
    (tmp_path / "first.yaml").write_text(yaml.safe_dump(recipe))
    dqn["target_update_interval"] = 10_000  # the resumed run never copies: its targets stay as loaded
    (tmp_path / "resumed.yaml").write_text(yaml.safe_dump(recipe))
    same_run = "--run_name=ppo_vs_dqn"  # two recipe files, one run directory
    main(["fit", "--config", "first.yaml", same_run, *tiny("ppo_vs_dqn")])
    first = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=False)
    main(
        [
            "fit",
            "--config",
            "resumed.yaml",
            same_run,
            *tiny("ppo_vs_dqn"),
            "--model.max_frames=240",
            "--ckpt_path",
            "last",
        ]
    )
    resumed = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=False)
    saved, kept = (c["lightmarl"]["trainers"]["dqn_policy"] for c in (first, resumed))
    assert (
        resumed["lightmarl"]["population"]["counters"]["iterations"] == 6
        and kept["grad_steps"] > saved["grad_steps"] > 0
    )
    assert saved["networks"] and saved["networks"].keys() == kept["networks"].keys()
    for key, target in saved["networks"].items():
        assert torch.equal(kept["networks"][key], target), key


class CountingMARLTrainer(IndependentMARLTrainer):
    """A user's MARLTrainer, chosen by class_path: independent learning that counts its updates."""

    built: ClassVar[list[CountingMARLTrainer]] = []

    def __init__(self, table, policies, algorithms, shared=None, label: str = "unnamed") -> None:
        super().__init__(table, policies, algorithms, shared)
        self.label = label
        self.updates = 0
        CountingMARLTrainer.built.append(self)

    def update(self, experience, optimizers, stepper, iteration=0, fraction_done=0.0):
        self.updates += 1
        return super().update(experience, optimizers, stepper, iteration, fraction_done)


def test_the_marl_trainer_is_chosen_by_class_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    recipe = str(ROOT / "recipes/quickstart.yaml")
    with pytest.raises(SystemExit):
        main(["fit", "--config", recipe, "--print_config"])
    assert yaml.safe_load(capsys.readouterr().out)["model"]["marl_trainer"] == {
        "class_path": "lightmarl.algorithms.IndependentMARLTrainer"
    }
    CountingMARLTrainer.built.clear()
    choice = [
        "--model.marl_trainer.class_path=test_cli.CountingMARLTrainer",
        "--model.marl_trainer.init_args.label=mine",
    ]
    main(["fit", "--config", recipe, *tiny("quickstart"), *choice])
    (trainer,) = CountingMARLTrainer.built
    assert (trainer.label, trainer.updates) == ("mine", 3)
    checkpoint = torch.load(next(tmp_path.rglob("last.ckpt")), map_location="cpu", weights_only=False)
    assert checkpoint["lightmarl"]["trainers"].keys() == {"main"}
