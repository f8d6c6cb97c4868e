"""Reading saved policies without running code from the file.

``torch.load`` with ``weights_only=False`` unpickles arbitrary objects, so a crafted
checkpoint runs its author's code the moment it is loaded. Every file lightmarl writes (a
training checkpoint, a league snapshot, a plain ``state_dict``) holds only tensors,
numbers, strings and containers, which ``weights_only=True`` reads. A file that needs more is
refused with an error that names the opt-in: ``trust_pickle: true`` on the binding (or
``read_artifact(..., trust_pickle=True)``), for files whose author you trust.

`resolve_class` turns a class name read from a file into a class under the loading rule of
[`lightmarl.trust`][lightmarl.trust] (``lightmarl.policies`` classes, classes the recipe names, or
``trust_code``).
"""

from __future__ import annotations

import logging
import pickle
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightmarl._imports import import_object
from lightmarl.errors import load_failure_reason
from lightmarl.trust import current_scope, loading_file

log = logging.getLogger(__name__)


def load_torch_file(
    path: str | Path, *, field: str, trust_pickle: bool = False, map_location: str | torch.device = "cpu"
) -> Any:
    """``torch.load`` of ``path``, weights-only unless ``trust_pickle``.

    Args:
        path: the file.
        field: what asked for it, for error messages (e.g. ``"binding 'npc'.policy_uri"``).
        trust_pickle: allow arbitrary pickled objects, which can run code while loading.
        map_location: where tensors are loaded.

    Raises:
        ValueError: the file is missing, not a torch file, or (without ``trust_pickle``) holds
            objects that weights-only loading refuses.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{field}: no file at {str(path)!r}")
    if trust_pickle:
        log.warning("%s: loading %s with trust_pickle: code stored in the file can run", field, path)
    try:
        return torch.load(path, map_location=map_location, weights_only=not trust_pickle)
    except pickle.UnpicklingError as err:
        # A refused object reads "Unsupported global: GLOBAL module.name ..."; other errors are broken files.
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        if trust_pickle or found is None:
            raise ValueError(f"{field}: {str(path)!r} is not a torch file: {_first_line(err)}") from err
        detail = f"it names {found.group(1)}"
        raise ValueError(
            f"{field}: {str(path)!r} holds pickled Python objects, which lightmarl does not load by default "
            f"because unpickling can run code ({detail}); lightmarl's own files never need this. "
            "If you trust the file's author, set trust_pickle: true on this binding "
            "(read_artifact(..., trust_pickle=True) in Python)"
        ) from None
    except Exception as err:  # truncated or foreign files: a config error, not a traceback
        raise ValueError(f"{field}: {str(path)!r} is not a torch file: {_first_line(err)}") from err


def _first_line(err: Exception) -> str:
    return load_failure_reason(err)


def resolve_class(
    path: str,
    *,
    field: str,
    source: Any,
    base: type | None = None,
    allowed: Iterable[str] = (),
    trust_code: bool = False,
) -> type:
    """The class a file names at ``path``, imported only if the loading rule allows it.

    The one resolver for class names read from files (checkpoints, exports, their inference
    loaders): a ``lightmarl.policies`` class, a class in ``allowed`` (the recipe's), or anything
    with ``trust_code``.

    Args:
        path: the dotted class path, as the file gives it.
        field: the file field that holds it, leading every error message.
        source: the file, for messages.
        base: the class must subclass it (default ``torch.nn.Module``).
        allowed: class paths the recipe names.
        trust_code: the user trusts the file's author.

    Raises:
        ValueError: the path is refused ([`UntrustedCodeError`][lightmarl.trust.UntrustedCodeError]), does not
            import, or is not a ``base`` subclass.
    """
    if base is None:
        base = nn.Module
    if current_scope() is not None and not allowed and not trust_code:
        cls = import_object(path, field=field)  # inside a file being loaded: its scope applies
    else:
        with loading_file(source, field=field, allowed=allowed, trust_code=trust_code):
            cls = import_object(path, field=field)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{field}: {path!r} is not a {base.__module__}.{base.__qualname__} subclass")
    return cls
