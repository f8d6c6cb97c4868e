"""Collection and training speed on a VMAS scenario (default: navigation, 3 agents, 100-step episodes), one process.

Compares, on the same scenario, seed, number of env copies and ``--device``:

* ``raw``: the VMAS ``Environment`` stepped by a minimal loop with uniform random discrete
  actions drawn on the device; ended copies reset in one call (all of them ended:
  VMAS's batched reset; some: :func:`lightmarl.envs.vmas.reset_copies`) -- the ceiling;
* ``raw + MLP policy``: the same loop with actions sampled from an MLP of the collector policy's
  shape (64, 64, tanh) applied to the stacked observations: the ceiling for any collector that
  acts with that policy (the uniform loop pays no forward pass);
* ``raw-reset-at`` (``--reset-at``): the same loop resetting ended copies one ``reset_at``
  call at a time, as VMAS documents it (what lightmarl did before the batched reset);
* ``adapter``: lightmarl's :class:`~lightmarl.envs.vmas.VmasVecEnv` stepped with random actions;
* ``collector``: :class:`~lightmarl.data.collector.RolloutCollector` over the same vector with an
  ``MLPActorCritic`` policy (hidden sizes 64, 64) on the device, experience TensorDicts included;
* ``fit`` (``--fit``): the whole ``lightmarl fit`` of ``recipes/vmas_navigation.yaml`` with
  discrete actions, the number of copies and the device set here, and a light PPO update
  (``--fit-epochs`` passes of 4 minibatches per rollout): the median logged ``time/fps``
  (frames of an iteration, collection and update, over its wall time).

Interleaved as in ``collector_speed.py`` (one unit of ``--steps`` env steps per path in turn,
``--repeats`` rounds; best round reported, ratios the median of same-round ratios). On a GPU
each unit ends with ``torch.cuda.synchronize()``. Run from the repository root with the
project's virtualenv and the ``vmas`` extra::

    python benchmarks/vmas_speed.py --num-envs 1024 4096 16384 --seconds 8 --json benchmarks/results/vmas_speed_cpu.json
    python benchmarks/vmas_speed.py --device cuda --fit --json benchmarks/results/vmas_speed_h200.json

``--json`` writes the result through ``results.write_result``: the file's stem is the result's
name (the docs' ``<!-- results:NAME -->`` marker), per size and path the runs and ratios as
``per_seed``, the best rates as the table.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from collector_speed import Runner, interleaved_rates
from results import ROOT as REPO
from results import command_line, machine, write_result

from lightmarl.data.collector import RolloutCollector
from lightmarl.envs.vmas import VmasEnvConfig, VmasRandomState, reset_copies
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding

SCENARIO_KWARGS = {"n_agents": 3}


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def raw_runner(config: VmasEnvConfig, num_envs: int, seed: int, steps: int, reset_at: bool = False) -> Runner:
    import vmas

    random_state = VmasRandomState()
    with random_state.active():
        env = vmas.make_env(
            config.scenario,
            num_envs=num_envs,
            device=config.device,
            continuous_actions=False,
            max_steps=config.max_steps,
            seed=seed,
            terminated_truncated=True,
            **config.scenario_kwargs,
        )
        env.reset()
    num_actions = int(env.action_space[0].n)

    def run() -> int:
        with random_state.active():
            for _ in range(steps):
                actions = [torch.randint(num_actions, (num_envs, 1), device=env.device) for _ in env.agents]
                _, _, terminated, truncated, _ = env.step(actions)
                ended = terminated | truncated
                if reset_at:
                    for index in ended.nonzero().flatten().tolist():
                        env.reset_at(index, return_observations=False)
                else:
                    reset_copies(env, ended)
        synchronize(config.device)
        return steps * num_envs

    name = "raw VMAS loop, reset_at per copy" if reset_at else "raw VMAS loop, reset in one call"
    return Runner(name, run, lambda: None)


def raw_policy_runner(config: VmasEnvConfig, num_envs: int, seed: int, steps: int) -> Runner:
    """The raw loop with its actions sampled from an MLP of the collector's policy's shape (64, 64, tanh)
    instead of uniformly: what any collector acting with that policy cannot beat."""
    import vmas

    random_state = VmasRandomState()
    with random_state.active():
        env = vmas.make_env(config.scenario, num_envs=num_envs, device=config.device, continuous_actions=False,
                            max_steps=config.max_steps, seed=seed, terminated_truncated=True, **config.scenario_kwargs)  # fmt: skip
        observations = env.reset()
    num_actions = int(env.action_space[0].n)
    size = observations[0].shape[-1]
    net = torch.nn.Sequential(
        torch.nn.Linear(size, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, num_actions),
    ).to(config.device)  # fmt: skip

    @torch.no_grad()
    def run() -> int:
        nonlocal observations
        with random_state.active():
            for _ in range(steps):
                logits = net(torch.stack(observations, dim=1))  # [copies, agents, actions]
                actions = torch.distributions.Categorical(logits=logits).sample()
                observations, _, terminated, truncated, _ = env.step(list(actions.unsqueeze(-1).unbind(1)))
                ended = terminated | truncated
                if reset_copies(env, ended):
                    observations = env.get_from_scenario(
                        get_observations=True, get_rewards=False, get_infos=False, get_dones=False
                    )[0]
        synchronize(config.device)
        return steps * num_envs

    return Runner("raw VMAS loop + MLP policy, reset in one call", run, lambda: None)


def adapter_runner(config: VmasEnvConfig, num_envs: int, seed: int, steps: int) -> Runner:
    vector = config.make_vector(seed, num_envs=num_envs)
    vector.reset()
    group = vector.spec.groups["agent"]
    device = torch.device(config.device)

    def run() -> int:
        for _ in range(steps):
            vector.step({"agent": torch.randint(group.num_actions, (num_envs, group.num_agents), device=device)})
        synchronize(config.device)
        return steps * num_envs

    return Runner("lightmarl VmasVecEnv", run, vector.close)


def make_collector(config: VmasEnvConfig, num_envs: int, seed: int, steps: int) -> RolloutCollector:
    """The measured collector: an ``MLPActorCritic`` (64, 64) on ``config.device`` over a VMAS vector."""
    vector = config.make_vector(seed, num_envs=num_envs)
    table = BindingTable([PolicyBinding("main", class_path="lightmarl.policies.MLPActorCritic")], vector.spec)
    policy = MLPActorCritic(vector.spec.groups["agent"], hidden_sizes=(64, 64)).to(config.device)
    return RolloutCollector(
        vector, MultiAgentPolicy({"main": policy}, table), rollout_steps=steps, device=config.device
    )


def collector_runner(config: VmasEnvConfig, num_envs: int, seed: int, steps: int) -> Runner:
    collector = make_collector(config, num_envs, seed, steps)

    def run() -> int:
        collector.collect()
        synchronize(config.device)
        return steps * num_envs

    return Runner("lightmarl collector", run, collector.close)


def fit_fps(num_envs: int, device: str, iterations: int, warmup: int, epochs: int, timeout: float) -> dict:
    """``lightmarl fit`` of the navigation recipe with discrete actions at ``num_envs`` copies on ``device``."""
    accelerator = "gpu" if torch.device(device).type == "cuda" else "cpu"
    frames = num_envs * 100
    with tempfile.TemporaryDirectory() as tmp:
        overrides = Path(tmp) / "overrides.yaml"
        overrides.write_text(
            "trainer:\n  enable_progress_bar: false\n  enable_checkpointing: false\n  limit_val_batches: 0\n"
            f"  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n    init_args: {{save_dir: {tmp}}}\n"
        )
        exe = Path(sys.executable).with_name("lightmarl")
        cmd = [
            str(exe) if exe.exists() else "lightmarl", "fit", "--config", str(REPO / "recipes" / "vmas_navigation.yaml"),
            "--config", str(overrides), f"--model.env.num_envs={num_envs}", f"--model.env.device={device}",
            "--model.env.continuous_actions=false", f"--model.max_frames={iterations * frames}",
            f"--model.iterations_per_epoch={iterations}", f"--model.algorithm.init_args.epochs={epochs}",
            f"--model.algorithm.init_args.minibatch_size={frames // 4}",
            f"--trainer.accelerator={accelerator}", "--trainer.devices=1",
        ]  # fmt: skip
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            return {"error": proc.stderr[-3000:], "command": " ".join(cmd)}
        (metrics,) = Path(tmp).rglob("metrics.csv")
        rows = [r for r in csv.DictReader(metrics.open()) if r.get("time/fps")][warmup:]

        def median(key: str) -> float:
            return statistics.median(float(r[key]) for r in rows)

        return {
            "frames_per_s": median("time/fps"),
            "collect_s": median("time/collect_s"),
            "update_s": median("time/update_s"),
            "iterations": len(rows),
            "frames_per_iteration": frames,
            "ppo": f"epochs {epochs}, minibatch {frames // 4}, MLP 256x256 centralized critic",
        }


RAW = "raw VMAS loop, reset in one call"
RAW_POLICY = "raw VMAS loop + MLP policy, reset in one call"
COLUMNS = [
    "envs",
    "path",
    {"name": "env-steps/s", "format": ",.0f"},
    {"name": "× raw", "format": ".2f"},
    {"name": "× raw + policy", "format": ".2f"},
    "runs (env-steps/s, min–max)",
]


def gpu_name(device: str) -> str | None:
    """The GPU's name for a CUDA ``device``; ``None`` on the CPU."""
    dev = torch.device(device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" and torch.cuda.is_available() else None


def result_rows(per_size: dict[str, dict]) -> list[list]:
    """The table of a result's ``per_seed`` (``{"1024": {path: {...}, "fit": {...}}}``): per size
    and path the best round's env-steps/s, the median same-round ratios to the two raw loops
    (``None`` where a run had no such loop) and the spread of the rounds; ``fit`` as frames/s
    (one frame per env step) with the ratio of the best rates."""
    rows = []
    for num_envs, entry in per_size.items():
        for name, numbers in entry.items():
            if name == "fit":
                if "frames_per_s" in numbers:
                    rows.append([int(num_envs), f"whole `lightmarl fit` ({numbers['ppo']})", numbers["frames_per_s"],
                                 numbers.get("ratio_to_raw_best"), None, ""])  # fmt: skip
                continue
            runs = numbers["runs"]
            rows.append([
                int(num_envs), name, numbers["env_steps_per_s_best"], numbers.get("ratio_to_raw_median"),
                numbers.get("ratio_to_raw_with_policy_median"), f"{min(runs):,.0f}–{max(runs):,.0f}",
            ])  # fmt: skip
    return rows


def table(results: dict[int, dict[str, list[float]]], num_agents: int) -> str:
    """Best run per path; ratios: medians over repeats of same-repeat ratios to the two raw loops."""
    lines = [
        "| envs | path | env-steps/s | agent-steps/s | × raw | × raw + policy | runs (env-steps/s, min–max) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for num_envs, rates in results.items():
        raw = rates["raw VMAS loop, reset in one call"]
        with_policy = rates["raw VMAS loop + MLP policy, reset in one call"]
        for name, runs in rates.items():
            best = max(runs)
            ratio = statistics.median(r / w for r, w in zip(runs, raw))
            ratio_policy = statistics.median(r / w for r, w in zip(runs, with_policy))
            lines.append(
                f"| {num_envs} | {name} | {best:,.0f} | {best * num_agents:,.0f} | {ratio:.2f} | {ratio_policy:.2f} "
                f"| {min(runs):,.0f}–{best:,.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenario", default="navigation")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--device", default="cpu", help="where VMAS simulates and the policy runs (cpu, cuda)")
    parser.add_argument("--steps", type=int, default=100, help="env steps per unit of work (100: one episode)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reset-at", action="store_true", help="also measure the loop of per-copy reset_at calls")
    parser.add_argument("--fit", action="store_true", help="also measure the whole `lightmarl fit` (frames/s)")
    parser.add_argument("--fit-iterations", type=int, default=5)
    parser.add_argument("--fit-warmup", type=int, default=1)
    parser.add_argument("--fit-epochs", type=int, default=2)
    parser.add_argument("--fit-timeout", type=float, default=300.0, help="seconds per fit run before it is abandoned")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    command, load_before, gpu = command_line(), [round(x, 2) for x in os.getloadavg()], gpu_name(args.device)
    config = VmasEnvConfig(scenario=args.scenario, scenario_kwargs=SCENARIO_KWARGS, max_steps=100, device=args.device)
    num_agents = len(config.spec().possible_agents)
    results: dict[int, dict[str, list[float]]] = {}
    fits: dict[int, dict] = {}
    for num_envs in args.num_envs:
        makers = [raw_runner, raw_policy_runner, adapter_runner, collector_runner]
        runners = [make(config, num_envs, args.seed, args.steps) for make in makers]
        if args.reset_at:
            runners.insert(1, raw_runner(config, num_envs, args.seed, args.steps, reset_at=True))
        try:
            for runner in runners:
                runner.run()  # warm-up
            runs = [interleaved_rates(runners, args.seconds) for _ in range(args.repeats)]
            results[num_envs] = {r.name: [run[i] for run in runs] for i, r in enumerate(runners)}
        finally:
            for runner in runners:
                runner.close()
        if args.fit:
            fits[num_envs] = fit_fps(
                num_envs, args.device, args.fit_iterations, args.fit_warmup, args.fit_epochs, args.fit_timeout
            )
        print(f"{num_envs} copies done", file=sys.stderr)
        if args.json:  # after every size: a later one that fails or runs out of time keeps these
            per_size = numbers_of(results, fits)
            write_result(
                Path(args.json).stem,
                command=command,
                per_seed=per_size,
                columns=COLUMNS,
                rows=result_rows(per_size),
                notes=notes(args),
                directory=Path(args.json).parent,
                measured_on=machine(gpu),
                extra={"scenario": args.scenario, "scenario_kwargs": SCENARIO_KWARGS, "steps_per_unit": args.steps,
                       "seconds": args.seconds, "repeats": args.repeats, "threads": args.threads,
                       "device": args.device, "load_before": load_before},
            )  # fmt: skip
    print(
        f"VMAS {args.scenario} (n_agents=3, max_steps=100, discrete actions) on {gpu or 'CPU'} "
        f"({args.device}), {args.steps} steps per unit, {args.repeats} interleaved runs × {args.seconds:g} s per "
        f"path, torch threads {args.threads}, {os.cpu_count()} CPUs, torch {torch.__version__}"
    )
    print(f"load average (1/5/15 min): before {load_before}, after {list(os.getloadavg())}")
    print(f"agent-steps/s = env-steps/s × {num_agents}\n")
    print(table(results, num_agents))
    for num_envs, fit in fits.items():
        if "frames_per_s" in fit:
            print(f"\nfit at {num_envs} copies: {fit['frames_per_s']:.0f} frames/s ({fit['ppo']})")
        else:
            print(f"\nfit at {num_envs} copies failed: {fit['error'][-500:]}")


def notes(args: argparse.Namespace) -> str:
    """The line under the table: what was measured and how the figures were reduced."""
    return (
        f"VMAS {args.scenario} (3 agents, 100-step episodes, discrete actions) on {args.device}, "
        f"{args.steps} steps per unit, {args.repeats} interleaved rounds × {args.seconds:g} s per path, "
        f"torch threads {args.threads}: the best round's rate; ratios are medians of same-round ratios "
        "(for `fit`, of the best rates)."
    )


def numbers_of(results: dict[int, dict[str, list[float]]], fits: dict[int, dict]) -> dict[str, dict]:
    """Per number of copies (as a string key) and path: the best rate, every round and the ratios."""
    numbers = {}
    for num_envs, rates in results.items():
        raw = rates[RAW]
        with_policy = rates[RAW_POLICY]
        entry: dict = {}
        for name, runs in rates.items():
            entry[name] = {
                "env_steps_per_s_best": max(runs),
                "runs": runs,
                "ratio_to_raw_median": statistics.median(r / w for r, w in zip(runs, raw)),
                "ratio_to_raw_with_policy_median": statistics.median(r / w for r, w in zip(runs, with_policy)),
            }
        if num_envs in fits:
            entry["fit"] = dict(fits[num_envs])
            if "frames_per_s" in entry["fit"]:
                entry["fit"]["ratio_to_raw_best"] = entry["fit"]["frames_per_s"] / max(raw)
        numbers[str(num_envs)] = entry
    return numbers


if __name__ == "__main__":
    main()
