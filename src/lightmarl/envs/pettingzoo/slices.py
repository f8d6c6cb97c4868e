"""PettingZoo's `SliceFactory`: parallel or turn-based stepping, by env.

Worker processes import it by path ([`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv]'s default
``make_slice``), so it imports no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightmarl.envs.pettingzoo.aec import AECSlice, is_aec_env
from lightmarl.envs.pettingzoo.parallel import ParallelSlice


def pettingzoo_slice(envs: Sequence[Any], *args: Any) -> ParallelSlice:
    """The stepping code for these env copies: `ParallelSlice`
    for parallel envs, `AECSlice` (one turn per step) for AEC envs.

    Args:
        envs: the copies.
        args: the rest of `SliceFactory`'s arguments, passed on.
    """
    slice_class = AECSlice if envs and is_aec_env(envs[0]) else ParallelSlice
    return slice_class(envs, *args)
