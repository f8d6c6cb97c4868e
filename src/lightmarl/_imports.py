"""Resolving ``module.attr`` import paths named in recipes (eagerly or lazily), and recipe values as plain data."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

from lightmarl import trust


def import_object(path: str, *, field: str) -> Any:
    """Import ``package.module.attr`` (attributes may be nested, ``mod.Class.method``).

    Args:
        path: dotted import path.
        field: the config field that named ``path``; it leads every error message.

    Raises:
        ValueError: naming ``field`` and ``path`` when nothing importable is found.
    """
    if not isinstance(path, str) or "." not in path or not all(part.isidentifier() for part in path.split(".")):
        raise ValueError(f"{field}: expected a dotted import path like 'package.module.name', got {path!r}")
    # While a file is loaded, what it names is checked before anything is imported (lightmarl.trust).
    trust.check_import(path, field=field)
    parts = path.split(".")
    # Import the longest importable module prefix, then walk attributes (importing submodules on the way).
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
        for k, attr in enumerate(parts[split:], start=split):
            obj = _attribute(obj, attr, path, field, last=k == len(parts) - 1)
        if isinstance(obj, types.ModuleType):
            raise ValueError(
                f"{field}: {path!r} is a module, not a function or class; name one inside it{_example(obj, path)}"
            )
        trust.check_imported(path, obj, field=field)
        return obj
    raise ValueError(f"{field}: cannot import {path!r}: no module {parts[0]!r} is installed")


def _attribute(obj: Any, attr: str, path: str, field: str, *, last: bool) -> Any:
    """``obj.attr``, or the submodule ``attr`` of a package that does not import it itself.

    A missing name followed by more parts was meant as a module: the error names the installed
    distribution (an env module that this version of a package no longer has).
    """
    if hasattr(obj, attr):
        return getattr(obj, attr)
    owner = getattr(obj, "__name__", type(obj).__name__)
    if isinstance(obj, types.ModuleType) and hasattr(obj, "__path__"):
        name = f"{obj.__name__}.{attr}"
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise ValueError(f"{field}: importing {name!r} for {path!r} failed: {err}") from err
        if not last:
            raise ValueError(
                f"{field}: cannot import {path!r}: no module {name!r} in the installed {_distribution(obj)}"
            )
    kind = "module " if isinstance(obj, types.ModuleType) else ""
    raise ValueError(f"{field}: {kind}{owner!r} has no attribute {attr!r} (from {path!r})")


def _distribution(module: types.ModuleType) -> str:
    """``"pettingzoo 1.27.0"``: the installed distribution that provides ``module`` (else its top-level name)."""
    top = module.__name__.partition(".")[0]
    try:
        dist = importlib.metadata.packages_distributions().get(top, [top])[0]
        return f"{importlib.metadata.metadata(dist)['Name']} {importlib.metadata.version(dist)}"
    except (importlib.metadata.PackageNotFoundError, KeyError, IndexError):
        return f"package {top!r}"


def _example(module: types.ModuleType, path: str) -> str:
    names = [n for n in ("parallel_env", "env", "raw_env") if callable(getattr(module, n, None))]
    if not names and not hasattr(module, "__path__"):  # a package's callables are rarely what was meant
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
    return f", e.g. '{path}.{names[0]}'" if names else ""


def instantiate(spec: Mapping[str, Any], *, field: str, base: type | None = None, **context: Any) -> Any:
    """Build ``{class_path: ..., init_args: {...}}`` (the recipes' way to name an object).

    Keyword ``context`` (e.g. ``group=``) is passed only to classes whose constructor has a
    parameter of that name, and never overrides an ``init_args`` entry. With ``base``, the class is
    checked to be a subclass of it before it is called.

    Raises:
        ValueError: naming ``field`` for unknown keys, an unimportable class, one that is not a
            ``base`` subclass, or rejected arguments.
    """
    unknown = set(spec) - {"class_path", "init_args"}
    if "class_path" not in spec or unknown:
        raise ValueError(f"{field}: expected {{class_path, init_args}}, got keys {sorted(spec)}")
    class_path = str(spec["class_path"])
    cls = import_object(class_path, field=f"{field}.class_path")
    if base is not None and not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{field}.class_path: {class_path!r} is not a {base.__module__}.{base.__qualname__} subclass")
    kwargs = dict(spec.get("init_args") or {})
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    for name, value in context.items():
        if name in parameters:
            kwargs.setdefault(name, value)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{field}: {class_path}(**{sorted(kwargs)}) failed: {err}") from err


def lazy_attributes(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's PEP 562 ``__getattr__`` and ``__dir__`` that import each public name from its module on first use.

    Packages whose modules env worker processes import (``lightmarl.envs`` and below) use it so
    that importing one torch-free module does not import every sibling's torch.

    Args:
        package: the package's ``__name__``.
        where: public name -> module that defines it.
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        try:
            module = where[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


def plain_data(value: Any) -> Any:
    """``value`` with every mapping, namespace and sequence turned into plain dicts and lists.

    LightningCLI (jsonargparse) parses a nested ``{class_path, init_args}`` inside a free-form
    ``dict[str, Any]`` field (e.g. ``policy_kwargs.encoder``) into a ``Namespace``, whichever
    YAML style or command-line override wrote it; lightmarl stores and checkpoints plain data.
    """
    as_dict = getattr(value, "as_dict", None)  # jsonargparse.Namespace, without importing it here
    if callable(as_dict) and not isinstance(value, Mapping):
        value = as_dict()
    if isinstance(value, Mapping):
        return {key: plain_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain_data(item) for item in value)
    return value
