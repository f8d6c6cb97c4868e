"""Tiny PettingZoo tasks that exercise what the mpe2 tasks do not (memory, masks, multi-discrete actions).

* [`CueMemoryEnv`][lightmarl.envs.testing.memory.CueMemoryEnv] (`memory`): only a recurrent policy can solve it.
* [`MatchTargetEnv`][lightmarl.envs.testing.match.MatchTargetEnv] (`match`): ``MultiDiscrete`` actions,
  action masks, agents that leave early.
* [`ReachTargetEnv`][lightmarl.envs.testing.reach.ReachTargetEnv] (`reach`): continuous actions, learnable
  in a few thousand frames (the per-family learning tests).
* `ReplyRewardEnv` (`reply`): turn-based, every reward arrives
  on the other seat's turn.
* `agent_ids`: envs whose agent ids are ints or tuples
  (`IntIdsMatchEnv`, `TupleIdsMatchEnv`, `RenamedAECEnv`).

A recipe names them by class, e.g. ``env_fn: lightmarl.envs.CueMemoryEnv``. They import no torch
(env worker processes build them).
"""

from __future__ import annotations

from lightmarl.envs.testing.match import MatchTargetEnv
from lightmarl.envs.testing.memory import CueMemoryEnv
from lightmarl.envs.testing.reach import ReachTargetEnv
from lightmarl.envs.testing.reply import ReplyRewardEnv

__all__ = ["CueMemoryEnv", "MatchTargetEnv", "ReachTargetEnv", "ReplyRewardEnv"]
