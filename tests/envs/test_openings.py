"""Random openings for turn-based games (lightmarl.envs.pettingzoo.openings)."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, rps_v2

from lightmarl.envs import PettingZooEnvConfig, check_same_trajectories
from lightmarl.envs.pettingzoo.openings import RandomOpening, random_opening_env

CONNECT_FOUR = "pettingzoo.classic.connect_four_v3.env"
OPENING_ENV = "lightmarl.envs.pettingzoo.openings.random_opening_env"


def pieces(env: RandomOpening) -> int:
    return int(np.count_nonzero(env.unwrapped.board))


def test_each_reset_plays_a_random_opening_within_the_bounds_and_nobody_is_rewarded():
    env = random_opening_env(CONNECT_FOUR, max_moves=6, min_moves=2)
    seen = set()
    for seed in range(40):
        env.reset(seed=seed)
        count = pieces(env)
        seen.add(count)
        assert 2 <= count <= 6
        # Turn order follows the moves played: player_0 moves after an even opening.
        assert env.agent_selection == ("player_0" if count % 2 == 0 else "player_1")
        assert set(env.rewards.values()) == {0} and set(env._cumulative_rewards.values()) == {0}
        assert not any(env.terminations.values())
    assert seen == {2, 3, 4, 5, 6}


def test_a_seeded_reset_repeats_its_opening_and_other_seeds_differ():
    env = random_opening_env(CONNECT_FOUR, max_moves=8, min_moves=8)
    boards = {}
    for seed in (0, 1, 0):
        env.reset(seed=seed)
        board = tuple(env.unwrapped.board)
        assert boards.setdefault(seed, board) == board
    assert boards[0] != boards[1]


def test_zero_moves_is_the_plain_game():
    env = random_opening_env(CONNECT_FOUR, max_moves=0)
    env.reset(seed=3)
    assert pieces(env) == 0 and env.agent_selection == "player_0"


def test_an_opening_that_ends_the_game_is_drawn_again():
    # 30 random moves end many connect-four games (four in a row): every reset still gives one in play.
    env = random_opening_env(CONNECT_FOUR, max_moves=30, min_moves=30)
    for seed in range(10):
        env.reset(seed=seed)
        assert pieces(env) == 30 and not any(env.terminations.values())


def test_bad_settings_and_envs_are_refused():
    with pytest.raises(ValueError, match="0 <= min_moves <= max_moves"):
        random_opening_env(CONNECT_FOUR, max_moves=2, min_moves=3)
    with pytest.raises(ValueError, match="not a turn-based"):
        RandomOpening(rps_v2.parallel_env(), max_moves=2)
    with pytest.raises(RuntimeError, match="use a smaller max_moves"):
        RandomOpening(connect_four_v3.env(), max_moves=42, min_moves=42).reset(seed=0)


def test_a_vector_of_opened_games_is_seeded_and_trains_like_the_plain_game():
    config = PettingZooEnvConfig(env_fn=OPENING_ENV, env_kwargs={"env_fn": CONNECT_FOUR, "max_moves": 8}, num_envs=3)
    spec = config.spec()
    assert spec.groups["player"].observation_shape == (6, 7, 2) and spec.groups["player"].has_action_mask
    check_same_trajectories(config.make_vector(seed=0), config.make_vector(seed=0), num_steps=60)
    vec = config.make_vector(seed=0)
    first = vec.reset()["player"]["observation"]
    assert first.sum() > 0  # the games start with pieces on the board
    vec.close()
