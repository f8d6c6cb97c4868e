from __future__ import annotations

import pytest
import torch

import source_cache
import worker_lock
from lightmarl.envs import PettingZooEnvConfig
from process_state import ProcessState

SPREAD = "mpe2.simple_spread_v3.parallel_env"

# One torch thread, as every run has by default (MARLModule.cpu_threads=1): a test then runs on the
# same thread count whether or not an in-process `lightmarl fit` came before it (each test's is put back).
torch.set_num_threads(1)
# The CLI's parser reads each class's source once per session, not once per in-process command.
source_cache.install()


def pytest_configure(config: pytest.Config) -> None:
    # Under xdist, one test marked `two_processes` at a time across the workers (tests/worker_lock.py).
    worker_lock.install(config)


@pytest.fixture
def spread_config() -> PettingZooEnvConfig:
    """3-agent simple_spread with short episodes, 4 copies."""
    return PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 5}, num_envs=4)


@pytest.fixture(autouse=True)
def _process_state():
    """Each test leaves the process as it found it: a command run in-process (``lightmarl.cli.main``,
    tests/cli_runner.py) sets signal handlers, seeds, torch threads, env vars, logging and the cwd."""
    state = ProcessState.save(across_test_phases=True)
    yield
    state.restore()


@pytest.fixture(autouse=True)
def _deterministic_torch(_process_state):
    torch.manual_seed(0)
    yield
