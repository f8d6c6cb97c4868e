"""How env copies are stepped: in this process, or in worker processes over shared memory.

The runners know nothing of any env family: a family hands them its stepping code (an
:class:`~lightmarl.envs.layout.EnvSlice` factory; PettingZoo's is
:func:`~lightmarl.envs.pettingzoo.slices.pettingzoo_slice`). Worker processes import only
:mod:`~lightmarl.envs.runners.worker` and what it imports, never torch, so this package's
``__init__`` imports nothing itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightmarl._imports import lazy_attributes

if TYPE_CHECKING:
    from lightmarl.envs.runners.inprocess import InProcessVecEnv
    from lightmarl.envs.runners.process import ProcessVecEnv, VecEnvPhase

_WHERE = {
    "InProcessVecEnv": "lightmarl.envs.runners.inprocess",
    "ProcessVecEnv": "lightmarl.envs.runners.process",
    "VecEnvPhase": "lightmarl.envs.runners.process",
}

__all__ = ["InProcessVecEnv", "ProcessVecEnv", "VecEnvPhase"]


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE)
