"""Env workers that hang or crash mid-step : a settable timeout, then a clean stop that
names the worker, its copies and seeds, or a restart whose cut episodes end truncated while the other
copies go on untouched. Workers ignore SIGTERM and exit when their pipe closes."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import torch

from lightmarl.envs import PettingZooEnvConfig, ProcessVecEnv
from lightmarl.envs.testing.faults import CRASH_EXIT_CODE
from lightmarl.errors import TrainingFault

FAULTY = "lightmarl.envs.testing.faults.FaultyMatchEnv"
MATCH = {"nvec": [3], "action_mask": False, "max_cycles": 50}
ACTIONS = {"agent": torch.ones(4, 2, dtype=torch.int64)}

pytestmark = pytest.mark.timeout(120)


def _gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def faulty_vector(fault: str, failure: str = "stop", num_phases: int = 1, **fault_kwargs) -> ProcessVecEnv:
    """4 copies (seeds 10..13) over 2 workers; the copy reset with seed 13 (copy 3, worker 1) fails at its 3rd step."""
    config = PettingZooEnvConfig(
        env_fn=FAULTY,
        env_kwargs={**MATCH, "fault": fault, "fault_seeds": [13], "fault_step": 2, **fault_kwargs},
        num_envs=4,
        num_workers=2,
        overlap=num_phases == 2,
        worker_timeout=1.0,
        worker_failure=failure,  # type: ignore[arg-type]
        max_worker_restarts=1,
    )
    env = config.make_vector(seed=10)
    assert isinstance(env, ProcessVecEnv) and env.num_phases == num_phases
    return env


@pytest.mark.parametrize(
    ("fault", "what"),
    [("hang", r"did not answer step within 1 s"), ("crash", rf"died \(exit code {CRASH_EXIT_CODE}\) during step")],
)
def test_a_hung_or_crashed_worker_stops_the_vector_naming_copies_and_seeds(fault, what):
    env = faulty_vector(fault)
    pids = [p.pid for p in env.worker_processes]
    env.reset()
    env.step(ACTIONS)
    env.step(ACTIONS)
    start = time.monotonic()
    with pytest.raises(TrainingFault, match=rf"env worker 1 \(pid \d+, copies 2\.\.3, seeds \[12, 13\]\) {what}; "
                       r"stopping \(env\.worker_failure: stop\)"):  # fmt: skip
        env.step(ACTIONS)
    assert time.monotonic() - start < 10  # the timeout, then a shutdown that kills the hung worker
    assert env.closed and all(_gone(pid) for pid in pids), "a worker outlived the stop"


def _step_all(env, steps: int):
    return [env.step(ACTIONS) for _ in range(steps)]


@pytest.mark.parametrize("fault", ["hang", "crash"])
def test_a_restarted_worker_ends_its_episodes_truncated_and_the_other_copies_go_on(fault, tmp_path, caplog):
    reference = PettingZooEnvConfig(env_fn=FAULTY, env_kwargs={**MATCH, "fault_seeds": []}, num_envs=4)
    healthy = reference.make_vector(seed=10)
    env = faulty_vector(fault, "restart", once_file=str(tmp_path / "failed"))
    old = env.worker_processes[1].pid
    try:
        healthy.reset()
        before = env.reset()
        steps = _step_all(env, 2)
        expected = _step_all(healthy, 3)
        seen = {k: v.clone() for k, v in env.current["agent"].items()}
        nxt, ended = env.step(ACTIONS)  # copy 3 fails here: worker 1 (copies 2, 3) is restarted
        assert env.restarts == 1 and env.worker_processes[1].pid != old and _gone(old)
        assert "env worker 1" in caplog.text and "restarting it (restart 1 of at most 1)" in caplog.text
        # Copies 0 and 1 stepped as in a healthy vector; copies 2 and 3 ended truncated with reward 0.
        healthy_next, _ = expected[2]
        for k in ("observation", "reward", "terminated"):
            assert torch.equal(nxt["agent"][k][:2], healthy_next["agent"][k][:2]), k
        assert ended.tolist() == [False, False, True, True]
        assert nxt["agent"]["truncated"][2:].all() and nxt["agent"]["done"][2:].all()
        assert not nxt["agent"]["terminated"][2:].any() and (nxt["agent"]["reward"][2:] == 0).all()
        assert torch.equal(nxt["agent"]["observation"][2:], seen["observation"][2:])  # the last one seen
        # They start over from their seeds, as a fresh reset of copies 2 and 3 would.
        assert torch.equal(env.current["agent"]["observation"][2:], before["agent"]["observation"][2:])
        # And the vector steps on.
        nxt, ended = env.step(ACTIONS)
        assert not ended.any() and torch.isfinite(nxt["agent"]["reward"]).all()
    finally:
        env.close()
        healthy.close()
    del steps


def test_restarts_with_two_phases_in_flight_cut_only_the_restarted_copies(tmp_path):
    """Copy 3 (worker 1, phase 1) hangs while phase 0's step is also in flight at worker 1's other copy."""
    env = faulty_vector("hang", "restart", num_phases=2, once_file=str(tmp_path / "failed"))
    try:
        phases = env.phases()
        for phase in phases:
            phase.reset()
        half = {"agent": torch.ones(2, 2, dtype=torch.int64)}
        for _ in range(2):
            for phase in phases:
                phase.step(half)
        phases[1].step_async(half)  # copy 3 hangs in this step
        phases[0].step_async(half)
        _, ended1 = phases[1].step_wait()
        _, ended0 = phases[0].step_wait()
        assert env.restarts == 1
        # Phase 1 holds copies 2 (worker 0) and 3 (worker 1); phase 0 copies 0 (worker 0) and 1 (worker 1).
        assert ended1.tolist() == [False, True] and ended0.tolist() == [False, True]
        for _ in range(3):
            for phase in phases:
                _, ended = phase.step(half)
                assert not ended.any()
    finally:
        env.close()


def test_a_failure_beyond_max_worker_restarts_stops_the_vector():
    env = faulty_vector("crash", "restart")  # no once_file: the rebuilt copy crashes again at its 3rd step
    pids = [p.pid for p in env.worker_processes]
    try:
        env.reset()
        _step_all(env, 3)  # the first crash: restarted
        assert env.restarts == 1
        pids += [p.pid for p in env.worker_processes]
        with pytest.raises(TrainingFault, match=r"env worker 1 .*seeds \[12, 13\]\) died .*no restart left: "
                           r"env\.max_worker_restarts is 1"):  # fmt: skip
            _step_all(env, 3)
    finally:
        env.close()
    assert all(_gone(pid) for pid in pids)


def test_worker_settings_are_checked():
    for field, value in (("worker_timeout", 0), ("worker_failure", "retry"), ("max_worker_restarts", -1)):
        with pytest.raises(ValueError, match=rf"env\.{field}: expected"):
            PettingZooEnvConfig(**{field: value})


def test_workers_ignore_sigterm_and_exit_when_their_pipe_closes():
    """A scheduler's SIGTERM to the process group must leave stepping to the parent's graceful stop."""
    env = PettingZooEnvConfig(env_fn=FAULTY, env_kwargs={**MATCH, "fault_seeds": []}, num_envs=2, num_workers=2)
    vector = env.make_vector(seed=0)
    processes = vector.worker_processes
    try:
        vector.reset()
        for p in processes:
            os.kill(p.pid, signal.SIGTERM)
        time.sleep(0.5)
        assert all(p.is_alive() for p in processes)
        nxt, _ = vector.step({"agent": torch.zeros(2, 2, dtype=torch.int64)})
        assert np.isfinite(nxt["agent"]["reward"].numpy()).all()
        # The parent goes away without a word (its end of each pipe closes): the workers exit.
        for w in vector._workers:
            w.conn.close()
        assert all(_gone(p.pid) for p in processes)
    finally:
        vector.close()
