#!/usr/bin/env python3
"""Keep only what a checkpoint's policies need to load: their weights and the saved population.

    python scripts/slim_checkpoint.py runs/quickstart/checkpoints/last.ckpt assets/checkpoints/x.ckpt

The result holds Lightning's ``state_dict`` entries of the policies (``population.policies.*``) and
the ``lightmarl`` entry's ``population`` (the description ``lightmarl.policies.artifact`` reads:
bindings, groups, transforms with their statistics, agent map, counters): no optimizer, loop,
trainer, league or resume state. It loads as ``policy_uri: x.ckpt#binding``, with
``lightmarl.load_population`` and ``lightmarl export``, and with ``lightmarl validate --ckpt_path``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from lightmarl.policies.artifact import CHECKPOINT_KEY, CHECKPOINT_PREFIX, POPULATION_KEY, read_artifact


def slim(source: Path, out: Path) -> None:
    """Write ``source``'s policy weights and population description to ``out``.

    Args:
        source: a lightmarl training checkpoint.
        out: the file to write.
    """
    read_artifact(source, field="slim_checkpoint")  # refuses anything but a lightmarl checkpoint
    saved = torch.load(source, map_location="cpu", weights_only=True)
    kept = {
        "state_dict": {k: v for k, v in saved["state_dict"].items() if k.startswith(CHECKPOINT_PREFIX)},
        CHECKPOINT_KEY: {POPULATION_KEY: saved[CHECKPOINT_KEY][POPULATION_KEY]},
        "pytorch-lightning_version": saved.get("pytorch-lightning_version"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(kept, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a lightmarl training checkpoint")
    parser.add_argument("out", type=Path, help="the file to write")
    options = parser.parse_args()
    slim(options.source, options.out)


if __name__ == "__main__":
    main()
