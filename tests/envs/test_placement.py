"""Where pinned env workers run: one hardware thread of every physical core before any second one."""

from __future__ import annotations

from lightmarl.envs.runners.placement import cpu_order, worker_cpus


def test_one_thread_of_each_core_comes_before_the_second_threads():
    # Linux's usual numbering on 4 cores x 2 threads: cpu k and cpu k + 4 share core k.
    paired = {cpu: (0, cpu % 4) for cpu in range(8)}
    assert cpu_order(range(8), paired.get) == [0, 1, 2, 3, 4, 5, 6, 7]
    # Siblings numbered next to each other (cpu 2k and 2k + 1 share core k).
    adjacent = {cpu: (0, cpu // 2) for cpu in range(8)}
    assert cpu_order(range(8), adjacent.get) == [0, 2, 4, 6, 1, 3, 5, 7]
    # Two packages with the same core ids are different cores; only the CPUs given are used.
    sockets = {cpu: (cpu // 4, (cpu % 4) // 2) for cpu in range(8)}
    assert cpu_order([1, 2, 3, 5, 6], sockets.get) == [1, 2, 5, 6, 3]
    # Unknown topology: each CPU is a core of its own, in CPU order.
    assert cpu_order({3, 1, 2}, lambda cpu: None) == [1, 2, 3]


def test_workers_take_cpus_in_that_order_and_round_again_past_the_last():
    assert worker_cpus(3, [5]) == [5, 5, 5]
    order = cpu_order([0, 1, 2])
    assert worker_cpus(4, [0, 1, 2]) == [*order, order[0]]
