"""The connect-four rules shared by the heuristic, the threat encoder and the mistake counter."""

from __future__ import annotations

from connect_four_positions import board, play_moves, random_game_positions

from lightmarl_examples.connect_four import rules


def test_landing_rows_are_the_lowest_empty_cells_and_minus_one_on_full_columns():
    position = board("x......", "o......", "x......", "o......", "x......", "o.x....")
    empty = position.sum(-1).unsqueeze(0) == 0
    assert rules.landing_rows(empty)[0].tolist() == [-1, 5, 4, 5, 5, 5, 5]


def test_winning_cells_need_three_pieces_and_an_empty_fourth_cell_in_any_direction():
    # x: three in the bottom row (cell (5, 3) wins) and three up column 6 (cell (2, 6) wins);
    # the o on (5, 4) closes the bottom line on the right, so (5, 4) never counts.
    position = board("......x", "......x", "xxx.o.x")
    own, empty = position[..., 0].unsqueeze(0), position.sum(-1).unsqueeze(0) == 0
    cells = rules.winning_cells(own, empty)[0]
    assert cells.nonzero().tolist() == [[2, 6], [5, 3]]
    assert rules.winning_drops(own, empty)[0].nonzero().view(-1).tolist() == [3, 6]


def test_a_winning_cell_above_the_landing_row_waits_for_the_column_to_fill():
    # Rising diagonal (5,0) (4,1) (3,2): its fourth cell (2,3) is empty, but column 3's landing row is 5.
    position = board("..x....", ".xo....", "xoo....")
    own, empty = position[..., 0].unsqueeze(0), position.sum(-1).unsqueeze(0) == 0
    assert rules.winning_cells(own, empty)[0].nonzero().tolist() == [[2, 3]]
    assert not rules.winning_drops(own, empty).any()


def test_winning_drops_after_each_drop_count_old_and_new_threats():
    # x to play. Column 1 opens the bottom row both ways (cells (5,0) and (5,4)): 2; column 4 too
    # ((5,1) and (5,5)); columns 0 and 5 make one winning cell; a piece on (4,2) or (4,3) none;
    # the full column 6 counts 0.
    position = board("......o", "......x", "......o", "......x", "......o", "..xx..x")
    own, empty = position[..., 0].unsqueeze(0), position.sum(-1).unsqueeze(0) == 0
    assert rules.winning_drops_after_each_drop(own, empty)[0].tolist() == [1, 2, 0, 0, 2, 1, 0]
    # x's winning cell (4, 3) becomes playable after x's own drop on (5, 3); x's drop on (3, 2)
    # makes three in column 2, whose next cell it lifts the column onto.
    lifted = board("xxx....", "oox....")
    own, empty = lifted[..., 0].unsqueeze(0), lifted.sum(-1).unsqueeze(0) == 0
    assert rules.winning_drops_after_each_drop(own, empty)[0].tolist() == [0, 0, 1, 1, 0, 0, 0]


def test_winning_drops_agree_with_pettingzoo_on_random_games():
    # Every legal column of every position: the mover's drop wins in PettingZoo exactly when the rule says so.
    checked = wins = 0
    for moves, observation in random_game_positions(games=12, seed=3):
        own, theirs = observation[..., 0].unsqueeze(0), observation[..., 1].unsqueeze(0)
        predicted = rules.winning_drops(own, (own + theirs) == 0)[0]
        mover = ("player_0", "player_1")[len(moves) % 2]
        for column in range(7):
            if observation[0, column].sum() > 0:  # a full column
                assert not predicted[column]
                continue
            trial = play_moves(moves)
            trial.step(column)
            won = trial.rewards[mover] == 1
            assert bool(predicted[column]) == won, (observation, column)
            checked, wins = checked + 1, wins + int(won)
    assert checked > 500 and wins > 10
