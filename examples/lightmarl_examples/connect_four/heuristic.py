"""A scripted connect-four opponent: win if possible, else block, else a random legal column."""

from __future__ import annotations

import torch

from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import ScriptedPolicy
from lightmarl_examples.connect_four.rules import winning_drops


class ConnectFourHeuristicPolicy(ScriptedPolicy):
    """PettingZoo ``connect_four_v3``: win if possible, else block the opponent's win, else random.

    A classic scripted opponent: among the legal columns it plays one that completes four of
    its own in a row; failing that, one where the opponent would complete four on its next
    move; failing that, a uniformly random legal column. It samples with its own generator in
    every exploration mode, so deterministic evaluation still meets a varied opponent.

    Observation layout (``connect_four_v3``, from the acting player's view): ``[6 rows (top
    first), 7 columns, 2]``, channel 0 its own pieces, channel 1 the opponent's; a piece
    dropped in a column lands on its lowest empty cell.

    Args:
        group: the agent group this policy acts for (connect four's players).
        seed: seed of the policy's own generator (``None``: torch's global RNG).
        block: also block the opponent's immediate wins (``False``: win-or-random).
    """

    def __init__(self, group: GroupSpec, seed: int | None = None, block: bool = True) -> None:
        if group.action_kind != "discrete" or group.num_actions != 7 or tuple(group.observation_shape) != (6, 7, 2):
            raise ValueError(
                f"ConnectFourHeuristicPolicy needs connect_four_v3 (observations (6, 7, 2), 7 discrete actions); "
                f"group {group.name!r} has observations {group.observation_shape} and {group.action_kind} "
                f"actions ({group.num_actions or group.action_shape})"
            )
        super().__init__(group)
        self.block = block
        self.own_random_stream(seed)

    def act(
        self, observation: torch.Tensor, action_mask: torch.Tensor | None = None, agent_id: torch.Tensor | None = None
    ) -> torch.Tensor:
        batch = observation.shape[:-3]
        board = observation.reshape(-1, 6, 7, 2).float()
        own, theirs = board[..., 0], board[..., 1]
        empty = (own + theirs) == 0
        legal = empty[:, 0, :] if action_mask is None else action_mask.reshape(-1, 7).bool()
        score = torch.zeros(board.shape[0], 7, device=board.device)
        if self.block:
            score += winning_drops(theirs, empty).float()
        score += 2 * winning_drops(own, empty).float()
        score = torch.where(legal, score, -1.0)
        # Uniform among the legal columns with the best score (any column where none is legal: an absent row).
        best = (score == score.amax(-1, keepdim=True)) & (legal | ~legal.any(-1, keepdim=True))
        choice = torch.multinomial(best.float().cpu(), 1, generator=self.generator).view(batch)
        return choice.to(observation.device)
