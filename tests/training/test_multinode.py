"""Two "nodes" of one process each give exactly the 2-process single-node run; and under
DDP a NaN seen by one rank only makes every rank skip that binding's update (docs/errors.md, "Faults during a run").

The run: ``red`` (agent_0) and ``blue`` (agent_1) learn with PPO in ``FaultyMatchEnv``, whose copies
on rank 1 (reset seeds 4..7) pay ``red`` NaN rewards. Rank 0's ``red`` losses are finite, so only
the agreement (``GradientStepper.agree_min``) keeps it from stepping while rank 1 skips; the
epoch-end ``assert_ranks_in_sync`` fails the run if the ranks' weights differ by one bit.

The multi-node launch is the documented one (docs/howto/production.md, "Several machines"): each node runs
``lightmarl fit ... --trainer.num_nodes 2 --trainer.devices 1`` with ``MASTER_ADDR``,
``MASTER_PORT``, ``WORLD_SIZE`` and its own ``NODE_RANK``; here both "nodes" are processes of this
machine talking over gloo on 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from test_ddp import _lightmarl

pytestmark = pytest.mark.two_processes  # xdist workers run one such test at a time (tests/worker_lock.py)

ITERATIONS, WORLD = 4, 2
EPOCHS, MINIBATCHES = 2, 2
RECIPE = {
    "seed_everything": 0,
    "model": {
        "env": {
            "env_fn": "lightmarl.envs.testing.faults.FaultyMatchEnv",
            "env_kwargs": {"fault": "nan_reward", "fault_agents": ["agent_0"], "fault_seeds": [4, 5, 6, 7],
                           "nvec": [3], "action_mask": False},
            "num_envs": 4,
        },
        "policy_bindings": [
            {"id": b, "class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"critic": "local"}}
            for b in ("red", "blue")
        ],
        "agent_binding_map": ["red", "blue"],
        "algorithm": {"class_path": "lightmarl.algorithms.PPO",
                      "init_args": {"epochs": EPOCHS, "minibatch_size": 20}},
        "rollout_steps": 10,
        "max_frames": ITERATIONS * 4 * 10 * WORLD,
        "iterations_per_epoch": 2,
    },
    "evaluation": {"validation": {"episodes": 2}},
    "trainer": {"enable_progress_bar": False, "strategy": "ddp", "accelerator": "cpu"},
}  # fmt: skip
#: torchrun / Lightning variables a test process may have inherited; each launch sets its own.
LAUNCH_VARS = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and k != "PL_GLOBAL_SEED"}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fit(cwd: Path, *args: str) -> list[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "recipe.yaml").write_text(yaml.safe_dump(RECIPE))
    return [_lightmarl(), "fit", "--config", str(cwd / "recipe.yaml"), *args]


def _checkpoint(cwd: Path) -> dict:
    (last,) = cwd.rglob("last.ckpt")
    return torch.load(last, map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def single_node(tmp_path_factory) -> tuple[dict, str]:
    cwd = tmp_path_factory.mktemp("single_node")
    cmd = _fit(cwd, "--trainer.devices", str(WORLD))
    run = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=280)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    return _checkpoint(cwd), log


def _assert_synced_and_red_skipped(ckpt: dict, log: str) -> None:
    for iteration in (2, 4):
        assert f"{WORLD} ranks in sync at iteration {iteration} (max |param - rank 0's| = 0)" in log, log[-3000:]
    red, blue = ckpt["optimizer_states"]
    assert not red["state"], "red took an optimizer step on some rank"
    assert {int(s["step"]) for s in blue["state"].values()} == {ITERATIONS * EPOCHS * MINIBATCHES}
    assert ckpt["lightmarl"]["population"]["counters"]["iterations"] == ITERATIONS


@pytest.mark.timeout(300)
def test_a_nan_on_one_rank_makes_every_rank_skip_the_binding(single_node):
    ckpt, log = single_node
    _assert_synced_and_red_skipped(ckpt, log)
    # Rank 1 saw the NaN; rank 0 skipped because rank 1 did (its own losses were finite).
    assert "binding 'red': non-finite loss (loss_objective = nan" in log
    assert "binding 'red': non-finite loss (a loss on another process)" in log
    assert "binding 'blue': non-finite" not in log


@pytest.mark.timeout(300)
def test_two_nodes_of_one_process_equal_one_node_of_two(single_node, tmp_path):
    port = str(_free_port())
    nodes = []
    for node_rank in range(WORLD):
        cwd = tmp_path / f"node{node_rank}"
        cmd = _fit(cwd, "--trainer.num_nodes", str(WORLD), "--trainer.devices", "1")
        env = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=str(WORLD), NODE_RANK=str(node_rank))
        nodes.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))  # fmt: skip
    logs = []
    try:
        for node in nodes:
            out, _ = node.communicate(timeout=280)
            logs.append(out)
            assert node.returncode == 0, out[-6000:]
    finally:
        for node in nodes:
            node.kill()
    log = "\n".join(logs)
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in log, log[-3000:]
    ckpt = _checkpoint(tmp_path / "node0")  # rank 0 writes the checkpoints
    _assert_synced_and_red_skipped(ckpt, log)
    expected, _ = single_node
    assert ckpt["state_dict"].keys() == expected["state_dict"].keys()
    for name, value in expected["state_dict"].items():
        assert torch.equal(ckpt["state_dict"][name], value), name
    assert (
        ckpt["lightmarl"]["population"]["counters"]["frames"]
        == expected["lightmarl"]["population"]["counters"]["frames"]
    )
