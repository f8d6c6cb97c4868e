"""PettingZoo envs (parallel and turn-based AEC): spec building, stepping code, vectors and the recipe config.

Modules, lowest first: :mod:`~lightmarl.envs.pettingzoo.spec` (groups and spaces),
:mod:`~lightmarl.envs.pettingzoo.checks` (API checks of a raw env),
:mod:`~lightmarl.envs.pettingzoo.parallel` and :mod:`~lightmarl.envs.pettingzoo.aec` (stepping
code), :mod:`~lightmarl.envs.pettingzoo.slices` (which of the two), all torch-free because env
worker processes import them; then :mod:`~lightmarl.envs.pettingzoo.vector` (the in-process
vector) and :mod:`~lightmarl.envs.pettingzoo.config` (:class:`PettingZooEnvConfig`). Names are
imported on first use, so worker processes importing a stepping module do not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightmarl._imports import lazy_attributes

if TYPE_CHECKING:
    from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
    from lightmarl.envs.pettingzoo.spec import env_spec_of
    from lightmarl.envs.pettingzoo.vector import ParallelVecEnv

_WHERE = {
    "ParallelVecEnv": "lightmarl.envs.pettingzoo.vector",
    "PettingZooEnvConfig": "lightmarl.envs.pettingzoo.config",
    "env_spec_of": "lightmarl.envs.pettingzoo.spec",
}

__all__ = ["ParallelVecEnv", "PettingZooEnvConfig", "env_spec_of"]


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE)
