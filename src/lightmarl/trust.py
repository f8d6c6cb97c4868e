"""The loading rule: files are data. Nothing a file names is imported or called unless the recipe names it too.

Checkpoints, exported populations and league snapshots describe policies
by name (a policy class, its keyword arguments, an encoder's or a shared module's
``class_path``). Importing a module runs its top-level code and calling a class runs its
constructor, so a name taken from a file is code chosen by whoever wrote the file. While a file
is being turned into policies (inside [`loading_file`][lightmarl.trust.loading_file]), every import that
`lightmarl._imports.import_object` would make is checked here **before** the import:

* a class defined in ``lightmarl.policies`` (the package's own policy, encoder and network
  classes) or ``lightmarl.envs.transforms`` (its env transforms) is allowed: the allow-list is built from the package, not from the file;
* a ``class_path`` the recipe itself names (a binding's ``class_path``, an encoder or shared
  module inside it, the ``?class_path=`` of a ``policy_uri``) is allowed;
* anything else is refused with one line that names the file, the field and the name, unless
  the user opted in for that source: ``trust_code: true`` on the binding,
  ``load_population(..., trust_code=True)`` or ``lightmarl export --trust_code``.

Group specs (the agents' spaces) come from the file's own data or from the recipe's env, never
from an env constructor named only in the file. Outside [`loading_file`][lightmarl.trust.loading_file] (a recipe being
built) imports are not restricted: a recipe is code its user chose to run.

This module imports nothing of lightmarl (the import helper below every package calls it);
`lightmarl.policies.loading.resolve_class` is the resolver for class names read from files.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: modules whose classes a file may name without any opt-in (checked on the class's ``__module__`` too):
#: lightmarl's policies, encoders and networks, and its env transforms (an exported population's inputs).
ALLOWED_PACKAGES = ("lightmarl.policies", "lightmarl.envs.transforms")


class UntrustedCodeError(ValueError):
    """A file named something to import or call that neither lightmarl's allow-list nor the recipe allows."""


@dataclass(frozen=True)
class LoadScope:
    """What may be imported while one file is read.

    Attributes:
        source: the file, for messages.
        field: what asked for the file (e.g. ``"binding 'npc'.policy_uri"``).
        allowed: class paths the recipe names.
        trust_code: the user's opt-in for this source: import whatever the file names.
    """

    source: str
    field: str
    allowed: frozenset[str]
    trust_code: bool


_scope: ContextVar[LoadScope | None] = ContextVar("lightmarl_load_scope", default=None)


@contextlib.contextmanager
def loading_file(source: Any, *, field: str, allowed: Iterable[str] = (), trust_code: bool = False) -> Iterator[None]:
    """Apply the loading rule to every import made inside the block (see [`trust`][lightmarl.trust]).

    Args:
        source: the file or directory being loaded.
        field: what asked for it, leading every error message.
        allowed: class paths the recipe names (see [`recipe_class_paths`][lightmarl.trust.recipe_class_paths]).
        trust_code: import whatever the file names (the user trusts its author).
    """
    if trust_code:
        log.warning("%s: loading %s with trust_code: classes the file names are imported and built", field, source)
    token = _scope.set(LoadScope(str(source), field, frozenset(allowed), bool(trust_code)))
    try:
        yield
    finally:
        _scope.reset(token)


def current_scope() -> LoadScope | None:
    """The file being loaded in this context, or ``None`` while a recipe is built."""
    return _scope.get()


def _in_allowed_package(path: str) -> bool:
    return any(path == package or path.startswith(package + ".") for package in ALLOWED_PACKAGES)


def _refuse(scope: LoadScope, path: str, field: str, why: str) -> UntrustedCodeError:
    return UntrustedCodeError(
        f"{field}: {scope.source!r} names {path!r}, {why}; files are data, so lightmarl builds only "
        f"{' and '.join(ALLOWED_PACKAGES)} classes and classes the recipe names from a file. Name {path!r} in the recipe "
        "(a binding's class_path or policy_kwargs) or allow it (lightmarl export --allow, "
        "lightmarl.load_population(..., allow=[...])), or, if you trust the file's author, set trust_code: true "
        "on this binding (load_population(..., trust_code=True), lightmarl export --trust_code)"
    )


def check_import(path: str, *, field: str) -> None:
    """Refuse, before importing anything, a name that a file being loaded may not make lightmarl import.

    A no-op outside [`loading_file`][lightmarl.trust.loading_file]. Called by `lightmarl._imports.import_object`.

    Raises:
        UntrustedCodeError: naming the file, ``field`` and ``path``.
    """
    scope = _scope.get()
    if scope is None or scope.trust_code or path in scope.allowed or _in_allowed_package(path):
        return
    raise _refuse(
        scope, path, field, "which is neither a lightmarl policy or env transform class nor named by the recipe"
    )


def check_imported(path: str, obj: Any, *, field: str) -> None:
    """After the import of an allowed ``lightmarl.policies...`` path: it must be a class defined there.

    (``lightmarl.policies.mlp.torch.load`` imports only lightmarl's own module, but names torch's
    function through it.) A no-op outside [`loading_file`][lightmarl.trust.loading_file] and for recipe-named or trusted paths.

    Raises:
        UntrustedCodeError: naming the file, ``field`` and ``path``.
    """
    scope = _scope.get()
    if scope is None or scope.trust_code or path in scope.allowed:
        return
    if not (isinstance(obj, type) and _in_allowed_package(getattr(obj, "__module__", ""))):
        raise _refuse(scope, path, field, f"which is not a class defined in {' or '.join(ALLOWED_PACKAGES)}")


def recipe_class_paths(*values: Any) -> frozenset[str]:
    """Every ``class_path`` string inside ``values`` (mappings, lists, namespaces, objects with ``class_path``).

    What a recipe allows files to name: pass it the recipe's policy bindings and shared modules.
    """
    found: set[str] = set()

    def walk(value: Any) -> None:
        as_dict = getattr(value, "as_dict", None)  # a jsonargparse Namespace
        if callable(as_dict) and not isinstance(value, Mapping):
            value = as_dict()
        if isinstance(value, Mapping):
            for key, item in value.items():
                if key == "class_path" and isinstance(item, str):
                    found.add(item)
                walk(item)
        elif isinstance(value, list | tuple | set | frozenset):
            for item in value:
                walk(item)
        elif hasattr(value, "__dataclass_fields__"):
            walk({name: getattr(value, name) for name in value.__dataclass_fields__})

    for value in values:
        walk(value)
    return frozenset(found)
