"""The rollout's step path never waits for the host: no tensor read back per step (VMAS on its device).

A rollout of a torch-native env must keep actions, observations and results on the env's device:
one ``.item()`` / ``.cpu()`` / ``bool(tensor)`` per step stalls a GPU until its queue drains. On
CPU, :func:`count_host_reads` counts every such read made from Python while the collector steps
a VMAS vector (the ones VMAS's own code makes are VMAS's, not the collector's); on a GPU the
same path runs under ``torch.cuda.set_sync_debug_mode("error")``, which raises at any
synchronising call.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("vmas")

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import vmas as lightmarl_vmas
from lightmarl.envs.vmas import VmasEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding

#: Python-level tensor calls that read a value back to the host (on a GPU: a synchronisation).
HOST_READS = ("item", "cpu", "numpy", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero")
VMAS_DIR = str(Path(lightmarl_vmas.__file__).parent)  # lightmarl/envs: the adapter itself
STEPS = 6
TANH_NORMAL_FILE = str(Path("torchrl", "modules", "distributions", "continuous.py"))


@contextlib.contextmanager
def count_host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, int]]]:
    """Record ``(call, file, line)`` of every host read made from Python code outside the vmas package.

    Boolean-mask indexing (a ``nonzero`` inside C++) is not seen here: the GPU test catches it.
    ``__getitem__`` is not patched: a Python ``__getitem__`` on ``torch.Tensor``, even removed
    again, leaves tensors looking like sequences to C code for the rest of the process.
    """
    import vmas

    vmas_package = str(Path(vmas.__file__).parent)
    calls: list[tuple[str, str, int]] = []

    def note(name: str) -> None:
        frame = sys._getframe(2)
        if not frame.f_code.co_filename.startswith(vmas_package):  # VMAS's own reads are VMAS's
            calls.append((name, frame.f_code.co_filename, frame.f_lineno))

    with monkeypatch.context() as patch:  # undone on leaving: the test's own checks are not counted
        for name in HOST_READS:
            original = getattr(torch.Tensor, name)

            def read(self, *args, _original=original, _name=name, **kwargs):
                note(_name)
                return _original(self, *args, **kwargs)

            patch.setattr(torch.Tensor, name, read)
        yield calls


class _Keep:
    """A recorder that keeps each step, as the collector's does (no per-step reads of its own)."""

    done = False

    def __init__(self) -> None:
        self.steps: list = []

    def record(self, step) -> None:
        self.steps.append(step)


def _collector(device: str, continuous: bool, num_envs: int = 32) -> RolloutCollector:
    config = VmasEnvConfig(
        scenario="navigation",
        scenario_kwargs={"n_agents": 3},
        num_envs=num_envs,
        max_steps=4,  # episodes end inside the measured steps: the batched reset is on the path
        continuous_actions=continuous,
        device=device,
    )
    vector = config.make_vector(seed=0)
    table = BindingTable([PolicyBinding("main", class_path="lightmarl.policies.MLPActorCritic")], vector.spec)
    policy = MLPActorCritic(vector.spec.groups["agent"], hidden_sizes=(32, 32)).to(device)
    return RolloutCollector(vector, MultiAgentPolicy({"main": policy}, table), rollout_steps=STEPS, device=device)


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_the_vmas_step_path_reads_nothing_back_but_the_count_of_ended_copies(monkeypatch, continuous):
    collector = _collector("cpu", continuous)
    try:
        collector.loop.run(_Keep(), steps=1)  # the first reset and lazy set-up are not the step path
        with count_host_reads(monkeypatch) as calls:
            recorder = _Keep()
            collector.loop.run(recorder, steps=STEPS)
        assert len(recorder.steps) == STEPS
        assert any(step.ended.any() for step in recorder.steps), "no episode ended: the reset path went unmeasured"
        # The one read per step the adapter makes: how many copies ended (reset_copies' count).
        counted = [c for c in calls if c[1] == lightmarl_vmas.__file__ and c[0] == "__int__"]
        # TorchRL's TanhNormal checks its bounds with tensor reads each time it is built (once per step).
        torchrl = [c for c in calls if c[1].endswith(TANH_NORMAL_FILE)]
        assert len(torchrl) == (3 * STEPS if continuous else 0)
        others = [c for c in calls if c not in counted and c not in torchrl]
        assert others == [], f"host reads on the step path: {others}"
        assert len(counted) == STEPS
    finally:
        collector.close()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_rollout_of_vmas_never_synchronises_outside_the_env(monkeypatch):
    """Under ``set_sync_debug_mode("error")`` any synchronising call of the collector raises; VMAS's
    own code (its step's action check reads back; its observations, its reset's spawn loop) and the
    adapter's count of ended copies run outside it.
    Discrete actions: TorchRL's TanhNormal (continuous actions) reads its bounds back when built."""
    collector = _collector("cuda", continuous=False, num_envs=1024)
    env = collector.env._env

    def unchecked(function):
        def run(*args, **kwargs):
            mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode(0)
            try:
                return function(*args, **kwargs)
            finally:
                torch.cuda.set_sync_debug_mode(mode)

        return run

    monkeypatch.setattr(env, "step", unchecked(env.step))
    monkeypatch.setattr(env, "get_from_scenario", unchecked(env.get_from_scenario))  # VMAS's observations
    monkeypatch.setattr(lightmarl_vmas, "reset_copies", unchecked(lightmarl_vmas.reset_copies))
    try:
        collector.loop.run(_Keep(), steps=1)
        torch.cuda.synchronize()
        recorder = _Keep()
        torch.cuda.set_sync_debug_mode("error")
        try:
            collector.loop.run(recorder, steps=STEPS)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert len(recorder.steps) == STEPS
        assert {step.td.get(("agent", "action")).device.type for step in recorder.steps} == {"cuda"}
        assert recorder.steps[-1].next["agent"]["reward"].device.type == "cuda"
        experience = collector.collect()  # the whole rollout (host bookkeeping once per rollout) works on the GPU
        assert experience.get(("next", "agent", "reward")).device.type == "cuda"
        evaluation = VmasEnvConfig(
            scenario="navigation", scenario_kwargs={"n_agents": 3}, num_envs=2, device="cuda"
        ).make_vector(seed=0, evaluation=True)
        assert evaluation.device.type == "cpu" and collector.env.device.type == "cuda"
        evaluation.close()
    finally:
        collector.close()
