"""PettingZoo envs stepped in the training process: [`ParallelVecEnv`][lightmarl.envs.pettingzoo.vector.ParallelVecEnv]."""

from __future__ import annotations

from typing import Any

from lightmarl.envs.pettingzoo.slices import pettingzoo_slice
from lightmarl.envs.runners.inprocess import InProcessVecEnv
from lightmarl.envs.spec import EnvSpec


class ParallelVecEnv(InProcessVecEnv):
    """``num_envs`` PettingZoo envs (parallel, or turn-based AEC) stepped in one process, with auto-reset.

    An [`InProcessVecEnv`][lightmarl.envs.runners.inprocess.InProcessVecEnv] with PettingZoo's stepping code
    (`ParallelSlice`; for AEC envs
    `AECSlice`, one turn per step), the code the worker
    processes of [`ProcessVecEnv`][lightmarl.envs.runners.process.ProcessVecEnv] run too.

    Args:
        envs: the env copies (already constructed).
        spec: their shared [`EnvSpec`][lightmarl.envs.spec.EnvSpec].
        seeds: one seed per env copy: its episode ``k`` is reset with
            `episode_seed` ``(seed, k)``.
    """

    def __init__(self, envs: list[Any], spec: EnvSpec, seeds: list[int]) -> None:
        super().__init__(envs, spec, seeds, pettingzoo_slice)
