"""OpenSpiel games as lightmarl envs (lightmarl.envs.openspiel): the vector contract, seeded chance, returns, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pyspiel = pytest.importorskip("pyspiel")

from lightmarl import keys  # noqa: E402
from lightmarl.envs import PettingZooEnvConfig, check_same_trajectories, check_vec_env  # noqa: E402
from lightmarl.envs.openspiel import openspiel_env  # noqa: E402

ENV_FN = "lightmarl.envs.openspiel.openspiel_env"


def config(game: str, num_envs: int = 4, num_workers: int = 0, **kwargs) -> PettingZooEnvConfig:
    return PettingZooEnvConfig(
        env_fn=ENV_FN, env_kwargs={"game": game, **kwargs}, num_envs=num_envs, num_workers=num_workers
    )


@pytest.mark.parametrize(
    ("game", "kwargs", "turn_based", "shape", "actions"),
    [
        ("kuhn_poker", {}, True, (11,), 2),
        ("leduc_poker", {}, True, (30,), 3),
        ("kuhn_poker", {"tensor": "observation"}, True, (7,), 2),
        ("tic_tac_toe", {"tensor": "observation"}, True, (27,), 9),
        ("matrix_rps", {}, False, (1,), 3),
        ("goofspiel", {"parameters": {"num_cards": 4}}, False, (46,), 4),
    ],
)
def test_openspiel_games_keep_the_vector_contract(game, kwargs, turn_based, shape, actions):
    cfg = config(game, **kwargs)
    spec = cfg.spec()
    group = spec.groups["player"]
    assert spec.turn_based == turn_based and spec.possible_agents == ("player_0", "player_1")
    assert group.observation_shape == shape and group.num_actions == actions and group.has_action_mask
    report = check_vec_env(cfg.make_vector(seed=0), num_steps=40)
    assert report.episode_ends > 0 and report.masked_rows > 0
    check_same_trajectories(cfg.make_vector(seed=3), cfg.make_vector(seed=3))


def test_worker_processes_play_the_same_hands_as_the_training_process():
    workers = config("leduc_poker", num_workers=2).make_vector(seed=5)
    try:
        check_vec_env(workers, num_steps=30)
        check_same_trajectories(
            config("leduc_poker", num_workers=2).make_vector(seed=5), config("leduc_poker").make_vector(seed=5)
        )
    finally:
        workers.close()


def deals(seed: int, episodes: int = 6) -> list[str]:
    """The first information state of player 0 in each of ``episodes`` Kuhn hands reset with ``seed + k``."""
    env = openspiel_env("kuhn_poker")
    out = []
    for k in range(episodes):
        env.reset(seed=seed + k)
        out.append(env.state.information_state_string(0))
    return out


def test_chance_nodes_are_drawn_from_the_reset_seed():
    assert deals(0) == deals(0)
    assert deals(0) != deals(100)
    assert len(set(deals(0, episodes=30))) == 3  # each of the three cards is dealt to player 0


def test_every_player_gets_the_terminal_payoff():
    env = openspiel_env("kuhn_poker")
    env.reset(seed=1)
    state = env.state
    cards = [int(state.history()[0]), int(state.history()[1])]
    env.step(1)  # player 0 bets
    env.step(1)  # player 1 calls: showdown for a pot of 2 each
    winner = 0 if cards[0] > cards[1] else 1
    assert env.rewards == {f"player_{winner}": 2.0, f"player_{1 - winner}": -2.0}
    assert all(env.terminations.values())
    env.step(None)
    env.step(None)  # PettingZoo's dead steps empty the game
    assert env.agents == []


def test_rewards_in_vector_rows_sum_to_the_game_returns():
    vec = config("leduc_poker", num_envs=2).make_vector(seed=0)
    vec.reset()
    generator = torch.Generator().manual_seed(0)
    from lightmarl.envs.checks import random_actions

    totals = np.zeros((2, 2))
    finished = []
    for _ in range(60):
        nxt, ended = vec.step(random_actions(vec.spec, vec.current, generator))
        totals += nxt["player"][keys.REWARD].numpy()
        for e in ended.nonzero().flatten().tolist():
            finished.append(totals[e].copy())
            totals[e] = 0
    assert finished and all(abs(t.sum()) < 1e-9 for t in finished) and any(t[0] != 0 for t in finished)


def test_matrix_rps_pays_the_matrix():
    env = openspiel_env("matrix_rps")
    observations, _ = env.reset(seed=0)
    assert set(observations) == {"player_0", "player_1"}
    assert observations["player_0"]["action_mask"].tolist() == [1, 1, 1]
    _, rewards, terminations, _, _ = env.step({"player_0": 1, "player_1": 0})  # paper beats rock
    assert rewards == {"player_0": 1.0, "player_1": -1.0} and all(terminations.values()) and env.agents == []


def test_text_render_and_frames():
    env = openspiel_env("kuhn_poker", render_mode="ansi")
    env.reset(seed=0)
    assert isinstance(env.render(), str) and env.render()
    frame = openspiel_env("kuhn_poker", render_mode="rgb_array")
    frame.reset(seed=0)
    image = frame.render()
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3 and (image < 255).any()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"game": "kuhn_pokr"}, "not an OpenSpiel game"),
        ({"game": "kuhn_poker", "tensor": "board"}, "tensor must be one of"),
        ({"game": "tic_tac_toe"}, "no information_state tensor; use tensor: observation"),
        ({"game": "kuhn_poker", "parameters": {"players": "x"}}, "loading 'kuhn_poker'"),
        ({"game": "kuhn_poker", "parameters": {"players": [2]}}, "parameters must map names"),
    ],
)
def test_bad_games_fail_with_the_field_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        config(**kwargs).spec()


def test_an_illegal_action_is_refused():
    env = openspiel_env("leduc_poker")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not legal"):
        env.step(0)  # fold, with nothing to call: Leduc's first player may only check or raise
