"""Raw speed of one in-process copy of each parallel env family, for scale (``docs/environments.md``).

Each env is one PettingZoo parallel env (``PettingZooEnvConfig.make_one``, the default kwargs
the docs' table lists) stepped by ``collector_speed.raw_runner``: a plain Python loop with
uniformly random actions, reset when ``env.agents`` is empty, no policy and no lightmarl code
in the loop. The envs take turns, 100 steps each, until each has run ``--seconds``
(``collector_speed.interleaved_rates``, so that load from other processes hits them alike);
this is repeated ``--repeats`` times and the best repeat is reported. Envs whose package is
missing are skipped with a note. Run from the repository root with the project's virtualenv::

    python benchmarks/env_speed.py --seconds 3 --repeats 2 --write-result

``--write-result`` writes ``benchmarks/results/env_speed.json`` (the docs' table).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from typing import Any

from collector_speed import Runner, interleaved_rates, load_average, raw_runner

from lightmarl.envs import PettingZooEnvConfig

#: (env_fn, env_kwargs) of each env of the docs' table that has a parallel PettingZoo API;
#: turn-based (AEC) games, OpenSpiel and VMAS are measured elsewhere or not comparable.
ENVS: list[tuple[str, dict[str, Any]]] = [
    ("mpe2.simple_spread_v3.parallel_env", {}),
    ("mpe2.simple_tag_v3.parallel_env", {}),
    ("mpe2.simple_adversary_v3.parallel_env", {}),
    ("pettingzoo.butterfly.knights_archers_zombies_v11.parallel_env", {}),
    ("pettingzoo.butterfly.pistonball_v6.parallel_env", {}),
    ("pettingzoo.butterfly.cooperative_pong_v6.parallel_env", {}),
    ("pettingzoo.sisl.pursuit_v5.parallel_env", {}),
    ("pettingzoo.sisl.multiwalker_v9.parallel_env", {}),
    ("lightmarl.envs.mettagrid.mines_env", {}),
]
STEPS = 100  # env steps in one unit of work


def runners(seed: int) -> tuple[list[Runner], list[str]]:
    """A raw runner per env that can be built here, and a note per env that cannot."""
    built, skipped = [], []
    for env_fn, kwargs in ENVS:
        package = env_fn.split(".", 1)[0]
        if importlib.util.find_spec(package) is None:  # an optional family not installed here
            skipped.append(f"{env_fn} ({package} is not installed)")
            continue
        config = PettingZooEnvConfig(env_fn=env_fn, env_kwargs=kwargs, num_envs=1)
        built.append(raw_runner(1, seed, STEPS, config, env_fn))
    return built, skipped


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds each env runs per repeat")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-result", action="store_true", help="also write benchmarks/results/env_speed.json")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeats < 1:
        parser.error(f"--seconds must be > 0 and --repeats >= 1, got {args.seconds} and {args.repeats}")
    warnings.filterwarnings("ignore")
    before = load_average()
    envs, skipped = runners(args.seed)
    try:
        for runner in envs:
            runner.run()  # warm-up: first resets, lazy imports
        runs = [interleaved_rates(envs, args.seconds) for _ in range(args.repeats)]
    finally:
        for runner in envs:
            runner.close()
    best = {runner.name: max(run[i] for run in runs) for i, runner in enumerate(envs)}
    print(f"load average before {before}, after {load_average()}")
    for name, rate in best.items():
        print(f"{name}: {rate:,.0f} env steps/s")
    for note in skipped:
        print(f"skipped {note}")
    if args.write_result:
        from results import write_result  # benchmarks/results.py, beside this script

        command = " ".join(["python benchmarks/env_speed.py", *(a for a in sys.argv[1:] if a != "--write-result")])
        path = write_result(
            "env_speed",
            command=command,
            per_seed={f"run {k}": {runner.name: run[i] for i, runner in enumerate(envs)} for k, run in enumerate(runs)},
            columns=["env (`env_fn`, default kwargs)", {"name": "raw env steps/s", "format": ",.0f"}],
            rows=[[f"`{name}`", rate] for name, rate in best.items()],
            notes=(
                f"One in-process copy of each env, uniformly random actions, no drawing (`render_mode` unset); "
                f"{args.repeats} interleaved rounds × {args.seconds:g} s per env, the best round."
                + (f" Skipped: {'; '.join(skipped)}." if skipped else "")
            ),
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
