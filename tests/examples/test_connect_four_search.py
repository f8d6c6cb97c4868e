"""The alpha-beta connect-four opponent: tactics by depth, strength against the heuristic and random, seeded openings."""

from __future__ import annotations

import pytest
import torch
from connect_four_positions import board, play_moves, random_game_positions

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import UniformRandomPolicy
from lightmarl_examples.connect_four import ConnectFourHeuristicPolicy, ConnectFourSearchPolicy, rules

GROUP = PettingZooEnvConfig(env_fn="pettingzoo.classic.connect_four_v3.env", num_envs=1).spec().groups["player"]


def moves_of(policy, position: torch.Tensor, tries: int = 8) -> set[int]:
    """Every column ``policy`` picks on ``position`` over ``tries`` calls (its ties are drawn at random)."""
    return {int(policy.act(position.unsqueeze(0))[0]) for _ in range(tries)}


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_it_takes_an_immediate_win_rather_than_a_block(depth):
    # x (to move) wins in column 3 along the bottom row; o threatens column 6.
    position = board("......o", "......o", "xxx...o")
    assert moves_of(ConnectFourSearchPolicy(GROUP, depth=depth, opening_moves=0, seed=0), position) == {3}


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_it_blocks_an_immediate_loss(depth):
    # o has three up column 0; x has nothing to win with.
    position = board("o......", "o......", "o...xx.")
    assert moves_of(ConnectFourSearchPolicy(GROUP, depth=depth, opening_moves=0, seed=0), position) == {0}


@pytest.mark.parametrize("depth", [3, 4])
def test_it_does_not_lift_the_opponent_onto_a_winning_cell(depth):
    # o wins on (4, 3), one row above column 3's landing row: a drop there hands o the game.
    position = board("ooo...x", "oxx...x")
    policy = ConnectFourSearchPolicy(GROUP, depth=depth, opening_moves=0, seed=0)
    assert 3 not in moves_of(policy, position, tries=16)
    assert 3 not in policy.best_moves(*bits(position))


def bits(position: torch.Tensor) -> tuple[int, int]:
    """The mover's and the opponent's pieces of a ``[6, 7, 2]`` board as bit masks (cell ``row * 7 + column``)."""
    flat = position.reshape(42, 2)
    return tuple(sum(1 << i for i in range(42) if flat[i, side]) for side in (0, 1))  # type: ignore[return-value]


def test_wins_and_blocks_on_random_positions_agree_with_the_rules():
    # Wherever the mover can complete four it does (any depth); wherever only the opponent could, and
    # blocking does not hand it another win, depth 2 blocks.
    shallow = ConnectFourSearchPolicy(GROUP, depth=1, opening_moves=0, seed=0)
    deep = ConnectFourSearchPolicy(GROUP, depth=2, opening_moves=0, seed=0)
    wins = blocks = 0
    for _, position in random_game_positions(40, seed=3):
        own, theirs = position[..., 0], position[..., 1]
        empty = (own + theirs) == 0
        winning = rules.winning_drops(own, empty)
        threats = rules.winning_drops(theirs, empty)
        if winning.any():
            wins += 1
            assert winning[int(shallow.act(position.unsqueeze(0))[0])]
        elif threats.sum() == 1:
            column = int(threats.nonzero())
            row = int(rules.landing_rows(empty)[column])
            after = empty.clone()
            after[row, column] = False
            if rules.winning_drops(theirs, after).any():
                continue  # the block lifts the opponent onto another win: every move loses
            blocks += 1
            assert int(deep.act(position.unsqueeze(0))[0]) == column
    assert wins > 10 and blocks > 10


def play(first, second, seed: int) -> tuple[float, list[int]]:
    """One ``connect_four_v3`` game: ``first``'s return (+1 / 0 / -1) and the columns played."""
    env = play_moves([], seed=seed)
    policies = {"player_0": first, "player_1": second}
    moves: list[int] = []
    while not (any(env.terminations.values()) or any(env.truncations.values())):
        agent = env.agent_selection
        seen = env.observe(agent)
        observation = torch.as_tensor(seen["observation"], dtype=torch.float32).unsqueeze(0)
        mask = torch.as_tensor(seen["action_mask"], dtype=torch.bool).unsqueeze(0)
        moves.append(int(policies[agent].act(observation, mask)[0]))
        env.step(moves[-1])
    return float(env.rewards["player_0"]), moves


def score(player, opponent, games: int) -> float:
    """``player``'s mean score (win 1, draw ½, loss 0) over ``games`` games, half of them moving first."""
    total = 0.0
    for game in range(games):
        if game % 2 == 0:
            total += (play(player, opponent, game)[0] + 1) / 2
        else:
            total += (1 - play(opponent, player, game)[0]) / 2
    return total / games


@pytest.mark.parametrize("opponent", ["heuristic", "random"])
def test_depth_two_beats_the_heuristic_and_random_clearly(opponent):
    other = {
        "heuristic": ConnectFourHeuristicPolicy(GROUP, seed=1),
        "random": UniformRandomPolicy(GROUP, seed=1),
    }[opponent]
    assert score(ConnectFourSearchPolicy(GROUP, depth=2, seed=0), other, games=24) >= 0.8


def test_openings_vary_with_the_seed_and_repeat_with_it():
    # Against one fixed opponent (no random openings, ties drawn from a fixed seed), the first moves
    # of the searcher's games are its random openings: the same per seed, different across seeds.
    def opening(seed: int) -> list[int]:
        opponent = ConnectFourSearchPolicy(GROUP, depth=1, opening_moves=0, seed=7)
        searcher = ConnectFourSearchPolicy(GROUP, depth=2, opening_moves=3, seed=seed)
        return play(searcher, opponent, seed=0)[1][:6:2]

    assert opening(0) == opening(0)
    assert len({tuple(opening(seed)) for seed in range(6)}) >= 4


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="depth: expected at least 1"):
        ConnectFourSearchPolicy(GROUP, depth=0)
    with pytest.raises(ValueError, match="opening_moves: expected 0 or more"):
        ConnectFourSearchPolicy(GROUP, opening_moves=-1)
    with pytest.raises(TypeError, match="depth: expected an integer"):
        ConnectFourSearchPolicy(GROUP, depth=2.5)
