"""Which classes a saved population may name: lightmarl's own modules and transforms, plus what the caller allows.

A saved population names classes (each binding's policy, the encoders and shared modules in its
keyword arguments, the env transforms). Importing a module runs its code, so a file that could
name any import path could run any code on load. Every class path read from a file goes through
:func:`resolve_allowed_class` before anything is imported: a path under ``lightmarl.policies``
(policies, encoders, shared networks) that resolves to a ``torch.nn.Module`` defined there, a
path under ``lightmarl.envs.transforms`` that resolves to a
:class:`~lightmarl.envs.transforms.VecTransform` defined there, or a path the caller lists in
``allow`` (e.g. a game's policy class from ``examples/``), and nothing else.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from lightmarl._imports import import_object

#: the packages whose classes a file may always name: lightmarl's networks and env transforms.
TRUSTED_PACKAGES = ("lightmarl.policies.", "lightmarl.envs.transforms.")


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
    if path in allow:
        return import_object(path, field=field)
    if not path.startswith(TRUSTED_PACKAGES):
        raise ValueError(
            f"{field}: the file names class {path!r}, outside lightmarl's policies and env transforms; it is not "
            f"imported (importing runs its module's code). If you trust it, allow it: "
            f"load_population(..., allow=[{path!r}]) or `lightmarl export --allow {path}`"
        )
    cls = import_object(path, field=field)
    defined = getattr(cls, "__module__", "") + "."
    if not (
        isinstance(cls, type)
        and (
            (issubclass(cls, nn.Module) and defined.startswith(TRUSTED_PACKAGES[0]))
            or (issubclass(cls, VecTransform) and defined.startswith(TRUSTED_PACKAGES[1]))
        )
    ):
        raise ValueError(f"{field}: {path!r} is not a lightmarl policy, encoder or env transform class")
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
