"""Which classes a saved population may name: lightmarl's own modules and transforms, plus what the caller allows.

A saved population names classes (each binding's policy, the encoders and shared modules in its
keyword arguments, the env transforms). Importing a module runs its code, so a file that could
name any import path could run any code on load. Every class path read from a file goes through
:func:`resolve_allowed_class` before anything is imported: a path under ``lightmarl.`` that
resolves to a ``torch.nn.Module`` (a policy, encoder, shared module) or a
:class:`~lightmarl.envs.transforms.VecTransform`, or a path the caller lists in ``allow``
(e.g. a game's policy class from ``examples/``), and nothing else.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from lightmarl._imports import import_object

#: the package whose classes a file may always name.
TRUSTED_PACKAGE = "lightmarl."


def resolve_allowed_class(path: str, *, field: str, allow: Collection[str] = ()) -> type:
    """The class at ``path``, imported only if a saved file may name it (see the module doc).

    Args:
        path: a dotted class path read from a file.
        field: what named it, for messages (e.g. ``"population.json binding 'main'"``).
        allow: further class paths the caller trusts (the recipe or the user named them).

    Raises:
        ValueError: naming ``field`` and ``path`` when the path is outside ``lightmarl`` and not in
            ``allow`` (checked before any import), or is not a module / transform class.
    """
    from torch import nn

    from lightmarl.envs.transforms import VecTransform

    if not isinstance(path, str):
        raise ValueError(f"{field}: expected a class path string, got {path!r}")
    if path not in allow and not path.startswith(TRUSTED_PACKAGE):
        raise ValueError(
            f"{field}: the file names class {path!r}, outside lightmarl; it is not imported (importing runs its "
            f"module's code). If you trust it, allow it: load_population(..., allow=[{path!r}])"
        )
    cls = import_object(path, field=field)
    if path not in allow and not (isinstance(cls, type) and issubclass(cls, nn.Module | VecTransform)):
        raise ValueError(f"{field}: {path!r} is not a lightmarl module, policy, encoder or env transform class")
    return cls


def check_class_paths(value: Any, *, field: str, allow: Collection[str] = ()) -> None:
    """Resolve every ``class_path`` entry found anywhere in ``value`` (nested dicts and lists) with
    :func:`resolve_allowed_class`, so that building from ``value`` afterwards imports nothing else."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "class_path" and isinstance(item, str):
                resolve_allowed_class(item, field=field, allow=allow)
            else:
                check_class_paths(item, field=field, allow=allow)
    elif isinstance(value, list | tuple):
        for item in value:
            check_class_paths(item, field=field, allow=allow)
