"""Benchmark of :class:`lightmarl.data.rollout_buffer.MultiAgentRolloutBuffer`.

Measures the bytes stored per agent step against the bytes of the step tensors handed in,
``add_batch`` throughput, and the cost of the learning views (``rows``, ``as_tensordict``,
``sequences``). Prints a Markdown table.

    PYTHONPATH=src python benchmarks/rollout_buffer.py
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable

import torch
from tensordict import TensorDict

from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer


def make_steps(
    num_envs: int, n_agents: int, obs_dim: int, steps: int, hidden: int, invalid: float, seed: int
) -> list[TensorDict]:
    """Pre-built steps: episodes of 20..60 steps per env, a fraction of agent rows invalid."""
    g = torch.Generator().manual_seed(seed)
    E, A = num_envs, n_agents
    episode = torch.arange(E)
    next_id = E
    remaining = torch.randint(20, 61, (E,), generator=g)
    out = []
    for _ in range(steps):
        valid = torch.rand(E, A, generator=g) >= invalid
        valid[:, 0] = True  # one agent always acts, so episodes end by done
        done = (remaining == 1).view(E, 1, 1).expand(E, A, 1).clone()
        entries = {
            "observation": torch.randn(E, A, obs_dim, generator=g),
            "action": torch.randint(0, 5, (E, A), generator=g),
            "action_log_prob": torch.randn(E, A, generator=g),
            "state_value": torch.randn(E, A, 1, generator=g),
            "reward": torch.randn(E, A, 1, generator=g),
            "done": done,
            ("next", "observation"): torch.randn(E, A, obs_dim, generator=g),
            ("next", "state_value"): torch.randn(E, A, 1, generator=g),
            "env_index": torch.arange(E).view(E, 1).expand(E, A).clone(),
            "agent_id": torch.arange(A).expand(E, A).clone(),
            "episode_id": episode.view(E, 1).expand(E, A).clone(),
            "binding_id": (torch.arange(A) % 2).expand(E, A).clone(),
            "loss_profile_id": torch.zeros(E, A, dtype=torch.long),
            "is_trainable_agent": torch.ones(E, A, dtype=torch.bool),
            "valid": valid,
        }
        if hidden:
            entries[("extras", "hidden")] = torch.randn(E, A, hidden, generator=g)
        out.append(TensorDict(entries, batch_size=[E, A]))
        remaining -= 1
        ended = remaining == 0
        n_ended = int(ended.sum())
        episode[ended] = torch.arange(next_id, next_id + n_ended)
        next_id += n_ended
        remaining[ended] = torch.randint(20, 61, (n_ended,), generator=g)
    return out


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times)


def raw_row_bytes(step: TensorDict) -> float:
    """Bytes of the tensors handed in, per agent step (annotations and ``valid`` included)."""
    return sum(x.nbytes for x in step.values(include_nested=True, leaves_only=True)) / step.numel()


def run_case(args: argparse.Namespace, hidden: int, invalid: float) -> list[tuple[str, str, str]]:
    E, A = args.num_envs, args.n_agents
    steps = make_steps(E, A, args.obs_dim, args.steps, hidden, invalid, seed=0)
    label = f"obs {args.obs_dim}" + (f", hidden {hidden}" if hidden else "") + f", {invalid:.0%} invalid"
    total_rows = sum(int(s["valid"].sum()) for s in steps)
    results: list[tuple[str, str, str]] = []

    def fill(capacity: int, max_rows: int) -> MultiAgentRolloutBuffer:
        buffer = MultiAgentRolloutBuffer(A, capacity=capacity, max_rows=max_rows)
        for s in steps:
            buffer.add_batch(s)
        return buffer

    # Preallocated to the rollout size (the on-policy case): no growth inside the timing.
    full = E * A * args.steps
    fill(full, full)  # warm-up: first-touch page faults and allocator
    dt = best_of(lambda: fill(full, full), args.repeats)
    rate = f"{total_rows / dt / 1e3:,.0f} k agent-steps/s ({dt / args.steps * 1e6:.0f} µs per add_batch)"
    results.append((label, "add_batch, preallocated", rate))
    dt = best_of(lambda: fill(1024, 1 << 22), args.repeats)
    results.append((label, "add_batch, growing from 1024 rows", f"{total_rows / dt / 1e3:,.0f} k agent-steps/s"))

    raw = raw_row_bytes(steps[0])
    grown, pre = fill(1024, 1 << 22), fill(full, full)
    results.append((label, "raw bytes / agent-step (step tensors)", f"{raw:.0f} B"))
    results.append((label, "stored bytes / row (row layout)", f"{grown.row_nbytes} B ({grown.row_nbytes / raw:.2f}x)"))
    for name, buffer in (("growing", grown), ("preallocated", pre)):
        per_row = buffer.nbytes / len(buffer)
        results.append(
            (
                label,
                f"allocated bytes / stored row ({name})",
                f"{per_row:.0f} B ({per_row / raw:.2f}x; {len(buffer):,} rows in {buffer.capacity:,})",
            )
        )
    views: list[tuple[str, Callable[[], object]]] = [
        ("rows(binding_id=0)", lambda: grown.rows(binding_id=0)),
        ("as_tensordict()", grown.as_tensordict),
        ("sequences(16, burn_in=4)", lambda: grown.sequences(16, burn_in=4)),
        ("sequences(None) (whole episodes)", lambda: grown.sequences(None)),
        ("episode_stats()", grown.episode_stats),
    ]
    for name, fn in views:
        dt = best_of(fn, args.repeats)
        results.append((label, f"{name} on {len(grown):,} rows", f"{dt * 1e3:.1f} ms"))
    return results


def run_single_env_api(args: argparse.Namespace) -> tuple[str, str, str]:
    A = args.n_agents
    buffer = MultiAgentRolloutBuffer(A)
    obs = torch.randn(A, args.obs_dim)
    action, log_prob, reward = torch.zeros(A, dtype=torch.long), torch.zeros(A), torch.ones(A)

    def episode() -> None:
        for t in range(args.steps):
            buffer.add_transition(obs, action, log_prob, reward, obs, [t == args.steps - 1] * A)
        buffer.end_episode()

    dt = best_of(episode, args.repeats)
    return (
        "single-env API (1 env)",
        "add_transition + end_episode",
        f"{args.steps * A / dt / 1e3:,.0f} k agent-steps/s",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--n-agents", type=int, default=3)
    parser.add_argument("--obs-dim", type=int, default=18)
    parser.add_argument("--hidden", type=int, default=64, help="size of the ('extras', 'hidden') entry in one case")
    parser.add_argument("--steps", type=int, default=500, help="env steps per fill")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="cpu: process CPU time, steadier on a shared machine"
    )
    parser.add_argument(
        "--write-result",
        action="store_true",
        help="also write benchmarks/results/rollout_buffer_<clock>.json, which the docs' table is rendered from",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global clock
    clock = CLOCKS[args.clock]
    results = [r for case in ((0, 0.0), (0, 0.2), (args.hidden, 0.0)) for r in run_case(args, *case)]
    results.append(run_single_env_api(args))
    print(
        f"{args.num_envs} envs x {args.n_agents} agents, {args.steps} steps; torch {torch.__version__}, "
        f"{args.threads} thread(s), {args.clock} clock, {platform.processor() or platform.machine()}\n"
    )
    print("| case | measure | value |")
    print("| --- | --- | --- |")
    for case, measure, value in results:
        print(f"| {case} | {measure} | {value} |")
    if args.write_result:
        from results import write_result  # benchmarks/results.py, beside this script

        command = "PYTHONPATH=src python benchmarks/rollout_buffer.py " + " ".join(
            a for a in sys.argv[1:] if a != "--write-result"
        )
        path = write_result(
            f"rollout_buffer_{args.clock}",
            command=command.strip(),
            per_seed={"0": {f"{case} / {measure}": value for case, measure, value in results}},
            columns=["case", "measure", "value"],
            rows=[list(r) for r in results],
            notes=f"{args.num_envs} envs × {args.n_agents} agents, {args.steps} steps, {args.threads} torch thread(s), "
            f"{args.clock} clock, best of {args.repeats}.",
        )
        print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
