"""Source reads of the CLI's parser, done once per test session instead of once per command.

Each ``lightmarl`` command builds its LightningCLI parser from the signatures and docstrings of
`MARLModule`, the Trainer and every class a recipe can name. jsonargparse reads the source of
those classes (``inspect.getsource``, its ``**kwargs`` resolver) and docstring_parser parses it for
attribute docstrings: about 3 s a command on this project's 2-core CI, every time, since neither
caches. A process of its own reads them once; a test session that runs hundreds of commands in
one process (tests/cli_runner.py, tests calling ``lightmarl.cli.main``) re-reads the same
unchanged files each time.

`install` memoizes those two reads for the jsonargparse and docstring_parser modules only: a
class's source is keyed by the class and its file's modification time (a file rewritten by a test
is read again), attribute docstrings by the class. The parser they build is the same;
tests/test_cli_runner.py compares a command's ``--help`` and ``--print_config`` with and without.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any

#: the modules whose ``inspect.getsource`` calls go through the cache.
SOURCE_READERS = (
    "jsonargparse._parameter_resolvers",
    "jsonargparse._postponed_annotations",
    "jsonargparse._util",
    "docstring_parser.attrdoc",
)


class _Inspect:
    """The ``inspect`` module as the readers see it: `getsource` memoized, the rest as is."""

    def __init__(self) -> None:
        self._sources: dict[Any, tuple[int | None, str]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)

    def getsource(self, obj: Any) -> str:
        try:
            path = inspect.getsourcefile(obj)
            hash(obj)
        except TypeError:
            return inspect.getsource(obj)
        mtime = os.stat(path).st_mtime_ns if path and os.path.exists(path) else None
        cached = self._sources.get(obj)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        source = inspect.getsource(obj)  # OSError (no source) is raised every time, as uncached
        self._sources[obj] = (mtime, source)
        return source


_installed: list[tuple[Any, str, Any]] = []


def install() -> None:
    """Route the readers' source reads and docstring_parser's attribute docstrings through caches."""
    if _installed:
        return
    cached_inspect = _Inspect()
    for name in SOURCE_READERS:
        # Another release may move a reader: that one then reads uncached, as it would in a process.
        module = _module(name)
        if module is not None and getattr(module, "inspect", None) is inspect:
            _installed.append((module, "inspect", module.inspect))
            module.inspect = cached_inspect
    readers = getattr(_module("docstring_parser.attrdoc"), "AttributeDocstrings", None)
    original = getattr(readers, "get_attr_docs", None)
    if original is not None:
        _installed.append((readers, "get_attr_docs", original))
        readers.get_attr_docs = _memoized_attr_docs(original, cached_inspect)  # type: ignore[union-attr]


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def uninstall() -> None:
    """Put the readers back as they were (tests compare a parser built with and without the caches)."""
    while _installed:
        owner, attribute, value = _installed.pop()
        setattr(owner, attribute, value)


def _memoized_attr_docs(original: Callable[..., dict], cached_inspect: _Inspect) -> Callable[..., dict]:
    docs: dict[Any, tuple[str, dict]] = {}

    def get_attr_docs(self: Any, component: Any) -> dict:
        try:
            source = cached_inspect.getsource(component)
            hash(component)
        except (OSError, TypeError):
            return original(self, component)
        cached = docs.get(component)
        if cached is None or cached[0] is not source:
            cached = docs[component] = (source, original(self, component))
        return dict(cached[1])  # the caller may add to it; the values are tuples of strings

    return get_attr_docs
