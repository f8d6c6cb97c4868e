"""ProcessVecEnv: same trajectories as the in-process vector, errors that name the copy, clean shutdown."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import ParallelVecEnv, PettingZooEnvConfig, ProcessVecEnv
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding

SPREAD = "mpe2.simple_spread_v3.parallel_env"
TAG = "mpe2.simple_tag_v3.parallel_env"
SRC = str(Path(__file__).resolve().parents[2] / "src")

pytestmark = pytest.mark.timeout(60)


def _gone(pid: int) -> bool:
    """The process has exited (and is no zombie of ours)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def _assert_same(a: dict, b: dict, what: str) -> None:
    assert list(a) == list(b), what
    for group in a:
        assert list(a[group]) == list(b[group]), (what, group)
        for key in a[group]:
            assert a[group][key].dtype == b[group][key].dtype, (what, group, key)
            assert torch.equal(a[group][key], b[group][key]), (what, group, key)


@pytest.mark.parametrize(
    "env_fn, kwargs",
    [(SPREAD, {"N": 3, "max_cycles": 5}), (TAG, {"max_cycles": 4})],
    ids=["simple_spread", "simple_tag (2 groups)"],
)
def test_same_trajectories_as_in_process_vector_across_auto_resets(env_fn, kwargs):
    # 5 copies over 2 workers: uneven slices (3 + 2); 12 steps cross two auto-resets.
    config = PettingZooEnvConfig(env_fn=env_fn, env_kwargs=kwargs, num_envs=5)
    local = config.make_vector(seed=11)
    remote = replace(config, num_workers=2).make_vector(seed=11)
    assert isinstance(local, ParallelVecEnv) and isinstance(remote, ProcessVecEnv)
    try:
        assert remote.seeds == local.seeds == [11, 12, 13, 14, 15]
        _assert_same(local.reset(), remote.reset(), "reset")
        gen = torch.Generator().manual_seed(0)
        ended_steps = []
        for step in range(12):
            actions = {
                g.name: torch.randint(0, g.num_actions, (5, g.num_agents), generator=gen)
                for g in local.spec.groups.values()
            }
            (nxt_a, ended_a), (nxt_b, ended_b) = local.step(actions), remote.step(actions)
            _assert_same(nxt_a, nxt_b, f"next at step {step}")
            _assert_same(local.current, remote.current, f"current at step {step}")
            assert torch.equal(ended_a, ended_b)
            if ended_a.any():
                ended_steps.append(step)
            assert (local.observation_td() == remote.observation_td()).all()
        assert len(ended_steps) >= 2  # the comparison went through auto-resets
        # Fresh tensors each step: results already handed out are not overwritten.
        kept = remote.current["agent"]["observation"].clone()
        remote.step(actions)
        assert not torch.equal(kept, remote.current["agent"]["observation"])
        _assert_same(local.reset(), remote.reset(), "second reset (reseeds)")
    finally:
        local.close()
        remote.close()


def test_different_seeds_give_different_trajectories():
    config = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 5}, num_envs=2, num_workers=2)
    with config.make_vector(seed=0) as a, config.make_vector(seed=1) as b:
        assert not torch.equal(a.reset()["agent"]["observation"], b.reset()["agent"]["observation"])


def test_error_in_a_worker_env_names_copy_index_and_seed():
    config = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3}, num_envs=4, num_workers=2)
    env = config.make_vector(seed=10)
    processes = env.worker_processes
    try:
        env.reset()
        actions = torch.zeros(4, 3, dtype=torch.int64)
        actions[3, 1] = 99  # out of Discrete(5): mpe2 asserts, in copy 3 (worker 1)
        with pytest.raises(RuntimeError, match=r"copy 3, seed 13\) raised in step\(\): AssertionError") as info:
            env.step({"agent": actions})
        message = str(info.value)
        assert "action is not in action space" in message and "env worker 1" in message
        assert "Traceback" in str(info.value.__cause__)  # the worker's traceback is chained
        # Every worker's answer was read: the vector goes on (mpe2 needs a reset after a failed step).
        env.reset()
        env.step({"agent": torch.zeros(4, 3, dtype=torch.int64)})
    finally:
        env.close()
    assert _wait_gone([p.pid for p in processes]) == []


def test_constructor_error_in_worker_names_copy_and_seed_and_cleans_up():
    spec = PettingZooEnvConfig(env_fn=SPREAD).spec()
    before = set(mp.active_children())
    with pytest.raises(RuntimeError, match=r"copy 0, seed 5\).*raised TypeError"):
        ProcessVecEnv(SPREAD, {"N": 3, "no_such_kwarg": 1}, spec, seeds=[5, 6], num_workers=2)
    assert set(mp.active_children()) <= before


def test_close_joins_workers_and_is_idempotent():
    before = set(mp.active_children())
    env = PettingZooEnvConfig(env_fn=SPREAD, num_envs=3, num_workers=2).make_vector(seed=0)
    processes = env.worker_processes
    assert len(processes) == 2 and all(p.is_alive() for p in processes)
    assert set(processes) <= set(mp.active_children())
    env.reset()
    env.close()
    env.close()
    assert env.closed and not any(p.is_alive() for p in processes)
    assert set(mp.active_children()) <= before
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_garbage_collection_and_exceptions_in_the_parent_stop_workers():
    config = PettingZooEnvConfig(env_fn=SPREAD, num_envs=2, num_workers=2)
    env = config.make_vector(seed=0)
    pids = [p.pid for p in env.worker_processes]
    del env
    gc.collect()
    assert _wait_gone(pids, 5.0) == []

    with pytest.raises(ZeroDivisionError):
        with config.make_vector(seed=0) as env:
            pids = [p.pid for p in env.worker_processes]
            env.reset()
            _ = 1 / 0
    assert _wait_gone(pids, 5.0) == []


def test_dead_worker_is_detected_not_waited_for():
    env = PettingZooEnvConfig(env_fn=SPREAD, num_envs=4, num_workers=2, overlap=False).make_vector(seed=0)
    processes = env.worker_processes
    env.reset()
    os.kill(processes[1].pid, signal.SIGKILL)
    processes[1].join(5)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"env worker 1 .*copies 2\.\.3.*died \(exit code -9\)"):
        env.step({"agent": torch.zeros(4, 3, dtype=torch.int64)})
    assert time.monotonic() - start < 5
    assert env.closed and not any(p.is_alive() for p in processes)  # the survivors are shut down too
    with pytest.raises(RuntimeError, match="unusable"):
        env.step({"agent": torch.zeros(4, 3, dtype=torch.int64)})


_PARENT = textwrap.dedent(
    """
    import signal, sys, torch
    from lightmarl.envs import PettingZooEnvConfig

    if __name__ == "__main__":
        # As in a terminal: a shell starts background jobs with SIGINT ignored, which Python keeps.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        env = PettingZooEnvConfig(num_envs=4, num_workers=2).make_vector(seed=0)
        env.reset()
        print(*[p.pid for p in env.worker_processes], flush=True)
        while True:
            env.step({"agent": torch.zeros(4, 3, dtype=torch.int64)})
    """
)


@pytest.mark.timeout(180)  # two parents import torch and start workers: slow on a loaded 2-core machine
def test_ctrl_c_or_kill_of_the_parent_leaves_no_orphans(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    parents = {
        sig: subprocess.Popen(
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,  # its own process group, as a shell job gets
        )
        for sig in (signal.SIGINT, signal.SIGKILL)
    }
    workers = {}
    try:
        for sig, parent in parents.items():
            line = parent.stdout.readline() if parent.stdout else ""
            assert line.strip(), parent.communicate()[1] if parent.stderr else ""
            workers[sig] = [int(pid) for pid in line.split()]
            time.sleep(0.2)  # stepping
            if sig == signal.SIGINT:
                os.killpg(parent.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole group
            else:
                parent.kill()  # no chance to clean up: workers see their pipe close
        for sig, parent in parents.items():
            # Waits for the parent and for every process holding its stdout (its workers) to exit.
            _, err = parent.communicate(timeout=60)
            if sig == signal.SIGINT:
                assert parent.returncode != 0 and "KeyboardInterrupt" in err
                assert err.count("Traceback") == 1, err  # the parent's; workers ignore SIGINT
            assert _wait_gone(workers[sig]) == [], f"orphans after {sig.name}"
    finally:
        for parent in parents.values():
            if parent.poll() is None:
                parent.kill()


def test_num_workers_config():
    with pytest.raises(ValueError, match="num_workers"):
        PettingZooEnvConfig(num_envs=2, num_workers=3)
    with pytest.raises(ValueError, match="num_workers"):
        PettingZooEnvConfig(num_workers=-1)
    # A vector of fewer copies (e.g. evaluation) gets at most one worker per copy.
    with PettingZooEnvConfig(env_fn=SPREAD, num_envs=4, num_workers=2).make_vector(seed=0, num_envs=1) as env:
        assert isinstance(env, ProcessVecEnv) and env.num_workers == 1 and env.num_envs == 1


def test_collector_over_workers_gives_the_same_experience():
    # Without overlap the actions are sampled for the whole vector at once, as in-process: the
    # same random stream (tests/data/test_overlap.py covers the overlapped collection).
    config = PettingZooEnvConfig(env_fn=SPREAD, env_kwargs={"N": 3, "max_cycles": 5}, num_envs=4, overlap=False)
    spec = config.spec()
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    population = MultiAgentPolicy({"main": MLPActorCritic(spec.groups["agent"])}, table)
    experience = {}
    for workers in (0, 2):
        collector = RolloutCollector(replace(config, num_workers=workers).make_vector(seed=0), population, 8)
        try:
            torch.manual_seed(123)
            experience[workers] = [collector.collect(), collector.collect()]
            summary = collector.episode_summary()
        finally:
            collector.close()
        assert summary["main"]["episodes"] == 12  # 4 copies x 16 steps / 5-step episodes
    for local, remote in zip(experience[0], experience[2]):
        assert local.batch_size == remote.batch_size == (4, 8)
        assert set(local.keys(True, True)) == set(remote.keys(True, True))
        for key in local.keys(True, True):
            assert local[key].shape == remote[key].shape and local[key].dtype == remote[key].dtype, key
            assert torch.equal(local[key], remote[key]), key


def test_a_worker_process_imports_no_torch():
    """What a worker imports (its entry module, PettingZoo's stepping code, the test envs) stays torch-free:
    importing torch would add about 5 s to every worker's start."""
    from lightmarl.envs.runners.process import PETTINGZOO_SLICE

    code = textwrap.dedent(
        f"""
        import sys
        from lightmarl._imports import import_object
        import lightmarl.envs.runners.worker
        import_object({PETTINGZOO_SLICE!r}, field="make_slice")
        import_object("lightmarl.envs.testing.memory.parallel_env", field="env_fn")
        import_object("lightmarl.envs.MatchTargetEnv", field="env_fn")
        heavy = sorted(m for m in ("torch", "tensordict", "torchrl", "lightning") if m in sys.modules)
        assert not heavy, heavy
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr


THREADS_ENV = '''
import os

from lightmarl.envs.testing.match import MatchTargetEnv


class AffinityEnv(MatchTargetEnv):
    """MatchTarget that draws the CPUs its process may run on."""

    def render(self):
        return sorted(os.sched_getaffinity(0))


class TorchEnv(MatchTargetEnv):
    """MatchTarget that uses torch, as an env simulated with torch would; draws torch's thread count."""

    def __init__(self, **kwargs):
        import torch  # noqa: F401 -- imported by the env, after the worker started

        super().__init__(**kwargs)

    def render(self):
        import torch

        return torch.get_num_threads()
'''


@pytest.mark.slow  # each worker imports torch: seconds per worker
@pytest.mark.timeout(300)
def test_a_worker_whose_env_imports_torch_runs_torch_on_one_thread(tmp_path, monkeypatch):
    # Thread counts set by the user reach the workers (their BLAS follows them), but the workers'
    # torch still runs on one thread: N workers x T threads would oversubscribe the cores.
    (tmp_path / "torch_env.py").write_text(THREADS_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned workers get the parent's sys.path
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # torch would start with 2 threads
        monkeypatch.setenv(name, "2")
    config = PettingZooEnvConfig(env_fn="torch_env.TorchEnv", num_envs=2, num_workers=2)
    with config.make_vector(seed=0) as env:
        assert [env.render(i) for i in range(2)] == [1, 1]


def test_pinned_workers_run_each_on_a_cpu_of_its_own(tmp_path, monkeypatch):
    from lightmarl.envs.runners.placement import worker_cpus

    (tmp_path / "torch_env.py").write_text(THREADS_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = PettingZooEnvConfig(env_fn="torch_env.AffinityEnv", num_envs=4, num_workers=2, pin_workers=True)
    with config.make_vector(seed=0) as env:
        assert env.worker_cpus == worker_cpus(2)
        # Copies 0-1 are worker 0's, 2-3 worker 1's (one phase, or two phases of one copy each).
        assert [env.render(i) for i in (0, 3)] == [[cpu] for cpu in worker_cpus(2)]
        for process, cpu in zip(env.worker_processes, env.worker_cpus, strict=True):
            assert os.sched_getaffinity(process.pid) == {cpu}
    with replace(config, pin_workers=False).make_vector(seed=0) as env:
        assert env.worker_cpus == [None, None]
        assert env.render(0) == sorted(os.sched_getaffinity(0))
    with pytest.raises(TypeError, match=r"env\.pin_workers"):
        replace(config, pin_workers="yes")
