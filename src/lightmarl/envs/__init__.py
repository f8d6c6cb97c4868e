"""Where the population acts: PettingZoo envs, their specs, and vectorization.

Names are imported on first use (PEP 562): env worker processes import
``lightmarl.envs.workers`` and must not pay for torch, which ``pettingzoo`` and ``spec`` import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightmarl.envs.pettingzoo import ParallelVecEnv, PettingZooEnvConfig, VecEnv, env_spec_of
    from lightmarl.envs.spec import EnvSpec, GroupSpec
    from lightmarl.envs.workers import ProcessVecEnv

_WHERE = {
    "EnvSpec": "lightmarl.envs.spec",
    "GroupSpec": "lightmarl.envs.spec",
    "ParallelVecEnv": "lightmarl.envs.pettingzoo",
    "PettingZooEnvConfig": "lightmarl.envs.pettingzoo",
    "ProcessVecEnv": "lightmarl.envs.workers",
    "VecEnv": "lightmarl.envs.pettingzoo",
    "env_spec_of": "lightmarl.envs.pettingzoo",
}

__all__ = [
    "EnvSpec",
    "GroupSpec",
    "ParallelVecEnv",
    "PettingZooEnvConfig",
    "ProcessVecEnv",
    "VecEnv",
    "env_spec_of",
]


def __getattr__(name: str) -> Any:
    try:
        module = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
