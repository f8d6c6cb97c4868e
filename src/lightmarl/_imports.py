"""Resolving ``module.attr`` import paths named in recipes."""

from __future__ import annotations

import importlib
from typing import Any


def import_object(path: str, *, field: str) -> Any:
    """Import ``package.module.attr`` (attributes may be nested, ``mod.Class.method``).

    Args:
        path: dotted import path.
        field: the config field that named ``path``; it leads every error message.

    Raises:
        ValueError: naming ``field`` and ``path`` when nothing importable is found.
    """
    if not isinstance(path, str) or "." not in path:
        raise ValueError(f"{field}: expected a dotted import path like 'package.module.name', got {path!r}")
    parts = path.split(".")
    module = None
    # Import the longest importable module prefix, then walk attributes.
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and not module_name.startswith(err.name):
                # A module that exists but fails to import one of *its* dependencies.
                raise ValueError(f"{field}: importing {module_name!r} for {path!r} failed: {err}") from err
            continue
        obj: Any = module
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise ValueError(
                f"{field}: module {module_name!r} has no attribute {'.'.join(parts[split:])!r} (from {path!r})"
            ) from None
        return obj
    raise ValueError(f"{field}: cannot import {path!r}: no module {parts[0]!r} is installed")
