"""What the average network's settings buy: one league checkpoint's mixture distilled offline, setting by setting.

The league's shown mixture (its checkpoint's ``mixtures``: snapshots and meta weights) is distilled
with `lightmarl.training.average_network.distill_mixture` into a freshly initialised network of
the player's class, once per ``--explore`` x ``--epochs`` x ``--seeds``, from ``--frames`` frames of
the mixture's play each time; every student's exact exploitability is measured beside the
mixture's, so the gap (student − mixture) is what each setting costs. One checkpoint serves every
row: the mixture is the same, only the distillation changes::

    python benchmarks/average_network_offline.py --recipe recipes/league_leduc_poker.yaml --fit-frames 400000 \\
        --explore 0 0.5 --epochs 4 30 --seeds 0 1 2 --name average_network_offline_leduc

The league run goes to ``runs/average_network_offline/<name>/fit`` (reused when its checkpoint is
there); the result to ``benchmarks/results/<name>.json`` (``docs/results/poker_sota.md`` shows it).
"""

from __future__ import annotations

import argparse
import copy
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import write_result


def fit_league(recipe: str, frames: int, seed: int, run_dir: Path) -> Path:
    """The league checkpoint to distil from: ``run_dir``'s, trained first when it is not there."""
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    if not checkpoint.exists():
        subprocess.run(
            [
                "lightmarl", "fit", "--config", recipe, f"--seed_everything={seed}", f"--model.max_frames={frames}",
                f"--trainer.default_root_dir={run_dir}", "--trainer.enable_progress_bar=false",
                "--trainer.callbacks=[]", "--trainer.max_time=null",
            ],
            check=True,
        )  # fmt: skip
    return checkpoint


def distil(checkpoint: Path, player: str, explore: float, epochs: int, frames: int, seed: int) -> dict[str, float]:
    """One fresh student distilled from the checkpoint's mixture of ``player``; exact exploitabilities."""
    from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
    from lightmarl.evaluation.exploitability import measure, mixture_policy, openspiel_game_of, tabular_policy
    from lightmarl.inference.population import load_population
    from lightmarl.policies.artifact import read_artifact
    from lightmarl.training.average_network import AverageNetworkConfig, distill_mixture

    population, artifact = load_population(checkpoint), read_artifact(checkpoint)
    if player not in artifact.mixtures:
        raise SystemExit(f"{checkpoint}: no league mixture of {player!r} (mixtures: {sorted(artifact.mixtures)})")
    mixture = artifact.mixtures[player]
    snapshots = {s.id for s in artifact.snapshots}
    members = [population.snapshot_policy(m) if m in snapshots else population.bindings[m] for m in mixture]
    weights = list(mixture.values())
    env = PettingZooEnvConfig(env_fn=artifact.env["env_fn"], env_kwargs=artifact.env.get("env_kwargs", {}))
    env.num_envs = 64
    spiel = openspiel_game_of(env)
    group = population.bindings[player].group.name
    target = measure(spiel, mixture_policy(spiel, [tabular_policy(spiel, m, group) for m in members], weights))
    torch.manual_seed(seed)
    student = copy.deepcopy(population.bindings[player]).requires_grad_(True)
    for module in student.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    config = AverageNetworkConfig(player=player, frames=frames, epochs=epochs, explore=explore, seed=seed)
    seats = [[agent] for agent in env.spec().possible_agents]
    started = time.perf_counter()
    found = distill_mixture(student, members, weights, env, seats, config, rollout_steps=16)
    seconds = time.perf_counter() - started
    learned = measure(spiel, tabular_policy(spiel, student.eval(), group)).exploitability
    return {
        "mixture": target.exploitability,
        "student": learned,
        "gap": learned - target.exploitability,
        "members": float(len(members)),
        "kl": found["kl"],
        "rows": found["rows"],
        "distil_s": seconds,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="recipes/league_leduc_poker.yaml")
    parser.add_argument("--fit-frames", type=int, default=400_000, help="frames of the league run distilled from")
    parser.add_argument("--player", default="main")
    parser.add_argument("--frames", type=int, default=60_000, help="frames of the mixture's play per distillation")
    parser.add_argument("--explore", type=float, nargs="+", default=[0.0, 0.5])
    parser.add_argument("--epochs", type=int, nargs="+", default=[4, 30])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--name", default="average_network_offline_leduc")
    args = parser.parse_args(argv)
    checkpoint = fit_league(args.recipe, args.fit_frames, 0, Path("runs/average_network_offline") / args.name / "fit")
    per_seed: dict[str, dict[str, float]] = {}
    for epochs in args.epochs:
        for explore in args.explore:
            for seed in args.seeds:
                found = distil(checkpoint, args.player, explore, epochs, args.frames, seed)
                per_seed[f"explore={explore} epochs={epochs} seed={seed}"] = found
                print(f"explore {explore} epochs {epochs} seed {seed}: {found}", flush=True)
    rows = []
    for epochs in args.epochs:
        for explore in args.explore:
            runs = [per_seed[f"explore={explore} epochs={epochs} seed={s}"] for s in args.seeds]
            gaps = [r["gap"] for r in runs]
            rows.append([
                explore, epochs, len(runs), runs[0]["mixture"], statistics.mean(r["student"] for r in runs),
                statistics.mean(gaps), min(gaps), max(gaps), statistics.mean(r["distil_s"] for r in runs),
            ])  # fmt: skip
    members = int(next(iter(per_seed.values()))["members"])
    command = "python benchmarks/average_network_offline.py " + shlex.join(
        ["--recipe", args.recipe, "--fit-frames", str(args.fit_frames), "--frames", str(args.frames),
         "--explore", *map(str, args.explore), "--epochs", *map(str, args.epochs),
         "--seeds", *map(str, args.seeds), "--name", args.name]
    )  # fmt: skip
    print(
        write_result(
            args.name,
            command=command,
            per_seed=per_seed,
            columns=[
                "explore",
                "epochs",
                "seeds",
                {"name": "mixture", "format": ".3f"},
                {"name": "average network", "format": ".3f"},
                {"name": "average − mixture", "format": "+.3f"},
                {"name": "min", "format": "+.3f"},
                {"name": "max", "format": "+.3f"},
                {"name": "distil s", "format": ".0f"},
            ],
            rows=rows,
            notes=f"One league run ({args.recipe}, {args.fit_frames:,} frames, seed 0): its shown mixture of {members} "
            f"members distilled into a freshly initialised network of the player's class from {args.frames:,} frames "
            "of the mixture's play per row and seed (minibatch 1024, lr 0.001); exact exploitability (OpenSpiel, "
            "NashConv / 2).",
        )
    )


if __name__ == "__main__":
    main()
