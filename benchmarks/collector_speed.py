"""Collection speed on mpe2 ``simple_spread_v3`` (N=3, 25-step episodes), in one process and with env workers.

Compares, on the same envs, seeds and number of env copies:

* ``raw``: the PettingZoo parallel envs stepped by a minimal Python loop (uniform random
  actions, reset when ``env.agents`` is empty) -- the ceiling for in-process collection;
* ``lightmarl``: :class:`~lightmarl.data.collector.RolloutCollector` over
  ``PettingZooEnvConfig.make_vector`` with an ``MLPActorCritic`` policy (one binding);
* ``lightmarl, 2 bindings``: the same with agents mapped ``["a", "b", "a"]``, ``b`` a
  ``UniformRandomPolicy`` (the multi-binding gather/scatter path);
* ``lightmarl, W worker processes``: the ``lightmarl`` path with ``num_workers=W`` (default 2):
  the env copies stepped by a :class:`~lightmarl.envs.runners.process.ProcessVecEnv`, the policy in
  this process; ``workers`` with the default settings, ``workers-overlap`` /
  ``workers-no-overlap`` with ``overlap`` forced on / off, ``workers-plain`` without overlap
  and without the workers' spin-wait;
* ``raw, W processes``: the raw loop split over W processes, synchronised once per 25 steps --
  the ceiling for the worker path on this machine at this moment; ``raw-workers-sync``:
  synchronised after every step (a pipe round trip, no data, no policy) -- the ceiling for
  workers that wait for the training process's actions at every step;
* ``torchrl``: TorchRL's ``PettingZooWrapper`` in a ``SerialEnv``, ``rollout()`` with random actions.

The paths take turns, one ``collect()`` / ``rollout()`` each, until each has run
``--seconds``; this is repeated ``--repeats`` times. The best repeat is reported, and the
ratio to raw is the median of same-repeat ratios, so that load from other processes on a
shared machine does not decide the ratios; the worker path is also compared with the
in-process collector the same way. Run from the repository root with the project's virtualenv::

    python benchmarks/collector_speed.py --num-envs 1 16 32 --seconds 5
    python benchmarks/collector_speed.py --num-envs 16 32 --paths raw lightmarl workers raw-workers --workers 2

The result is a Markdown table on stdout (see ``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import resource
import signal
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torchrl.envs import SerialEnv
from torchrl.envs.libs.pettingzoo import PettingZooWrapper

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig, ProcessVecEnv
from lightmarl.policies import MultiAgentPolicy, PolicyRegistry
from lightmarl.population import BindingTable, PolicyBinding

ENV_CONFIG = PettingZooEnvConfig(env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 3, "max_cycles": 25})
ROLLOUT_STEPS = 25  # env steps per env copy in one unit of work (one collect() / rollout())
HIDDEN_SIZES = (64, 64)


@dataclass
class Runner:
    """One way of collecting: ``run()`` does one unit of work and returns the env steps it took."""

    name: str
    run: Callable[[], int]
    close: Callable[[], None]


def raw_runner(
    num_envs: int,
    seed: int,
    steps: int = ROLLOUT_STEPS,
    config: PettingZooEnvConfig | None = None,
    name: str = "raw PettingZoo loop",
) -> Runner:
    """``num_envs`` copies of ``config``'s env stepped in a plain loop with uniformly random actions
    (``Discrete`` or ``Box``): the speed lightmarl's vectors are compared with."""
    config = ENV_CONFIG if config is None else config
    envs = [config.make_one() for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    space = envs[0].action_space(envs[0].possible_agents[0])
    rng = np.random.default_rng(seed)

    def random_actions(count: int) -> list:
        if hasattr(space, "n"):
            return rng.integers(int(space.n), size=count).tolist()
        return list(rng.uniform(space.low, space.high, size=(count, *space.shape)).astype(space.dtype))

    def run() -> int:
        for _ in range(steps):
            for env in envs:
                if not env.agents:
                    env.reset()
                agents = env.agents
                env.step(dict(zip(agents, random_actions(len(agents)))))
        return steps * num_envs

    def close() -> None:
        for env in envs:
            env.close()

    return Runner(name, run, close)


def _raw_loop_process(conn, num_envs: int, seed: int, steps: int, config: PettingZooEnvConfig) -> None:
    """One process of ``raw_processes_runner``: ``steps`` raw steps of its envs on every ``"go"``;
    between commands it polls for 10 ms before sleeping, as lightmarl's workers do."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    runner = raw_runner(num_envs, seed, steps, config)
    conn.send("ready")
    while True:
        spin_until = time.perf_counter() + 0.01
        while time.perf_counter() < spin_until and not conn.poll(0):
            os.sched_yield()
        if conn.recv() != "go":
            break
        conn.send(runner.run())
    runner.close()


def raw_processes_runner(num_envs: int, seed: int, processes: int, every_step: bool = False) -> Runner:
    """The raw loop split over ``processes`` processes (copy ``i`` seeded ``seed + i`` as above),
    synchronised once per unit of work: the ceiling for collection with env workers; with
    ``every_step``, synchronised after every env step (a round trip per step, no policy, no data):
    the ceiling for workers that wait for the training process's actions at every step."""
    ctx = mp.get_context("spawn")
    sizes = [num_envs // processes + (k < num_envs % processes) for k in range(processes)]
    conns, procs, start = [], [], 0
    for size in sizes:
        parent, child = ctx.Pipe()
        steps = 1 if every_step else ROLLOUT_STEPS
        proc = ctx.Process(target=_raw_loop_process, args=(child, size, seed + start, steps, ENV_CONFIG), daemon=True)
        proc.start()
        child.close()
        conns.append(parent)
        procs.append(proc)
        start += size
    for conn in conns:
        assert conn.recv() == "ready"

    def run() -> int:
        done = 0
        for _ in range(ROLLOUT_STEPS if every_step else 1):
            for conn in conns:
                conn.send("go")
            done += sum(conn.recv() for conn in conns)
        return done

    def close() -> None:
        for conn in conns:
            conn.send("stop")
        for proc in procs:
            proc.join(10)

    sync = "synchronised every step" if every_step else "synchronised every 25 steps"
    return Runner(f"raw PettingZoo loop, {processes} processes, {sync}", run, close)


def collector_runner(
    num_envs: int, seed: int, two_bindings: bool, num_workers: int = 0, mode: str = "default"
) -> Runner:
    """``mode`` (worker processes only): ``default`` settings, ``overlap`` forced on or ``no-overlap``
    forced off, ``plain``: no overlap and no spin-wait (workers sleep between commands), or
    ``pinned``: default settings with each worker pinned to a CPU (``env.pin_workers``)."""
    overlap = {"overlap": True, "no-overlap": False}.get(mode)
    config = replace(
        ENV_CONFIG, num_envs=num_envs, num_workers=num_workers, overlap=overlap, pin_workers=mode == "pinned"
    )
    if num_workers and mode == "plain":
        seeds = [seed + i for i in range(num_envs)]
        vec: Any = ProcessVecEnv(config.env_fn, config.env_kwargs, config.spec(), seeds, num_workers, spin_wait=0.0)
    else:
        vec = config.make_vector(seed, num_envs=num_envs)
    mlp = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": HIDDEN_SIZES}}
    if two_bindings:
        bindings = [
            PolicyBinding(id="a", **mlp),
            PolicyBinding(id="b", class_path="lightmarl.policies.UniformRandomPolicy", policy_kwargs={"seed": seed}),
        ]
        table = BindingTable(bindings, vec.spec, agent_binding_map=["a", "b", "a"])
        name = "lightmarl collector, 2 bindings"
    else:
        table = BindingTable([PolicyBinding(id="main", **mlp)], vec.spec)
        name = "lightmarl collector"
        if num_workers:
            phases = "overlap" if vec.num_phases == 2 else "no overlap"
            spin = "no spin-wait" if mode == "plain" else "spin-wait"
            pinned = ", pinned" if mode == "pinned" else ""
            name += (
                f", {num_workers} worker processes ({phases}, {spin}{pinned}{', default' if mode == 'default' else ''})"
            )
    registry = PolicyRegistry()
    policies = {b: registry.get(table.binding(b), vec.spec.groups[table.group_of_binding[b]]) for b in table.active_ids}
    collector = RolloutCollector(vec, MultiAgentPolicy(policies, table), rollout_steps=ROLLOUT_STEPS)

    def run() -> int:
        collector.collect()
        return ROLLOUT_STEPS * num_envs

    return Runner(name, run, collector.close)


def torchrl_runner(num_envs: int, seed: int) -> Runner:
    def make() -> PettingZooWrapper:
        return PettingZooWrapper(ENV_CONFIG.make_one(), return_state=False, use_mask=False, categorical_actions=True)

    env = SerialEnv(num_envs, make)
    env.set_seed(seed)

    def run() -> int:
        # Episodes last exactly ROLLOUT_STEPS, so each rollout is one reset + one episode per copy.
        env.rollout(ROLLOUT_STEPS, break_when_any_done=False)
        return ROLLOUT_STEPS * num_envs

    def close() -> None:
        threads = torch.get_num_threads()
        env.close()  # BatchedEnvBase.close() adds num_workers torch threads, even for a SerialEnv
        torch.set_num_threads(threads)

    return Runner("TorchRL PettingZooWrapper + SerialEnv", run, close)


def interleaved_rates(runners: list[Runner], seconds: float) -> list[float]:
    """Env-steps/s of each runner, timing one unit of work of each in turn until each has run ``seconds``.

    Round-robin at the granularity of one ``collect()`` / ``rollout()`` spreads load from
    other processes evenly over the runners, so their ratios stay meaningful.
    """
    steps = [0] * len(runners)
    elapsed = [0.0] * len(runners)
    while min(elapsed) < seconds:
        for i, runner in enumerate(runners):
            if elapsed[i] < seconds:
                start = time.perf_counter()
                steps[i] += runner.run()
                elapsed[i] += time.perf_counter() - start
    return [s / t for s, t in zip(steps, elapsed)]


PATHS = (
    "raw",
    "lightmarl",
    "bindings",
    "workers",
    "workers-overlap",
    "workers-no-overlap",
    "workers-plain",
    "raw-workers",
    "raw-workers-sync",
    "torchrl",
)
WORKER_PATHS = tuple(p for p in PATHS if "workers" in p)


def benchmark(
    num_envs: int, seed: int, seconds: float, repeats: int, paths: tuple[str, ...] = PATHS, workers: int = 2
) -> dict[str, list[float]]:
    """Env-steps/s of every runner (raw first), one entry per repeat."""
    makers: dict[str, Callable[[], Runner]] = {
        "raw": lambda: raw_runner(num_envs, seed),
        "lightmarl": lambda: collector_runner(num_envs, seed, two_bindings=False),
        "bindings": lambda: collector_runner(num_envs, seed, two_bindings=True),
        "workers": lambda: collector_runner(num_envs, seed, False, min(workers, num_envs)),
        "workers-overlap": lambda: collector_runner(num_envs, seed, False, min(workers, num_envs), "overlap"),
        "workers-no-overlap": lambda: collector_runner(num_envs, seed, False, min(workers, num_envs), "no-overlap"),
        "workers-plain": lambda: collector_runner(num_envs, seed, False, min(workers, num_envs), "plain"),
        "raw-workers": lambda: raw_processes_runner(num_envs, seed, min(workers, num_envs)),
        "raw-workers-sync": lambda: raw_processes_runner(num_envs, seed, min(workers, num_envs), every_step=True),
        "torchrl": lambda: torchrl_runner(num_envs, seed),
    }
    runners: list[Runner] = []
    try:
        for path in ("raw", *(p for p in PATHS if p in paths and p != "raw")):
            if path not in WORKER_PATHS or workers > 0:
                runners.append(makers[path]())
        for runner in runners:
            runner.run()  # warm-up: first reset, lazy imports, allocator
        runs = [interleaved_rates(runners, seconds) for _ in range(repeats)]
        return {runner.name: [run[i] for run in runs] for i, runner in enumerate(runners)}
    finally:
        for runner in runners:
            runner.close()


def markdown_table(results: dict[int, dict[str, list[float]]], num_agents: int) -> str:
    """Best run per runner; the ratio to raw is the median over repeats of same-repeat ratios."""
    lines = [
        "| envs | path | env-steps/s | agent-steps/s | × raw | runs (env-steps/s, min–max) |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for num_envs, rates in results.items():
        raw = next(iter(rates.values()))
        for name, runs in rates.items():
            best = max(runs)
            ratio = statistics.median(r / base for r, base in zip(runs, raw))
            lines.append(
                f"| {num_envs} | {name} | {best:,.0f} | {best * num_agents:,.0f} | {ratio:.2f} "
                f"| {min(runs):,.0f}–{best:,.0f} |"
            )
    return "\n".join(lines)


def worker_table(results: dict[int, dict[str, list[float]]]) -> str:
    """The worker path against the in-process collector: median of same-repeat ratios."""
    lines = [
        "| envs | path | × in-process collector (median) | per run |",
        "| ---: | --- | ---: | ---: |",
    ]
    for num_envs, rates in results.items():
        base = rates.get("lightmarl collector")
        for name, runs in rates.items():
            if base is None or "worker processes" not in name:
                continue
            ratios = [r / b for r, b in zip(runs, base)]
            per_run = ", ".join(f"{r:.2f}" for r in ratios)
            lines.append(f"| {num_envs} | {name} | {statistics.median(ratios):.2f} | {per_run} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds used by the whole machine, by this process and its descendants) so far (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    machine = (sum(fields[:8]) - fields[3] - fields[4]) / tick  # all but idle and iowait
    parents, times = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(stat[1])
            times[int(entry)] = (int(stat[11]) + int(stat[12])) / tick
    ours, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid and c not in ours]
        ours.update(children)
        frontier += children
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return machine, sum(times.get(p, 0.0) for p in ours) + reaped.ru_utime + reaped.ru_stime


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 16, 32], help="env copies per measurement")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds each path runs per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per path; the best is reported")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--paths", nargs="+", choices=PATHS, default=list(PATHS), help="paths to measure (raw always runs)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the 'workers' path (0: skip it)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
    torch.set_num_threads(args.threads)
    num_agents = len(ENV_CONFIG.spec().possible_agents)
    load_before = load_average()
    machine_before, ours_before = cpu_seconds()
    wall_before = time.perf_counter()
    paths = tuple(args.paths)
    results = {e: benchmark(e, args.seed, args.seconds, args.repeats, paths, args.workers) for e in args.num_envs}
    print(
        f"mpe2 simple_spread_v3 (N=3, max_cycles=25), {ROLLOUT_STEPS} steps per collect()/rollout(), "
        f"{args.repeats} interleaved runs × {args.seconds:g} s per path, torch threads {args.threads}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"
    )
    machine_after, ours_after = cpu_seconds()
    wall = time.perf_counter() - wall_before
    others = max(0.0, (machine_after - machine_before) - (ours_after - ours_before)) / wall
    print(f"load average (1/5/15 min): before {load_before}, after {load_average()}")
    print(
        f"CPU used during the run: this benchmark {(ours_after - ours_before) / wall:.2f} cores, "
        f"other processes {others:.2f} cores (of {os.cpu_count()})"
    )
    print(f"agent-steps/s = env-steps/s × {num_agents} (every agent acts at every step of simple_spread)\n")
    print(markdown_table(results, num_agents))
    workers = worker_table(results)
    if workers:
        print(f"\n{workers}")


if __name__ == "__main__":
    main()
