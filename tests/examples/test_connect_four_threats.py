"""ThreatFeaturesEncoder: each column's tactical facts, exactly as the rules (and PettingZoo) have them."""

from __future__ import annotations

import pytest
import torch
from connect_four_positions import board, play_moves, random_game_positions
from tensordict import TensorDict

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies import MLPActorCritic
from lightmarl_examples.connect_four import rules
from lightmarl_examples.connect_four.threats import DEFAULT_FACTS, FACTS, ThreatFeaturesEncoder

GROUP = GroupSpec("player", ("player_0", "player_1"), (0, 1), (6, 7, 2), "discrete", num_actions=7)
ENCODER = ThreatFeaturesEncoder(GROUP, facts=FACTS)


def columns_where(position: torch.Tensor) -> dict[str, list[int]]:
    """Per fact, the columns where it holds (read from the encoder's output, not from ``column_facts``)."""
    features = ENCODER(position.unsqueeze(0))[0]
    assert torch.equal(features[len(FACTS) * 7 :], position.flatten())
    per_fact = features[: len(FACTS) * 7].view(len(FACTS), 7)
    return {fact: per_fact[k].nonzero().view(-1).tolist() for k, fact in enumerate(FACTS)}


def mirrored(position: torch.Tensor) -> torch.Tensor:
    return position.flip(1)


def test_a_horizontal_three_is_a_win_for_the_mover_and_a_block_for_the_opponent():
    assert columns_where(board("xxx....")) == {
        "legal": list(range(7)),
        "win": [3],
        "block": [],
        "under": [],
        "lift_own": [],
        "double_threat": [],
        "their_double_threat": [],
    }
    theirs = columns_where(board("ooo...."))
    assert theirs["block"] == [3] and theirs["win"] == []


def test_a_vertical_three_and_a_full_column():
    facts = columns_where(board("x.....o", "x.....x", "x.....o", "o.....x", "x.....o", "o.....x"))
    assert facts["legal"] == [1, 2, 3, 4, 5]  # columns 0 and 6 are full
    assert facts["win"] == [] and all(0 not in cols and 6 not in cols for cols in facts.values())
    vertical = columns_where(board("x......", "x......", "x......", "o.o...."))
    assert vertical["win"] == [0] and vertical["legal"] == list(range(7))


@pytest.mark.parametrize("flip", [False, True], ids=["rising", "falling"])
def test_both_diagonals(flip):
    # (5,0) (4,1) (3,2) and the landing cell (2,3): column 3 is filled up to row 3.
    position = board("..xo...", ".xoo...", "xoox...")
    position = mirrored(position) if flip else position
    expected = 3  # the mirror image of column 3 is column 3
    assert columns_where(position)["win"] == [expected]
    swapped = position.flip(-1)  # the same board from the opponent's side
    assert columns_where(swapped)["block"] == [expected]


def test_playing_under_the_opponents_threat_and_under_ones_own():
    # o threatens (4, 3), above column 3's empty bottom cell: x must not play there.
    facts = columns_where(board("ooo....", "xxo...."))
    assert facts["under"] == [3] and facts["block"] == [] and facts["win"] == []
    own = columns_where(board("xxx....", "oox...."))
    assert own["lift_own"] == [3] and own["under"] == [] and own["win"] == []


def test_double_threats_for_either_side():
    # x to play: column 1 or 4 makes an open three on the bottom row (two winning drops).
    assert columns_where(board("..xx..."))["double_threat"] == [1, 4]
    theirs = columns_where(board("..oo..."))
    assert theirs["their_double_threat"] == [1, 4] and theirs["double_threat"] == []


def test_features_do_not_depend_on_the_batch_shape_or_the_dtype():
    positions = torch.stack([observation for _, observation in random_game_positions(games=6, seed=1)])
    each = torch.stack([ENCODER(p.unsqueeze(0))[0] for p in positions])
    shaped = positions[: 4 * 3 * 2].view(4, 3, 2, 6, 7, 2)
    assert torch.equal(ENCODER(shaped).view(-1, ENCODER.out_features), each[: 4 * 3 * 2])
    assert torch.equal(ENCODER(positions.to(torch.int8)), each)
    assert ENCODER(positions[:0]).shape == (0, ENCODER.out_features)


def brute_force(observation: torch.Tensor) -> dict[str, list[bool]]:
    """The facts by their definitions, one afterstate at a time, with ``has_four`` only."""
    own, theirs = observation[..., 0].bool(), observation[..., 1].bool()

    def landing(pieces: torch.Tensor, column: int) -> int:
        empty_rows = [r for r in range(6) if not pieces[r, column]]
        return max(empty_rows) if empty_rows else -1

    def dropped(pieces: torch.Tensor, occupied: torch.Tensor, column: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = landing(occupied, column)
        pieces, occupied = pieces.clone(), occupied.clone()
        pieces[row, column] = occupied[row, column] = True
        return pieces, occupied

    def four(pieces: torch.Tensor) -> bool:
        return bool(rules.has_four(pieces.unsqueeze(0))[0])

    def wins(pieces: torch.Tensor, occupied: torch.Tensor) -> int:
        return sum(four(dropped(pieces, occupied, c)[0]) for c in range(7) if landing(occupied, c) >= 0)

    occupied = own | theirs
    facts: dict[str, list[bool]] = {fact: [] for fact in FACTS}
    for c in range(7):
        legal = landing(occupied, c) >= 0
        facts["legal"].append(legal)
        if not legal:
            for fact in FACTS[1:]:
                facts[fact].append(False)
            continue
        mine, occupied_after = dropped(own, occupied, c)
        facts["win"].append(four(mine))
        facts["block"].append(four(dropped(theirs, occupied, c)[0]))
        above = landing(occupied_after, c) >= 0
        facts["under"].append(above and four(dropped(theirs, occupied_after, c)[0]))
        # A threat of the mover's own that was there before its drop, on the cell above.
        facts["lift_own"].append(above and four(dropped(own, occupied_after, c)[0]))
        facts["double_threat"].append(not four(mine) and wins(mine, occupied_after) >= 2)
        their_after, their_occupied = dropped(theirs, occupied, c)
        facts["their_double_threat"].append(not four(their_after) and wins(their_after, their_occupied) >= 2)
    return facts


def test_every_fact_matches_its_definition_on_random_positions():
    positions = [observation for _, observation in random_game_positions(games=6, seed=2)]
    boards = torch.stack(positions)
    computed = ENCODER.column_facts(boards[..., 0], boards[..., 1])
    seen = dict.fromkeys(FACTS, 0)
    for i, observation in enumerate(positions):
        for fact, expected in brute_force(observation).items():
            assert computed[fact][i].tolist() == expected, (fact, observation)
            seen[fact] += sum(expected)
    assert all(count > 0 for count in seen.values()), seen  # every fact occurs somewhere
    # Encoders asked for some of the facts compute the same ones (the double threats side by side or alone).
    for facts in (DEFAULT_FACTS, ["their_double_threat", "win"]):
        subset = ThreatFeaturesEncoder(GROUP, facts=facts).column_facts(boards[..., 0], boards[..., 1])
        assert list(subset) == list(facts)
        assert all(torch.equal(subset[fact], computed[fact]) for fact in facts)


def test_win_and_under_agree_with_pettingzoo_on_random_games():
    # The mover plays each legal column; "win": PettingZoo pays it +1. "under" (when it does not win):
    # the opponent answering in the same column is paid +1.
    agreed = unders = 0
    for moves, observation in random_game_positions(games=10, seed=4):
        facts = ENCODER.column_facts(observation[..., 0].unsqueeze(0), observation[..., 1].unsqueeze(0))
        mover = ("player_0", "player_1")[len(moves) % 2]
        for column in range(7):
            if not facts["legal"][0, column]:
                continue
            trial = play_moves(moves)
            trial.step(column)
            assert bool(facts["win"][0, column]) == (trial.rewards[mover] == 1)
            if trial.rewards[mover] == 1 or any(trial.terminations.values()):
                continue
            opponent = trial.agent_selection
            under = bool(trial.observe(opponent)["action_mask"][column])
            if under:
                trial.step(column)
                under = trial.rewards[opponent] == 1
            assert bool(facts["under"][0, column]) == under
            agreed, unders = agreed + 1, unders + int(under)
    assert agreed > 300 and unders > 0


def test_it_drives_an_actor_critic_from_a_class_path_with_any_batch_shape():
    policy = MLPActorCritic(
        GROUP,
        hidden_sizes=[16],
        critic="local",
        encoder={
            "class_path": "lightmarl_examples.connect_four.ThreatFeaturesEncoder",
            "init_args": {"facts": ["win"]},
        },
    )
    obs = torch.randint(0, 2, (3, 5, 2, 6, 7, 2), dtype=torch.int8)
    td = TensorDict({"player": {"observation": obs, "action_mask": torch.ones(3, 5, 2, 7, dtype=torch.bool)}}, [3, 5])
    assert policy.actor(td.clone()).get(("player", "action")).shape == (3, 5, 2)
    assert policy.critic(td.clone()).get(("player", "state_value")).shape == (3, 5, 2, 1)
    assert policy.encoder.out_features == 7 + 84


def test_boards_actions_and_facts_it_cannot_read_are_refused():
    with pytest.raises(ValueError, match=r"boards \[rows, columns, 2\]"):
        ThreatFeaturesEncoder(GroupSpec("p", ("a",), (0,), (6, 7, 3), "discrete", num_actions=7))
    with pytest.raises(ValueError, match="one action per column"):
        ThreatFeaturesEncoder(GroupSpec("p", ("a",), (0,), (6, 7, 2), "discrete", num_actions=9))
    with pytest.raises(ValueError, match="holds no line of 4"):
        ThreatFeaturesEncoder(GroupSpec("p", ("a",), (0,), (3, 3, 2), "discrete", num_actions=3))
    with pytest.raises(ValueError, match=r"facts must be distinct names from .*'fork'"):
        ThreatFeaturesEncoder(GROUP, facts=["win", "fork"])
    with pytest.raises(ValueError, match="facts must be distinct"):
        ThreatFeaturesEncoder(GROUP, facts=["win", "win"])
