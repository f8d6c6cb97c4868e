"""The one module that talks to other processes: no-ops in one process, the right answers on 2 gloo ranks."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from lightning.pytorch.strategies import DDPStrategy

from lightmarl.training import collectives


def test_one_process_needs_no_strategy_and_returns_its_own_values():
    value = torch.tensor([1.0, 2.0])
    assert collectives.world_size(None) == 1 and collectives.rank(None) == 0 and not collectives.distributed(None)
    assert torch.equal(collectives.all_gather(None, value), value.unsqueeze(0))
    assert collectives.all_reduce(None, value, "max") is value
    assert collectives.broadcast(None, {"a": 1}) == {"a": 1}
    assert collectives.all_gather_objects(None, "x") == ["x"]
    with pytest.raises(ValueError, match="op: expected one of"):
        collectives.all_reduce(None, value, "avg")  # type: ignore[arg-type]


class _Strategy(DDPStrategy):
    """Lightning's DDP strategy over a process group made by hand (no Trainer)."""

    def __init__(self, rank: int, world: int) -> None:
        super().__init__(parallel_devices=[torch.device("cpu")] * world)
        self._rank, self._world = rank, world

    @property
    def global_rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world

    @property
    def root_device(self) -> torch.device:
        return torch.device("cpu")


def _worker(rank: int, world: int, port: int, queue: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        strategy = _Strategy(rank, world)
        mine = torch.tensor([float(rank), 10.0 + rank])
        found = {
            "rank": collectives.rank(strategy),
            "gather": collectives.all_gather(strategy, mine).tolist(),
            "sum": collectives.all_reduce(strategy, mine.clone(), "sum").tolist(),
            "mean": collectives.all_reduce(strategy, mine.clone(), "mean").tolist(),
            "min": collectives.all_reduce(strategy, mine.clone(), "min").tolist(),
            "max_int": collectives.all_reduce(strategy, torch.tensor([rank, 5 - rank]), "max").tolist(),
            "broadcast": collectives.broadcast(strategy, f"from {rank}"),
            "objects": collectives.all_gather_objects(strategy, {"rank": rank, "t": torch.arange(rank + 1)}),
        }
        found["objects"] = [(o["rank"], o["t"].tolist()) for o in found["objects"]]
        queue.put(found)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.two_processes
@pytest.mark.timeout(300)
def test_two_gloo_ranks_gather_reduce_and_broadcast():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    processes = [ctx.Process(target=_worker, args=(rank, 2, port, queue)) for rank in range(2)]
    for p in processes:
        p.start()
    results = sorted((queue.get(timeout=240) for _ in processes), key=lambda r: r["rank"])
    for p in processes:
        p.join(timeout=240)
        assert p.exitcode == 0
    for found in results:
        assert found["gather"] == [[0.0, 10.0], [1.0, 11.0]]
        assert found["sum"] == [1.0, 21.0]
        assert found["mean"] == [0.5, 10.5]
        assert found["min"] == [0.0, 10.0]
        assert found["max_int"] == [1, 5]
        assert found["broadcast"] == "from 0"
        assert found["objects"] == [(0, [0]), (1, [0, 1])]
