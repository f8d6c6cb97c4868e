"""Where the population acts: PettingZoo envs, their specs, and vectorization."""

from lightmarl.envs.pettingzoo import ParallelVecEnv, PettingZooEnvConfig, env_spec_of
from lightmarl.envs.spec import EnvSpec, GroupSpec

__all__ = ["EnvSpec", "GroupSpec", "ParallelVecEnv", "PettingZooEnvConfig", "env_spec_of"]
