"""The two-trainer scenario: two runs, each training one binding, exchanging weights every iteration.

    .venv/bin/python examples/two_trainers.py [extra lightmarl fit overrides ...]

Starts ``recipes/two_trainers/ppo_run.yaml`` and ``dqn_run.yaml`` side by side (each with the
installed ``lightmarl`` console script), waits for both, and exits non-zero if either failed.
Run it from the repository root: the recipes write under ./runs/two_trainers.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "two_trainers"


def lightmarl() -> str:
    script = Path(sys.executable).with_name("lightmarl")
    return str(script) if script.exists() else shutil.which("lightmarl") or "lightmarl"


def main(overrides: list[str]) -> int:
    runs = {
        name: subprocess.Popen([lightmarl(), "fit", "--config", str(RECIPES / f"{name}.yaml"), *overrides])
        for name in ("ppo_run", "dqn_run")
    }
    codes = {name: process.wait() for name, process in runs.items()}
    for name, code in codes.items():
        print(f"{name}: exit code {code}")
    return max(codes.values())


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
