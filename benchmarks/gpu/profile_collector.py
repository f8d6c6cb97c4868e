"""Where a VMAS rollout's time goes on a device: the step loop, the per-rollout assembly, a rollout buffer.

Builds the collector of ``vmas_speed.py`` (navigation, 3 agents, ``MLPActorCritic`` (64, 64))
at ``--num-envs`` copies on ``--device``, runs one warm-up rollout, then times one rollout in its
parts (each ended with ``torch.cuda.synchronize()`` on a GPU): the step loop (policy, env step,
recording), ``_assemble`` (stacking, episode ids and statistics), and what keeping the rollout in a
``MultiAgentRolloutBuffer`` to trace it would add (``add_rollout``; training keeps none);
the raw VMAS loop (batched reset) over the same number of steps for scale; and a cProfile of a
whole ``collect()`` (top functions by own time). Run from the repository root::

    python benchmarks/gpu/profile_collector.py --device cuda --num-envs 16384 --json /tmp/profile_collector.json

``--json`` writes the result through ``results.write_result`` (the file's stem is its name).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from results import command_line, machine, write_result
from vmas_speed import SCENARIO_KWARGS, gpu_name, make_collector, raw_runner, synchronize

from lightmarl.data.collector import _ExperienceRecorder
from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer
from lightmarl.envs.vmas import VmasEnvConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-envs", type=int, default=16384)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    command = command_line()
    config = VmasEnvConfig(scenario="navigation", scenario_kwargs=SCENARIO_KWARGS, max_steps=100, device=args.device)
    raw = raw_runner(config, args.num_envs, 0, args.steps)
    collector = make_collector(config, args.num_envs, 0, args.steps)
    raw.run()
    collector.collect()  # warm-up
    start = time.perf_counter()
    raw.run()  # ends with a synchronisation on a GPU
    raw_s = time.perf_counter() - start

    synchronize(args.device)
    t0 = time.perf_counter()
    recorder = _ExperienceRecorder(len(collector.loop.lanes), [], collector.table, collector.num_envs, None)
    collector.loop.run(recorder, steps=args.steps)
    synchronize(args.device)
    t1 = time.perf_counter()
    experience = collector._assemble(recorder.steps, recorder.bindings)
    synchronize(args.device)
    t2 = time.perf_counter()
    for group in collector.env.spec.groups.values():
        rows = args.num_envs * args.steps * group.num_agents
        MultiAgentRolloutBuffer(group.num_agents, max_rows=rows).add_rollout(experience, group=group.name)
    synchronize(args.device)
    t3 = time.perf_counter()

    profile = cProfile.Profile()
    profile.enable()
    collector.collect()
    synchronize(args.device)
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(40)
    collector.close()
    numbers = {
        "num_envs": args.num_envs,
        "steps": args.steps,
        "raw_loop_s": raw_s,
        "step_loop_s": t1 - t0,
        "assemble_s": t2 - t1,
        "add_rollout_s": t3 - t2,
        "collect_profile_by_own_time": text.getvalue(),
    }
    print({k: v for k, v in numbers.items() if k != "collect_profile_by_own_time"})
    print(text.getvalue())
    if args.json:
        parts = ["raw_loop_s", "step_loop_s", "assemble_s", "add_rollout_s"]
        write_result(
            Path(args.json).stem,
            command=command,
            per_seed={"run": numbers},
            columns=["part", {"name": "seconds", "format": ".4f"}],
            rows=[[part, numbers[part]] for part in parts],
            notes=f"one rollout of {args.steps} steps at {args.num_envs} copies on {args.device}, in parts",
            directory=Path(args.json).parent,
            measured_on=machine(gpu_name(args.device)),
        )


if __name__ == "__main__":
    main()
