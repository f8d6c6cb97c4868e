"""What the league's exchanges between DDP processes cost: a league recipe on 2 CPU processes (gloo), two source trees.

Runs ``lightmarl fit --config <recipe>`` with ``--trainer.strategy ddp --trainer.devices 2`` on
CPU for ``--iterations`` iterations, once with the sources of ``--before`` (a checkout of another
commit, e.g. ``git worktree add /tmp/before <commit>``) and once with this repository's, for
``--rounds`` rounds, alternately, so that load from other processes on a shared machine hits both
alike. The league's exchanges between processes happen while the envs are stepped (``collect``)
or between iterations, so the figures are rank 0's logged ``time/collect_s``, ``time/update_s``
and ``time/fps`` from ``metrics.csv`` (median over the iterations after ``--warmup``), and the
ratios after / before per round. Run from the repository root with the project's virtualenv::

    git worktree add /tmp/before <commit>
    python benchmarks/ddp_league.py --before /tmp/before
    python benchmarks/ddp_league.py --before /tmp/before --recipe recipes/league_rps.yaml \\
        --model.env.num_envs=16 --model.rollout_steps=32

The result is a Markdown table on stdout; ``--write-result`` also writes
``benchmarks/results/<--name>.json`` (shown in ``docs/results/speed.md``, "The league under DDP").
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ddp_speed import frames_per_process, logged_medians

REPO = Path(__file__).resolve().parents[1]
DEFAULT_EXTRA = [
    "--model.env.num_envs=8",
    "--model.rollout_steps=64",
    "--model.algorithm.init_args.epochs=1",
]


@dataclass
class Run:
    code: str  # "before" or "after"
    fps: float
    collect_s: float
    update_s: float
    wall_s: float
    cpu_s: float  # CPU time of the run, start-up included, as getrusage(RUSAGE_CHILDREN) counts it (the launching
    # rank, and rank 1 where the launcher reaped it); load hardly moves it
    load: float


def _lightmarl() -> str:
    exe = Path(sys.executable).with_name("lightmarl")
    return str(exe) if exe.exists() else (shutil.which("lightmarl") or "lightmarl")


def fit(code: str, source: Path, recipe: Path, iterations: int, warmup: int, extra: list[str]) -> Run:
    """One 2-process fit with ``source``'s ``src/`` and ``examples/`` first on the path."""
    with tempfile.TemporaryDirectory() as tmp:
        overrides = Path(tmp) / "overrides.yaml"
        overrides.write_text(
            "trainer:\n  enable_progress_bar: false\n  enable_checkpointing: false\n  limit_val_batches: 0\n"
            "  max_time: null\n  callbacks: []\n"
            f"  logger:\n    class_path: lightning.pytorch.loggers.CSVLogger\n    init_args: {{save_dir: {tmp}}}\n"
        )
        cmd = [
            _lightmarl(), "fit", "--config", str(recipe), "--config", str(overrides),
            "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu", "--trainer.devices", "2",
            f"--model.iterations_per_epoch={iterations}", *extra,
            f"--model.max_frames={iterations * 2 * frames_per_process(recipe, extra)}",
        ]  # fmt: skip
        path = os.pathsep.join([str(source / "src"), str(source / "examples"), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
        load = os.getloadavg()[0]
        started, cpu = time.monotonic(), _children_cpu()
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall, cpu = time.monotonic() - started, _children_cpu() - cpu
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
        fps, collect_s, update_s = logged_medians(Path(tmp), warmup)
        return Run(code, fps, collect_s, update_s, wall, cpu, load)


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (and theirs: the DDP ranks)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", type=Path, required=True, help="root of the other source tree (a git worktree)")
    parser.add_argument("--recipe", type=Path, default=REPO / "recipes" / "league_connect_four.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=6, help="iterations per run")
    parser.add_argument("--warmup", type=int, default=1, help="first iterations left out of the median")
    parser.add_argument("--write-result", action="store_true", help="also write benchmarks/results/<name>.json")
    parser.add_argument("--name", default="ddp_league", help="the result's name (default: ddp_league)")
    parser.epilog = f"Other arguments are `lightmarl fit` overrides (default: {' '.join(DEFAULT_EXTRA)})."
    args, extra = parser.parse_known_args()
    extra = extra or DEFAULT_EXTRA
    before_commit = subprocess.run(
        ["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    # Each tree runs its own copy of the recipe: a recipe's keys move with the code that reads them.
    before_recipe = args.recipe
    if args.recipe.resolve().is_relative_to(REPO) and (args.before / args.recipe.resolve().relative_to(REPO)).exists():
        before_recipe = args.before.resolve() / args.recipe.resolve().relative_to(REPO)
    runs: list[tuple[Run, Run]] = []
    for _ in range(args.rounds):
        before = fit("before", args.before.resolve(), before_recipe, args.iterations, args.warmup, extra)
        after = fit("after", REPO, args.recipe, args.iterations, args.warmup, extra)
        runs.append((before, after))
        print(
            f"round {len(runs)}: collect s/it {before.collect_s:.3f} before, {after.collect_s:.3f} after; "
            f"frames/s {before.fps:.0f} before, {after.fps:.0f} after",
            file=sys.stderr,
        )
    recipe = args.recipe.relative_to(REPO) if args.recipe.is_relative_to(REPO) else args.recipe
    per_seed = {f"round {i}": {run.code: dataclasses.asdict(run) for run in pair} for i, pair in enumerate(runs, 1)}
    rows = result_rows(per_seed)
    print(f"`{recipe}` {' '.join(extra)}, 2 processes (gloo), {args.iterations} iterations per run")
    print(f"before: {args.before} at {before_commit}; after: this tree")
    for row in rows:
        print("| " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c) for c in row) + " |")
    print(summary(per_seed))
    if args.write_result:
        from results import write_result  # benchmarks/results.py, beside this script

        # The other tree's path is this machine's: the command names it $BEFORE (a checkout of before_commit).
        argv = [a for a in sys.argv[1:] if a != "--write-result"]
        argv = ["$BEFORE" if a == str(args.before) else a.replace(f"={args.before}", "=$BEFORE") for a in argv]
        write_result(
            args.name,
            command=f"git worktree add $BEFORE {before_commit} && python benchmarks/ddp_league.py {' '.join(argv)}",
            per_seed=per_seed,
            columns=COLUMNS,
            rows=rows,
            notes=f"`{recipe}` {' '.join(extra)}; before: commit {before_commit}; {summary(per_seed)}",
            extra={"before_commit": before_commit, "iterations": args.iterations, "warmup": args.warmup},
        )


COLUMNS = [
    "round", "code", {"name": "frames/s", "format": ",.0f"}, {"name": "collect s / it", "format": ".3f"},
    {"name": "update s / it", "format": ".3f"}, {"name": "load (1 min)", "format": ".1f"},
    {"name": "CPU s, run", "format": ".0f"}, {"name": "after / before, collect s", "format": ".2f"},
    {"name": "after / before, CPU s", "format": ".2f"},
]  # fmt: skip


def result_rows(per_seed: dict[str, dict[str, dict[str, float]]]) -> list[list[object]]:
    """The table: per round, the run with the other tree's code and this one's, then the ratios."""
    rows: list[list[object]] = []
    for name, pair in per_seed.items():
        before, after = pair["before"], pair["after"]
        for code, run in (("before", before), ("after", after)):
            ratios: list[object] = ["", ""]
            if code == "after":
                ratios = [after["collect_s"] / before["collect_s"], after["cpu_s"] / before["cpu_s"]]
            rows.append([name.removeprefix("round "), code, run["fps"], run["collect_s"], run["update_s"], run["load"],
                         run["cpu_s"], *ratios])  # fmt: skip
    return rows


def summary(per_seed: dict[str, dict[str, dict[str, float]]]) -> str:
    """The median ratios after / before over the rounds."""
    pairs = list(per_seed.values())
    ratio = {
        key: statistics.median(p["after"][key] / p["before"][key] for p in pairs)
        for key in ("collect_s", "cpu_s", "fps")
    }
    return (
        f"median after / before: collect s {ratio['collect_s']:.2f}x, CPU s {ratio['cpu_s']:.2f}x, "
        f"frames/s {ratio['fps']:.2f}x"
    )


if __name__ == "__main__":
    main()
