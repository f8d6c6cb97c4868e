"""Committed benchmark results: one JSON file per measure under ``benchmarks/results/``.

A benchmark script ends with one call::

    from results import write_result   # benchmarks/ is the script's own folder

    write_result(
        "collector_speed",
        command="python benchmarks/collector_speed.py --num-envs 16 32 --seconds 5",
        per_seed={"0": {"raw_env_steps_per_s": 1663.0, "collector_env_steps_per_s": 1570.0}},
        columns=["envs", "path", {"name": "env-steps/s", "format": ",.0f"}, {"name": "× raw", "format": ".2f"}],
        rows=[[16, "raw PettingZoo loop", 1663.0, 1.0], [16, "lightmarl collector", 1570.0, 0.93]],
    )

and ``benchmarks/results/collector_speed.json`` then holds the command, the commit, the machine,
its cores and load, the date, the raw per-seed (or per-run) numbers and the table the docs show.
``python scripts/render_results.py`` writes every table in the docs from these files, between
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``; ``tests/test_results_tables.py`` fails
when a committed table and its JSON disagree. A new measurement replaces the file; its history
is in git. Folders below ``benchmarks/results/`` (e.g. ``gpu/run1``) keep raw run output as
a machine returned it; only the files at the top level are results.

Only the standard library is used, so any benchmark (or a BenchMARL venv) can import it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
#: a column: its header, or ``{"name": header, "format": format spec for numbers, e.g. ",.0f"}``.
Column = str | Mapping[str, str]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def command_line() -> str:
    """This process's command as typed from the repository root: ``python benchmarks/x.py --a 1``."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else Path(sys.argv[0])
    return shlex.join(["python", str(shown), *sys.argv[1:]])


def repository_path(path: str | Path, elsewhere: str) -> str:
    """``path`` as a command written into a result names it: relative to the repository root when it is
    inside the repository, else ``<elsewhere>/<its name>`` (a result names no folder of the machine it ran on)."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else f"{elsewhere}/{resolved.name}"


def machine(gpu: str | None = None) -> dict[str, Any]:
    """Where a result was measured: CPU model, cores, load averages (1/5/15 min) and versions;
    with ``gpu`` (the accelerator's name, e.g. ``"NVIDIA H200"``), that too."""
    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    versions: dict[str, str] = {"python": platform.python_version()}
    for package in ("torch", "torchrl", "tensordict", "pettingzoo"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:  # noqa: BLE001 - a package not installed is simply not listed
            continue
    return {
        **({"gpu": gpu} if gpu else {}),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "load": [round(x, 2) for x in load] if load is not None else None,
        "platform": platform.platform(),
        "versions": versions,
    }


def write_result(
    name: str,
    command: str,
    per_seed: Mapping[str, Any],
    *,
    columns: Sequence[Column] | None = None,
    rows: Sequence[Sequence[Any]] | None = None,
    notes: str | None = None,
    source: str | None = None,
    directory: Path | str | None = None,
    measured_on: Mapping[str, Any] | None = None,
    date: str | None = None,
    commit: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``benchmarks/results/<name>.json`` and return its path.

    Args:
        name: the result's name, also the docs' marker name (``<!-- results:name -->``);
            letters, digits, ``_`` and ``-``.
        command: the command that reproduces it, as a user types it from the repository root.
        per_seed: the raw numbers, per seed or per run (``{"0": {"return": -21.2}, ...}``), as
            measured: no rounding.
        columns: the table's headers (see :data:`Column`); with ``rows``, the table the docs show.
            Without them the table is one row per ``per_seed`` key and one column per metric.
        rows: the table's rows; numbers are formatted by their column's ``format``.
        notes: one line shown under the table (what was measured, caveats).
        source: where numbers come from when they were not measured by this call (e.g.
            ``"transcribed from the docs at commit abc1234"``); omitted for fresh measurements.
        directory: where to write (default ``benchmarks/results/``).
        measured_on: the machine, for numbers measured elsewhere or earlier (default: this one,
            :func:`machine`).
        date: the measurement's date (ISO 8601), for the same case (default: now, UTC).
        commit: the commit whose code was measured, for the same case (default: ``HEAD``, with
            ``dirty`` saying whether tracked files had changes; outside a git checkout, e.g. a
            copy on a lent GPU machine, the ``LIGHTMARL_COMMIT`` environment variable);
            ``""`` when it is not known.
        extra: what else the run recorded that is neither a table cell nor a per-run number
            (its settings, the load before it started); kept in the file, not rendered.

    Raises:
        ValueError: a bad ``name``, an empty ``command``, ``rows`` without ``columns`` or rows of
            another width.
    """
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"name: {name!r} must be letters, digits, '_' or '-'")
    if not command.strip():
        raise ValueError("command: give the command that reproduces the result")
    if (columns is None) != (rows is None):
        raise ValueError("columns and rows: give both or neither")
    if columns is not None and rows is not None:
        for row in rows:
            if len(row) != len(columns):
                raise ValueError(f"rows: {list(row)!r} has {len(row)} cells for {len(columns)} columns")
    dirty = None
    if commit is None:
        commit = _git("rev-parse", "HEAD")
        # Results written by an earlier benchmark of the same session do not make the code dirty.
        changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results")
        dirty = bool(changed) if commit else None
        if not commit:  # no git here: the commit the copy was made from, if the caller said so
            commit = os.environ.get("LIGHTMARL_COMMIT", "").removesuffix("+dirty") or None
    result: dict[str, Any] = {
        "name": name,
        "command": command,
        "commit": commit or None,
        "dirty": dirty,
        "date": date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": dict(measured_on) if measured_on is not None else machine(),
        "per_seed": dict(per_seed),
    }
    if columns is not None:
        result["table"] = {"columns": list(columns), "rows": [list(row) for row in rows or []]}
    if notes:
        result["notes"] = notes
    if source:
        result["source"] = source
    if extra:
        result["extra"] = dict(extra)
    path = Path(directory) if directory is not None else RESULTS_DIR
    path.mkdir(parents=True, exist_ok=True)
    out = path / f"{name}.json"
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return out
