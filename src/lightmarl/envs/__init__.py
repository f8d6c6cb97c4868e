"""Where the population acts: PettingZoo (and VMAS) envs, their specs, transforms and vectorization.

Layout, lowest first (each module imports only those before it):

* `spec` (groups and spaces) and `layout` (the
  arrays a vector fills, the stepping-code protocol), torch-free;
* `base`: the [`VecEnv`][lightmarl.envs.base.VecEnv] protocol every vector implements;
* `transforms`, then `config` ([`EnvConfig`][lightmarl.envs.config.EnvConfig],
  what a recipe's ``env`` builds);
* `runners`: stepping copies in process or in worker processes, for any
  family's stepping code; `checks`: the vector contract;
* the env families: `pettingzoo` and `vmas`;
  beside them `rendering` (video frames) and `testing`
  (tiny tasks).

Names are imported on first use (PEP 562): env worker processes import
`lightmarl.envs.runners.worker` and the torch-free stepping modules, and must not pay for
torch, which most other modules import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightmarl._imports import lazy_attributes

if TYPE_CHECKING:
    from lightmarl.envs.base import AsyncVecEnv, PhasedVecEnv, VecEnv
    from lightmarl.envs.checks import check_same_trajectories, check_vec_env
    from lightmarl.envs.config import EnvConfig
    from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
    from lightmarl.envs.pettingzoo.spec import env_spec_of
    from lightmarl.envs.pettingzoo.vector import ParallelVecEnv
    from lightmarl.envs.runners.inprocess import InProcessVecEnv
    from lightmarl.envs.runners.process import ProcessVecEnv
    from lightmarl.envs.spec import EnvSpec, GroupSpec
    from lightmarl.envs.testing.match import MatchTargetEnv
    from lightmarl.envs.testing.memory import CueMemoryEnv
    from lightmarl.envs.transforms import FrameStack, ObservationNorm, RewardNorm, TransformedVecEnv, VecTransform
    from lightmarl.envs.vmas import VmasEnvConfig, VmasVecEnv
    from lightmarl.errors import EnvContractError

_WHERE = {
    "AsyncVecEnv": "lightmarl.envs.base",
    "CueMemoryEnv": "lightmarl.envs.testing.memory",
    "EnvConfig": "lightmarl.envs.config",
    "EnvContractError": "lightmarl.errors",
    "EnvSpec": "lightmarl.envs.spec",
    "FrameStack": "lightmarl.envs.transforms",
    "GroupSpec": "lightmarl.envs.spec",
    "InProcessVecEnv": "lightmarl.envs.runners.inprocess",
    "MatchTargetEnv": "lightmarl.envs.testing.match",
    "ObservationNorm": "lightmarl.envs.transforms",
    "ParallelVecEnv": "lightmarl.envs.pettingzoo.vector",
    "PettingZooEnvConfig": "lightmarl.envs.pettingzoo.config",
    "PhasedVecEnv": "lightmarl.envs.base",
    "ProcessVecEnv": "lightmarl.envs.runners.process",
    "RewardNorm": "lightmarl.envs.transforms",
    "TransformedVecEnv": "lightmarl.envs.transforms",
    "VecEnv": "lightmarl.envs.base",
    "VecTransform": "lightmarl.envs.transforms",
    "VmasEnvConfig": "lightmarl.envs.vmas",
    "VmasVecEnv": "lightmarl.envs.vmas",
    "check_same_trajectories": "lightmarl.envs.checks",
    "check_vec_env": "lightmarl.envs.checks",
    "env_spec_of": "lightmarl.envs.pettingzoo.spec",
}

__all__ = [
    "AsyncVecEnv",
    "CueMemoryEnv",
    "EnvConfig",
    "EnvContractError",
    "EnvSpec",
    "FrameStack",
    "GroupSpec",
    "InProcessVecEnv",
    "MatchTargetEnv",
    "ObservationNorm",
    "ParallelVecEnv",
    "PettingZooEnvConfig",
    "PhasedVecEnv",
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

__getattr__, __dir__ = lazy_attributes(__name__, _WHERE)
