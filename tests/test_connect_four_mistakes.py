"""The connect-four mistake counter (benchmarks/connect_four_mistakes.py): its board, its classes, its tallies."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from pettingzoo.classic import connect_four_v3

from benchmark_scripts import load_benchmark
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import ScriptedPolicy
from lightmarl_examples.connect_four import ConnectFourHeuristicPolicy

ROOT = Path(__file__).resolve().parents[1]
GROUP = PettingZooEnvConfig(env_fn="pettingzoo.classic.connect_four_v3.env", num_envs=1).spec().groups["player"]


bench = load_benchmark("connect_four_mistakes.py")


def board(*rows: str) -> torch.Tensor:
    """A ``[1, 6, 7]`` board from its bottom rows, written top row first: ``.`` empty, ``x`` piece 1, ``o`` piece 2."""
    cells = [[". xo".index(c) - 1 if c != "." else 0 for c in row] for row in rows]
    full = [[0] * 7] * (6 - len(rows)) + cells
    return torch.tensor(full, dtype=torch.int8).unsqueeze(0)


def kinds_of(boards: torch.Tensor, piece: int, column: int) -> set[str]:
    found = bench.classify(boards, torch.tensor([piece], dtype=torch.int8), torch.tensor([column]))
    return {k for k in (*bench.KINDS, "allowed", "forced") if bool(found[k][0])}


def test_the_board_plays_like_pettingzoo():
    # Random legal games on PettingZoo's env and on the benchmark's board: same observations, same ends.
    rng = random.Random(0)
    for game in range(20):
        env = connect_four_v3.env()
        env.reset(seed=game)
        boards = torch.zeros(1, 6, 7, dtype=torch.int8)
        piece = 1
        while True:
            agent = env.agent_selection
            observed = env.observe(agent)
            mine, mask = bench.observe(boards, torch.tensor([piece], dtype=torch.int8))
            assert np.array_equal(observed["observation"], mine[0].numpy().astype(np.int8))
            assert np.array_equal(observed["action_mask"].astype(bool), mask[0].numpy())
            column = rng.choice([c for c in range(7) if observed["action_mask"][c]])
            env.step(column)
            boards = bench.drop(boards, torch.tensor([column]), piece)
            won = bool(bench.has_four(boards == piece)[0])
            over = all(env.terminations.values()) or all(env.truncations.values())
            assert won == (env.rewards[agent] == 1)
            if over:
                assert won or bool((boards != 0).all())
                break
            assert not won
            piece = 3 - piece


def test_a_missed_win_and_a_taken_one():
    three = board("oo.....", "xxx....")
    assert kinds_of(three, 1, 6) == {"missed_win"}
    assert kinds_of(three, 1, 3) == set()


def test_a_missed_block_and_a_block():
    three = board("oo.....", "xxx....")
    assert kinds_of(three, 2, 6) == {"missed_block", "allowed"}
    assert kinds_of(three, 2, 3) == set()


def test_playing_under_the_opponents_threat():
    # x threatens the cell above the empty bottom cell of column 3: o must not fill that cell.
    lifted = board("xxx....", "oox....")
    assert kinds_of(lifted, 2, 3) == {"played_under", "allowed"}
    assert kinds_of(lifted, 2, 5) == set()


def test_a_double_threat_and_a_forced_loss():
    assert "double_threat" in kinds_of(board(".xxx..."), 2, 0)
    # Two threats stacked in column 3: the only block lifts x onto the second one.
    stacked = board("xxx....", "xxx....")
    found = bench.classify(stacked, torch.tensor([2], dtype=torch.int8), torch.tensor([3]))
    assert bool(found["allowed"][0]) and bool(found["forced"][0])
    assert bench.decisive_kind(found, 0) == "no_legal_escape"


class StackColumn(ScriptedPolicy):
    """Drops every piece in column 3: it neither blocks nor takes wins elsewhere."""

    def act(self, observation, action_mask=None, agent_id=None):
        return torch.full(observation.shape[:-3], 3, dtype=torch.int64)


def test_the_heuristic_never_misses_a_win_or_a_single_block():
    torch.manual_seed(0)
    heuristic = ConnectFourHeuristicPolicy(GROUP, seed=0)
    player, other = bench.play_games(StackColumn(GROUP), heuristic, games=20, player_piece=2)
    assert other.mistakes["missed_win"] == 0 and other.mistakes["missed_block"] == 0
    assert other.chances["missed_block"] > 0  # the stacker's column threatens, and is blocked
    assert sum(player.outcomes.values()) == sum(other.outcomes.values()) == 20
    assert player.outcomes["loss"] == other.outcomes["win"] == sum(player.lost_by.values())


def test_a_player_that_ignores_threats_loses_by_missed_blocks():
    heuristic = ConnectFourHeuristicPolicy(GROUP, seed=1, block=False)
    player, _ = bench.play_games(StackColumn(GROUP), heuristic, games=30, player_piece=1)
    assert player.mistakes["missed_block"] > 0
    assert player.lost_by["missed_block"] > 0
    lines = bench.report("stacker", player)
    assert lines[0].startswith("**stacker**: 30 games")
