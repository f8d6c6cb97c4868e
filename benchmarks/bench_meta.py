"""What every benchmark's JSON result records about where and how it ran.

``metadata(device)`` gives the command line, the git commit, the machine (host name, CPU model,
cores), the torch device (with the GPU's name), versions and the load average; ``write_json``
writes a result with it. Used by ``vmas_speed.py``, ``worker_scaling.py`` and ``time_to_return.py``.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The checked-out commit (``+dirty`` with uncommitted changes); ``unknown`` outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("LIGHTMARL_COMMIT", "unknown")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def device_name(device: str) -> str:
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(dev)
    return cpu_model()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def metadata(device: str) -> dict[str, Any]:
    return {
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
        "commit": commit(),
        "machine": {"host": platform.node(), "cpu": cpu_model(), "cores": os.cpu_count()},
        "cores": os.cpu_count(),
        "device": str(device),
        "device_name": device_name(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "load_before": load(),
    }


def write_json(path: str | Path | None, meta: dict[str, Any], numbers: Any) -> None:
    """``meta`` (with the load now as ``load_after``) and ``numbers`` as one JSON file; ``None``: stdout."""
    payload = {**meta, "load_after": load(), "numbers": numbers}
    text = json.dumps(payload, indent=2, default=str)
    if path is None:
        print(text)
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text + "\n")
