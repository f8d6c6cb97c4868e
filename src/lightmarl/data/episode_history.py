"""What putting env copies back mid-episode needs: each copy's episode number and the actions since it began.

A PettingZoo env cannot be snapshotted, but it can be fast-forwarded: episode ``k`` of a copy is reset
with `episode_seed` of the copy's seed and ``k``, so the same
actions bring it back to the same state (for an env that is deterministic given its seed and
actions). `EpisodeHistory` keeps, per copy, the number of its episode in flight and the
actions that episode was stepped with so far; a resumed collector hands them to
`restore`.
"""

from __future__ import annotations

from typing import Any

import torch


class EpisodeHistory:
    """Per env copy: the number of its episode in flight and that episode's actions so far.

    Updated once per rollout (`record`), not per step: the actions are kept as views of the
    rollouts' own action tensors and joined only by `state_dict`. Memory grows with the
    longest episode in flight and is freed as episodes end.

    Args:
        num_envs: env copies.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        #: each copy's episode in flight (0: its first).
        self.episodes = torch.zeros(num_envs, dtype=torch.int64)
        self._chunks: list[list[dict[str, torch.Tensor]]] = [[] for _ in range(num_envs)]
        self._shapes: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}  # group -> (action shape, dtype)

    def record(self, actions: dict[str, torch.Tensor], ended: torch.Tensor) -> None:
        """Fold in one rollout.

        Args:
            actions: group -> ``[num_envs, steps, agents_in_group, ...]``, the actions sent to the env.
            ended: ``[num_envs, steps]``: the copy's episode ended at that step (it was reset after it).
        """
        steps = ended.shape[1]
        for g, a in actions.items():
            self._shapes.setdefault(g, (tuple(a.shape[2:]), a.dtype))
        ends = ended.sum(1)
        self.episodes += ends
        # The step after each copy's last end in this rollout: where its episode in flight began.
        starts = (steps - ended.flip(1).to(torch.int8).argmax(1)).tolist()
        for e, (ending, start) in enumerate(zip(ends.tolist(), starts)):
            if ending:
                self._chunks[e] = [{g: a[e, start:] for g, a in actions.items()}] if start < steps else []
            else:
                self._chunks[e].append({g: a[e] for g, a in actions.items()})

    def actions_of(self, e: int) -> dict[str, torch.Tensor]:
        """Copy ``e``'s episode in flight: group -> its actions ``[steps, agents_in_group, ...]`` (on the CPU)."""
        chunks = self._chunks[e]
        return {
            g: torch.cat([c[g] for c in chunks]).cpu() if chunks else torch.zeros(0, *shape, dtype=dtype)
            for g, (shape, dtype) in self._shapes.items()
        }

    def state_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes.clone(), "actions": [self.actions_of(e) for e in range(self.num_envs)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        episodes, actions = state["episodes"], state["actions"]
        if len(episodes) != self.num_envs:
            raise ValueError(
                f"the checkpoint's episode history has {len(episodes)} env copies, this run {self.num_envs}"
            )
        self.episodes = episodes.clone()
        self._chunks = [[dict(a)] if a and len(next(iter(a.values()))) else [] for a in actions]
        for a in actions:
            for g, t in a.items():
                self._shapes.setdefault(g, (tuple(t.shape[1:]), t.dtype))
