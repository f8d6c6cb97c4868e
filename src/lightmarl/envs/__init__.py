"""Where the population acts: PettingZoo (and VMAS) envs, their specs, transforms and vectorization.

Names are imported on first use (PEP 562): env worker processes import
``lightmarl.envs.workers`` and must not pay for torch, which ``pettingzoo`` and ``spec`` import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightmarl.envs.checks import EnvContractError, check_same_trajectories, check_vec_env
    from lightmarl.envs.config import EnvConfig
    from lightmarl.envs.pettingzoo import ParallelVecEnv, PettingZooEnvConfig, VecEnv, env_spec_of
    from lightmarl.envs.spec import EnvSpec, GroupSpec
    from lightmarl.envs.transforms import FrameStack, ObservationNorm, RewardNorm, TransformedVecEnv, VecTransform
    from lightmarl.envs.vmas import VmasEnvConfig, VmasVecEnv
    from lightmarl.envs.workers import ProcessVecEnv

_WHERE = {
    "EnvConfig": "lightmarl.envs.config",
    "EnvContractError": "lightmarl.envs.checks",
    "EnvSpec": "lightmarl.envs.spec",
    "FrameStack": "lightmarl.envs.transforms",
    "GroupSpec": "lightmarl.envs.spec",
    "ObservationNorm": "lightmarl.envs.transforms",
    "ParallelVecEnv": "lightmarl.envs.pettingzoo",
    "PettingZooEnvConfig": "lightmarl.envs.pettingzoo",
    "ProcessVecEnv": "lightmarl.envs.workers",
    "RewardNorm": "lightmarl.envs.transforms",
    "TransformedVecEnv": "lightmarl.envs.transforms",
    "VecEnv": "lightmarl.envs.pettingzoo",
    "VecTransform": "lightmarl.envs.transforms",
    "VmasEnvConfig": "lightmarl.envs.vmas",
    "VmasVecEnv": "lightmarl.envs.vmas",
    "check_same_trajectories": "lightmarl.envs.checks",
    "check_vec_env": "lightmarl.envs.checks",
    "env_spec_of": "lightmarl.envs.pettingzoo",
}

__all__ = [
    "EnvConfig",
    "EnvContractError",
    "EnvSpec",
    "FrameStack",
    "GroupSpec",
    "ObservationNorm",
    "ParallelVecEnv",
    "PettingZooEnvConfig",
    "ProcessVecEnv",
    "RewardNorm",
    "TransformedVecEnv",
    "VecEnv",
    "VecTransform",
    "VmasEnvConfig",
    "VmasVecEnv",
    "check_same_trajectories",
    "check_vec_env",
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
