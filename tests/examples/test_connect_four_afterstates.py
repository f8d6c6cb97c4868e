"""DropAfterstateEncoder: the boards after each drop, seen from the dropper's side, and what a policy makes of them."""

from __future__ import annotations

import pytest
import torch
from connect_four_positions import board
from tensordict import TensorDict

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies import MLPActorCritic
from lightmarl_examples.connect_four.afterstates import DropAfterstateEncoder

GROUP = GroupSpec("player", ("player_0", "player_1"), (0, 1), (6, 7, 2), "discrete", num_actions=7)


def test_each_afterstate_has_the_piece_on_the_columns_lowest_empty_cell_from_the_droppers_side():
    obs = board("x......", "oo....x")
    encoder = DropAfterstateEncoder(GROUP, channels=4)
    after = encoder.afterstates(obs[..., 0].unsqueeze(0), obs[..., 1].unsqueeze(0))[0]
    assert after.shape == (2, 7, 2, 6, 7)
    # The mover drops in column 0: it lands on row 3 (above x on row 4); channel 1 is the opponent's.
    assert after[0, 0, 0, 3, 0] == 1 and after[0, 0, 0].sum() == obs[..., 0].sum() + 1
    assert torch.equal(after[0, 0, 1], obs[..., 1])
    # The opponent drops in column 3: the bottom row; seen from its side (its pieces in channel 0).
    assert after[1, 3, 0, 5, 3] == 1 and torch.equal(after[1, 3, 1], obs[..., 0])
    assert after[1, 3, 0].sum() == obs[..., 1].sum() + 1


def test_a_full_column_leaves_the_board_unchanged():
    column_full = torch.zeros(6, 7, 2)
    column_full[:, 2, 0] = torch.tensor([1.0, 0, 1, 0, 1, 0])
    column_full[:, 2, 1] = torch.tensor([0.0, 1, 0, 1, 0, 1])
    encoder = DropAfterstateEncoder(GROUP, channels=4)
    after = encoder.afterstates(column_full[..., 0].unsqueeze(0), column_full[..., 1].unsqueeze(0))[0]
    assert torch.equal(after[0, 2, 0], column_full[..., 0]) and torch.equal(after[1, 2, 0], column_full[..., 1])


def test_one_kernel_can_see_which_drop_completes_four():
    # One kernel that sums the bottom line of its 4x4 window, minus 3: positive exactly where four
    # are complete on rows 3-5 (other rows and directions take kernels of their own).
    encoder = DropAfterstateEncoder(GROUP, channels=1)
    with torch.no_grad():
        encoder.conv.weight.zero_()
        encoder.conv.weight[0, 0, 3, :] = 1.0
        encoder.conv.bias.fill_(-3.0)
    # The mover wins in column 3 (bottom row); the opponent's three sit on row 4, whose cell in
    # column 3 is not playable yet: its drop there lands on the bottom row and completes nothing.
    obs = board("ooo....", "xxx....")
    features = encoder(obs.unsqueeze(0))[0]
    mover, opponent = features[:7], features[7:14]
    assert mover.nonzero().view(-1).tolist() == [3] and not opponent.any()
    lifted = board("ooo.x..", "xxxox..")  # now the opponent's fourth cell is playable: a threat to block
    assert encoder(lifted.unsqueeze(0))[0, 7:14].nonzero().view(-1).tolist() == [3]
    assert torch.equal(features[14:], obs.flatten())


def test_the_features_are_the_convolved_afterstates():
    torch.manual_seed(0)
    encoder = DropAfterstateEncoder(GROUP, channels=5)
    # Boards with gravity: each column filled from the bottom to a random height (full ones too), colours at random.
    heights = torch.randint(0, 7, (16, 1, 7))
    filled = (torch.arange(6).view(1, 6, 1) >= 6 - heights).float()
    mine = torch.randint(0, 2, (16, 6, 7)).float()
    obs = torch.stack([filled * mine, filled * (1 - mine)], -1)
    after = encoder.afterstates(obs[..., 0], obs[..., 1])
    expected = encoder.activation(encoder.conv(after.reshape(-1, 2, 6, 7))).amax((-2, -1)).reshape(16, -1)
    assert torch.allclose(encoder(obs)[:, :70], expected, atol=1e-5)


def test_it_drives_an_actor_critic_with_any_batch_shape_and_integer_boards():
    policy = MLPActorCritic(
        GROUP,
        hidden_sizes=[16],
        critic="local",
        encoder={"class_path": "lightmarl_examples.connect_four.DropAfterstateEncoder", "init_args": {"channels": 4}},
    )
    obs = torch.randint(0, 2, (3, 5, 2, 6, 7, 2), dtype=torch.int8)
    td = TensorDict({"player": {"observation": obs, "action_mask": torch.ones(3, 5, 2, 7, dtype=torch.bool)}}, [3, 5])
    out = policy.actor(td.clone())
    assert out.get(("player", "action")).shape == (3, 5, 2)
    assert policy.critic(td.clone()).get(("player", "state_value")).shape == (3, 5, 2, 1)


def test_boards_and_actions_it_cannot_read_are_refused():
    with pytest.raises(ValueError, match=r"boards \[rows, columns, 2\]"):
        DropAfterstateEncoder(GroupSpec("p", ("a",), (0,), (6, 7, 3), "discrete", num_actions=7))
    with pytest.raises(ValueError, match="one action per column"):
        DropAfterstateEncoder(GroupSpec("p", ("a",), (0,), (6, 7, 2), "discrete", num_actions=9))
    with pytest.raises(ValueError, match="kernel_size 7 does not fit"):
        DropAfterstateEncoder(GROUP, kernel_size=7)
