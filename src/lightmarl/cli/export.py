"""``lightmarl export``: a run's population written for inference (safetensors or ONNX), its own argparse command."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NoReturn

from lightmarl.errors import ConfigError
from lightmarl.inference.onnx import export_onnx
from lightmarl.policies.artifact import parse_mixture, read_artifact, write_artifact


class _OneLineArgumentParser(argparse.ArgumentParser):
    """``lightmarl export``'s argument errors as one ``lightmarl: error:`` line, without argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message} (`{self.prog} --help` lists every option)")


def export_main(args: list[str]) -> None:
    """``lightmarl export SOURCE --out DIR``: the trained population, for inference, as NPCs or as ONNX."""
    parser = _OneLineArgumentParser(
        prog="lightmarl export",
        description="Write everything a run's population needs to act (policies, env transforms with their "
        "statistics, the agent -> binding map, counters, league snapshots and mixtures; no optimizer or trainer "
        "state) as population.json + safetensors, or each binding's acting graph as ONNX. "
        "`policy_uri: DIR#binding` and lightmarl.load_population(DIR) load an export "
        "(docs/export_format.md).",
    )
    parser.add_argument(
        "checkpoint",
        help="a run directory (runs/x), a training checkpoint (runs/x/checkpoints/last.ckpt), an export or a "
        "league snapshot file",
    )
    parser.add_argument("--out", required=True, help="the directory to write")
    parser.add_argument("--bindings", nargs="+", help="export only these bindings (default: all)")
    parser.add_argument(
        "--format",
        choices=["safetensors", "onnx"],
        default="safetensors",
        help="safetensors: the export format; onnx: <binding>.onnx + manifest.json (needs the onnx extra)",
    )
    parser.add_argument(
        "--mixture",
        action="append",
        default=[],
        metavar="NAME=MEMBER:WEIGHT,...",
        help="a league mixture to record: weights per member (a binding or snapshot id), normalized to sum 1",
    )
    parser.add_argument(
        "--allow",
        nargs="+",
        default=[],
        metavar="CLASS_PATH",
        help="classes outside lightmarl's policies and env transforms that the file may name (e.g. an encoder "
        "of examples/)",
    )
    parser.add_argument(
        "--trust_code",
        action="store_true",
        help="build any class the file names (importing it runs its code): only for files you trust",
    )
    parser.add_argument("--no_snapshots", action="store_true", help="leave the league's snapshots out")
    options = parser.parse_args(args)
    out_path = Path(options.out)
    if out_path.exists() and not out_path.is_dir():
        raise ConfigError(f"--out: {options.out!r} is a file; name a directory to write the export into")
    artifact = read_artifact(options.checkpoint, field="lightmarl export")
    artifact.check_classes(options.allow, trust_code=options.trust_code)
    if options.bindings:
        artifact = artifact.select(options.bindings)
    for text in options.mixture:
        name, weights = parse_mixture(text, artifact)
        artifact.mixtures[name] = weights
    try:
        if options.format == "onnx":
            out = export_onnx(artifact, options.out, allow=options.allow, trust_code=options.trust_code)
            skipped = json.loads((out / "manifest.json").read_text())["skipped"]
            for binding, reason in skipped.items():
                print(f"lightmarl: no ONNX graph for {binding}: {reason}")  # noqa: T201
        else:
            out = write_artifact(artifact, options.out, with_snapshots=not options.no_snapshots)
    except OSError as err:
        raise ConfigError(f"--out: cannot write {options.out!r} ({err.strerror or err})") from err
    print(f"lightmarl: exported {', '.join(artifact.bindings)} to {out} (from {artifact.source})")  # noqa: T201
