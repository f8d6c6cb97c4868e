"""lightmarl.envs.mettagrid: the mines task's reward, seeding, spec and errors; the recipe through the CLI.

The env contract (in process, worker processes, seeds) runs in tests/envs/test_contract.py.
Tests that build an env skip where mettagrid is not installed; the errors raised before any
import of it are checked everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightmarl.cli import main
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs import mettagrid as mg

ROOT = Path(__file__).resolve().parents[2]
needs_mettagrid = pytest.mark.skipif(not mg.HAS_METTAGRID, reason="needs mettagrid: pip install 'lightmarl[mettagrid]'")
MOVES = {(0, -1): 1, (0, 1): 2, (-1, 0): 3, (1, 0): 4}  # (dx, dy) -> move_north, south, west, east


def test_a_missing_mettagrid_is_named_with_the_install_command(monkeypatch):
    monkeypatch.setattr(mg, "HAS_METTAGRID", False)
    with pytest.raises(ImportError, match=r"pip install 'lightmarl\[mettagrid\]'"):
        mg.mines_env()
    # ...and a recipe naming it stops before training, with that line.
    config = PettingZooEnvConfig("lightmarl.envs.mettagrid.mines_env")
    with pytest.raises(ValueError, match=r"mines_env\(\*\*\{\}\) raised ImportError: MettaGrid tasks need"):
        config.spec()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"view": 6}, "view must be odd and at most 15"),
        ({"view": 17}, "view must be odd and at most 15"),
        ({"num_mines": 0}, "num_mines must be an integer >= 1, got 0"),
        ({"size": 5, "num_mines": 6}, r"4 agents \+ 6 mines \+ 4 walls do not fit the 9 free cells of a 5x5 map"),
        ({"max_steps": True}, "max_steps must be an integer >= 1, got True"),
    ],
)
def test_bad_task_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mg.mines_config(**kwargs)


@needs_mettagrid
def test_moving_into_a_mine_pays_one_per_ore_until_it_is_empty():
    env = mg.mines_env(num_agents=1, size=4, num_mines=1, ore_per_mine=3, num_walls=0, max_steps=20)
    for seed in range(20):  # a seed whose mine is beside the agent, not diagonal
        env.reset(seed=seed)
        where = {o["type_name"]: o["location"] for o in env._sim.grid_objects(ignore_types=["wall"]).values()}
        step = (where["mine"][0] - where["agent"][0], where["mine"][1] - where["agent"][1])
        if step in MOVES:
            break
    rewards = [env.step({0: MOVES[step]})[1][0] for _ in range(5)]
    assert rewards == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert [env.step({0: 0})[1][0] for _ in range(2)] == [0.0, 0.0]  # noop


@needs_mettagrid
def test_the_map_follows_the_reset_seed():
    env = mg.mines_env()
    first = env.reset(seed=7)[0][0].copy()
    assert (env.reset(seed=7)[0][0] == first).all()
    assert not (env.reset(seed=8)[0][0] == first).all()
    after = env.reset()[0][0]  # no seed: the next one
    assert (after == mg.mines_env().reset(seed=9)[0][0]).all()


@needs_mettagrid
def test_int_agent_ids_become_one_group_of_token_observations():
    spec = PettingZooEnvConfig("lightmarl.envs.mettagrid.mines_env", {"num_agents": 3, "num_tokens": 40}).spec()
    (group,) = spec.groups.values()
    assert group.name == "agent" and list(group.agents) == ["agent_0", "agent_1", "agent_2"]
    assert group.observation_shape == (40, 3) and group.observation_dtype == "uint8"
    assert group.action_kind == "discrete" and group.num_actions == 5


@needs_mettagrid
@pytest.mark.timeout(120)
def test_the_recipe_trains_briefly_and_validates_through_the_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny = [
        "--model.env.num_envs=2",
        "--model.env.env_kwargs.max_steps=10",
        "--model.rollout_steps=5",
        "--model.algorithm.init_args.minibatch_size=10",
        "--model.max_frames=20",
        "--evaluation.validation.episodes=2",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.logger=false",
    ]
    recipe = str(ROOT / "recipes/mettagrid_mines.yaml")
    main(["fit", "--config", recipe, *tiny])
    (checkpoint,) = tmp_path.rglob("last.ckpt")
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["lightmarl"]["population"]["counters"]["frames"] == 20
    assert any(".encoder.feature_embedding." in k for k in state["state_dict"]), "the policy has no TokenEncoder"
    main(["validate", "--config", recipe, *tiny, "--ckpt_path", str(checkpoint)])
