"""PettingZoo envs stepped in the training process: :class:`ParallelVecEnv`."""

from __future__ import annotations

from typing import Any

from lightmarl.envs.pettingzoo.slices import pettingzoo_slice
from lightmarl.envs.runners.inprocess import InProcessVecEnv
from lightmarl.envs.spec import EnvSpec


class ParallelVecEnv(InProcessVecEnv):
    """``num_envs`` PettingZoo envs (parallel, or turn-based AEC) stepped in one process, with auto-reset.

    An :class:`~lightmarl.envs.runners.inprocess.InProcessVecEnv` with PettingZoo's stepping code
    (:class:`~lightmarl.envs.pettingzoo.parallel.ParallelSlice`; for AEC envs
    :class:`~lightmarl.envs.pettingzoo.aec.AECSlice`, one turn per step), the code the worker
    processes of :class:`~lightmarl.envs.runners.process.ProcessVecEnv` run too.

    Args:
        envs: the env copies (already constructed).
        spec: their shared :class:`~lightmarl.envs.spec.EnvSpec`.
        seeds: one seed per env copy: its episode ``k`` is reset with
            :func:`~lightmarl.envs.layout.episode_seed` ``(seed, k)``.
    """

    def __init__(self, envs: list[Any], spec: EnvSpec, seeds: list[int]) -> None:
        super().__init__(envs, spec, seeds, pettingzoo_slice)
