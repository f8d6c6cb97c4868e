from __future__ import annotations

import pytest
import torch

from lightmarl.envs import PettingZooEnvConfig

SPREAD = "mpe2.simple_spread_v3.parallel_env"


@pytest.fixture
def spread_config() -> PettingZooEnvConfig:
    """3-agent simple_spread with short episodes, 4 copies."""
    return PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 5}, num_envs=4)


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield
