"""The scripts of ``benchmarks/`` (scripts, not a package) loaded as modules for their tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(relative_path: str) -> ModuleType:
    """``benchmarks/<relative_path>`` as the module named after its file, importable by that name.

    The script's folder goes on ``sys.path`` as ``python benchmarks/...`` would put it there, so the
    script's own imports of its neighbours (``from compare import ...``) resolve as they do when it runs.
    """
    path = ROOT / "benchmarks" / relative_path
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
