"""The import graph of ``src/lightmarl`` is acyclic and layered: every package imports only downward.

Read from the source with :mod:`ast` (nothing is imported): every ``import`` statement counts,
at module level, under ``if TYPE_CHECKING:`` and inside functions alike, for the layers, and every
one that runs counts for cycles: a cycle that only a function-level import hides is still a cycle.
An import under ``if TYPE_CHECKING:`` never runs; it only names a type, so a module may name the
type of the module that imports it (``training.checkpoint`` names ``training.module.MARLModule``,
the module whose checkpoint schema it is) without making a cycle, as long as the layers allow it.
A row flows up the layers, from env to optimizer step, and code never reaches back down-to-up::

    keys, ratings, trust   (torch-free: TensorDict keys, rating maths, the loading rule for files)
    _imports, errors
    envs            where they act
    population      who acts (plain data)
    policies        how they act
    data, inference what they experienced / how a saved population acts outside training (siblings)
    algorithms      how they learn
    league, evaluation   who plays whom / how well they do (siblings: neither imports the other)
    training        how it runs at scale: drives algorithms, league and evaluation
    experiments     many runs: sweeps, their statistics, hyper-parameter search (runs `fit` as subprocesses)
    cli             the front door

A package may import itself and any package of a lower layer, never one of its own layer or
above. ``training`` sits above ``league`` and ``evaluation`` because it drives them (callbacks,
validation); they must not import it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "lightmarl"

#: lowest first; "" is the root package ``lightmarl/__init__.py`` (a docstring, the version and the lazy
#: ``load_population`` facade).
LAYERS: list[tuple[str, ...]] = [
    ("", "keys", "ratings", "trust"),
    ("_imports", "errors"),
    ("envs",),
    ("population",),
    ("policies",),
    ("data", "inference"),
    ("algorithms",),
    ("league", "evaluation"),
    ("training",),
    ("experiments",),
    ("cli",),
]

#: third-party modules a package must not import (module prefixes).
FORBIDDEN_EXTERNAL: dict[str, tuple[str, ...]] = {
    "keys": ("torch", "tensordict", "numpy"),
    # Plain data: validated config and index tensors, no networks.
    "population": ("torch.nn", "lightning"),
    # Algorithms know nothing of Lightning nor of collectives: the LightningModule in training/ wraps them.
    "algorithms": ("lightning", "torch.distributed"),
}

#: ``(importing module, imported module)`` pairs allowed inside a function, each with its reason.
#: Lazy imports of optional third-party packages (vmas, imageio, ...) need no entry: only
#: imports of lightmarl modules are checked.
FUNCTION_LEVEL_ALLOWED: dict[tuple[str, str], str] = {
    # The root package's PEP 562 attribute: ``lightmarl.load_population`` without importing torch on
    # ``import lightmarl``. The one upward edge allowed, and only from the root facade (see upward_imports).
    ("lightmarl", "lightmarl.inference"): "lazy public facade lightmarl.load_population",
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    in_function: bool
    #: under ``if TYPE_CHECKING:``: names a type, never runs (not an edge of an import cycle).
    type_only: bool = False


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """Fully qualified names an import statement binds: ``a.b`` for ``import a.b``, ``a.b.c`` for ``from a.b import c``."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: resolved against this module's package
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        yield f"{base}.{alias.name}"


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, and whether it sits inside a function."""
    for node, in_function, _ in _walk_typed(tree):
        yield node, in_function


def _walk_typed(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement, whether it sits inside a function, and whether only under ``if TYPE_CHECKING:``
    (its body: an ``else:`` branch runs)."""

    def visit(
        node: ast.AST, in_function: bool, type_only: bool
    ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
        if _is_type_checking(node):
            assert isinstance(node, ast.If)
            for child in node.body:
                yield from visit_node(child, in_function, True)
            for child in node.orelse:
                yield from visit_node(child, in_function, type_only)
            return
        for child in ast.iter_child_nodes(node):
            yield from visit_node(child, in_function, type_only)

    def visit_node(
        child: ast.AST, in_function: bool, type_only: bool
    ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function, type_only
        yield from visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)), type_only)

    yield from visit(tree, False, False)


def resolve(name: str, modules: dict[str, Path]) -> str:
    """The lightmarl module ``name`` lives in: the longest module prefix (``a.b.Class`` -> ``a.b``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    raise AssertionError(f"{name!r} is not a module of {PACKAGE}")


def import_graph() -> tuple[dict[str, list[Edge]], dict[str, list[tuple[str, int]]]]:
    """lightmarl module -> its edges to lightmarl modules; and module -> third-party names it imports."""
    modules = all_modules()
    edges: dict[str, list[Edge]] = {m: [] for m in modules}
    external: dict[str, list[tuple[str, int]]] = {m: [] for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, in_function, type_only in _walk_typed(tree):
            for name in _imported_names(node, module, path.name == "__init__.py"):
                if name == PACKAGE or name.startswith(PACKAGE + "."):
                    target = resolve(name, modules)
                    if target != module:
                        edges[module].append(Edge(module, target, node.lineno, in_function, type_only))
                else:
                    external[module].append((name, node.lineno))
    return edges, external


def package_of(module: str) -> str:
    """The top-level part of lightmarl a module belongs to (``""`` for the root package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_of(package: str) -> int:
    for rank, packages in enumerate(LAYERS):
        if package in packages:
            return rank
    raise AssertionError(f"lightmarl.{package} is in no layer: add it to LAYERS in {__file__}")


def find_cycle(edges: dict[str, list[Edge]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``) of imports that run (``type_only`` edges left out), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for edge in edges[module]:
            if edge.type_only:
                continue
            if state.get(edge.target) == 1:
                return [*path[path.index(edge.target) :], edge.target]
            if edge.target not in state and (cycle := visit(edge.target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def upward_imports(edges: dict[str, list[Edge]]) -> list[str]:
    found = []
    for module_edges in edges.values():
        for edge in module_edges:
            source, target = package_of(edge.source), package_of(edge.target)
            if edge.source == PACKAGE and edge.in_function and (edge.source, edge.target) in FUNCTION_LEVEL_ALLOWED:
                continue  # the root package's lazy facade (FUNCTION_LEVEL_ALLOWED says why)
            if source != target and layer_of(target) >= layer_of(source):
                found.append(f"{edge.source}:{edge.line} imports {edge.target} (layer of {target or 'lightmarl'})")
    return found


def function_level_imports(edges: dict[str, list[Edge]]) -> list[str]:
    return [
        f"{edge.source}:{edge.line} imports {edge.target} inside a function"
        for module_edges in edges.values()
        for edge in module_edges
        if edge.in_function and (edge.source, edge.target) not in FUNCTION_LEVEL_ALLOWED
    ]


def forbidden_external(external: dict[str, list[tuple[str, int]]]) -> list[str]:
    found = []
    for module, names in external.items():
        for prefix in FORBIDDEN_EXTERNAL.get(package_of(module), ()):
            found += [
                f"{module}:{line} imports {name}" for name, line in names if (name + ".").startswith(prefix + ".")
            ]
    return found


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, list[Edge]], dict[str, list[tuple[str, int]]]]:
    return import_graph()


def test_the_graph_is_read(graph):
    edges, _ = graph
    assert len(edges) > 50  # every module was found
    assert ("lightmarl.keys", False) in {(e.target, e.in_function) for e in edges["lightmarl.envs.base"]}


def test_no_import_cycle(graph):
    assert find_cycle(graph[0]) is None


def test_layers_import_only_downward(graph):
    edges, _ = graph
    for module in edges:
        layer_of(package_of(module))  # every package has a layer
    assert upward_imports(edges) == []


def test_no_function_level_import_of_lightmarl_modules(graph):
    assert function_level_imports(graph[0]) == []
    stale = [
        pair
        for pair in FUNCTION_LEVEL_ALLOWED
        if pair not in {(e.source, e.target) for es in graph[0].values() for e in es}
    ]
    assert stale == [], "allow-list entries no import needs any more"


def test_packages_keep_off_forbidden_dependencies(graph):
    assert forbidden_external(graph[1]) == []


def test_the_checks_catch_what_they_name():
    """Each check fails on a graph that breaks its rule (the real graph passes them above)."""
    edges = {
        "lightmarl.envs.base": [Edge("lightmarl.envs.base", "lightmarl.policies.base", 3, False)],
        "lightmarl.policies.base": [Edge("lightmarl.policies.base", "lightmarl.envs.base", 5, True)],
        "lightmarl.evaluation.episodes": [Edge("lightmarl.evaluation.episodes", "lightmarl.training.module", 7, False)],
        "lightmarl.training.module": [Edge("lightmarl.training.module", "lightmarl.evaluation.episodes", 9, False)],
        "lightmarl.league.payoff": [Edge("lightmarl.league.payoff", "lightmarl.evaluation.episodes", 11, False)],
    }
    assert find_cycle(edges) in (
        ["lightmarl.envs.base", "lightmarl.policies.base", "lightmarl.envs.base"],
        ["lightmarl.evaluation.episodes", "lightmarl.training.module", "lightmarl.evaluation.episodes"],
    )
    assert upward_imports(edges) == [
        "lightmarl.envs.base:3 imports lightmarl.policies.base (layer of policies)",
        "lightmarl.evaluation.episodes:7 imports lightmarl.training.module (layer of training)",
        "lightmarl.league.payoff:11 imports lightmarl.evaluation.episodes (layer of evaluation)",
    ]
    assert function_level_imports(edges) == ["lightmarl.policies.base:5 imports lightmarl.envs.base inside a function"]
    # An import that only names a type (``if TYPE_CHECKING:``) closes no cycle, but still may not go up.
    typed = {
        "lightmarl.training.module": [Edge("lightmarl.training.module", "lightmarl.training.checkpoint", 3, False)],
        "lightmarl.training.checkpoint": [
            Edge("lightmarl.training.checkpoint", "lightmarl.training.module", 8, False, type_only=True)
        ],
        "lightmarl.league.run": [Edge("lightmarl.league.run", "lightmarl.training.module", 4, False, type_only=True)],
    }
    assert find_cycle(typed) is None
    assert upward_imports(typed) == ["lightmarl.league.run:4 imports lightmarl.training.module (layer of training)"]
    runtime = {
        **typed,
        "lightmarl.training.checkpoint": [Edge("lightmarl.training.checkpoint", "lightmarl.training.module", 8, False)],
    }
    assert find_cycle(runtime) == [
        "lightmarl.training.checkpoint",
        "lightmarl.training.module",
        "lightmarl.training.checkpoint",
    ]


def test_type_checking_imports_are_told_from_imports_that_run():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "if TYPE_CHECKING:\n"
        "    from lightmarl.training.module import MARLModule\n"
        "else:\n"
        "    import lightmarl.keys\n"
        "if typing.TYPE_CHECKING:\n"
        "    import lightmarl.errors\n"
        "import lightmarl.envs\n"
        "def f():\n"
        "    if TYPE_CHECKING:\n"
        "        import lightmarl.population\n"
    )
    found = {
        name: (in_function, type_only)
        for node, in_function, type_only in _walk_typed(ast.parse(source))
        for name in _imported_names(node, "lightmarl.x", False)
        if name.startswith(PACKAGE)
    }
    assert found == {
        "lightmarl.training.module.MARLModule": (False, True),
        "lightmarl.keys": (False, False),
        "lightmarl.errors": (False, True),
        "lightmarl.envs": (False, False),
        "lightmarl.population": (True, True),
    }


def test_the_schema_module_names_the_module_type_without_a_cycle(graph):
    (edge,) = [e for e in graph[0]["lightmarl.training.checkpoint"] if e.target == "lightmarl.training.module"]
    assert edge.type_only and not edge.in_function
    assert forbidden_external({"lightmarl.population.shared": [("torch.nn", 4), ("torch", 5), ("torchrl", 6)]}) == [
        "lightmarl.population.shared:4 imports torch.nn"
    ]


# -- one place talks to other processes -----------------------------------------------------------

#: the one module that may use ``torch.distributed``; the rest go through it (and the Lightning strategy).
COLLECTIVES_MODULE = "lightmarl.training.collectives"


def distributed_uses(sources: dict[str, str]) -> list[str]:
    """``module:line`` of every import of ``torch.distributed`` and every ``torch.distributed`` attribute
    outside :data:`COLLECTIVES_MODULE` (docstrings may name it)."""
    found = []
    for module, source in sources.items():
        if module == COLLECTIVES_MODULE:
            continue
        for node in ast.walk(ast.parse(source)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                names = [f"{node.value.id}.{node.attr}"]
            found += [f"{module}:{node.lineno}" for n in names if (n + ".").startswith("torch.distributed.")]
    return found


def test_only_the_collectives_module_uses_torch_distributed():
    sources = {module: path.read_text() for module, path in all_modules().items()}
    assert COLLECTIVES_MODULE in sources
    assert distributed_uses(sources) == []


def test_the_distributed_rule_catches_what_it_names():
    sources = {
        "lightmarl.training.stepper": "import torch.distributed as dist\n",
        "lightmarl.training.league": "import torch\n\ntorch.distributed.barrier()\n",
        "lightmarl.training.resume": "from torch.distributed import all_gather_object\n",
        "lightmarl.training.module": '"""Never calls ``torch.distributed``."""\nimport torch\n',
        COLLECTIVES_MODULE: "import torch.distributed as dist\n",
    }
    assert distributed_uses(sources) == [
        "lightmarl.training.stepper:1",
        "lightmarl.training.league:3",
        "lightmarl.training.resume:1",
    ]


# -- the framework knows no game ------------------------------------------------------------------
#
# A module of src/lightmarl must make sense for any env: rules, scripted experts and encoders of one
# game or task live in examples/ (the lightmarl_examples distribution). The rule reads code, not prose:
# module paths, the names a module defines (classes, functions, module-level names) and the modules
# it imports must not name a specific game or env task. Docstrings and default values may name one
# as an example of use (``env_fn: pettingzoo.classic.connect_four_v3.env``). Env *families* that
# lightmarl adapts (PettingZoo, VMAS, OpenSpiel, MettaGrid, mpe2 as a package) are not games and
# may be named; the test envs of ``lightmarl.envs.testing`` are lightmarl's own tasks.
#
# A name matches when, lower-cased with ``_`` removed, it contains one of GAME_NAMES, or when one of
# its words (split at ``_`` and at capitals) is one of GAME_WORDS: words too short or too common to
# match inside other names ("go" is in "algorithm", "spread" in "widespread").

#: games and env tasks, matched inside names (lower case, no ``_``).
GAME_NAMES = (
    # board and card games (PettingZoo classic, OpenSpiel, RLCard)
    "connectfour", "connect4", "tictactoe", "chess", "checkers", "backgammon", "othello", "gomoku",
    "poker", "holdem", "leduc", "kuhn", "hanabi", "rummy", "mahjong", "blackjack", "dudo", "liarsdice",
    # mpe2 tasks
    "simplespread", "simpletag", "simpleadversary", "simplepush", "simplereference", "simplecrypto",
    "simplespeakerlistener", "simpleworldcomm",
    # butterfly and sisl tasks
    "pistonball", "cooperativepong", "knightsarcherszombies", "multiwalker", "waterworld", "pursuit",
    # Atari-style and grid games
    "pong", "breakout", "boxing", "tennis", "nethack", "minigrid",
)  # fmt: skip
#: game vocabulary, matched as whole words of a name.
GAME_WORDS = ("go", "spread", "landmark", "gravity", "threat", "threats", "afterstate", "afterstates", "c4")


def _words(name: str) -> list[str]:
    """``DropAfterstateEncoder`` -> drop, afterstate, encoder; ``gravity_rules`` -> gravity, rules."""
    spaced = "".join(f"_{c}" if c.isupper() else c for c in name)
    return [w for w in spaced.lower().split("_") if w]


def names_a_game(name: str) -> str | None:
    """The game or task word ``name`` contains, or ``None``."""
    flat = name.lower().replace("_", "")
    for game in GAME_NAMES:
        if game in flat:
            return game
    return next((w for w in _words(name) if w in GAME_WORDS), None)


def defined_names(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Classes and functions anywhere in a module, and its module-level assigned names."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Name):
                yield target.id, node.lineno


def game_names(sources: dict[str, str]) -> list[str]:
    """Every module path part, defined name and imported module of ``sources`` (module -> code) that names a game."""
    found = []
    for module, code in sources.items():
        for part in module.split("."):
            if game := names_a_game(part):
                found.append(f"{module}: the module path names {game!r}")
        tree = ast.parse(code)
        for name, line in defined_names(tree):
            if game := names_a_game(name):
                found.append(f"{module}:{line} defines {name} ({game!r})")
        for node, _ in _walk(tree):
            for imported in _imported_names(node, module, False):
                for part in imported.split("."):
                    if game := names_a_game(part):
                        found.append(f"{module}:{node.lineno} imports {imported} ({game!r})")
                        break
    return found


def test_no_module_of_lightmarl_names_a_game():
    sources = {module: path.read_text() for module, path in all_modules().items()}
    assert game_names(sources) == []


def test_the_game_rule_catches_what_it_names():
    sources = {
        "lightmarl.policies.gravity_rules": "",
        "lightmarl.policies.scripted": "class ConnectFourHeuristicPolicy:\n    pass\nclass SpreadToLandmarkPolicy:\n    pass\n",
        "lightmarl.policies.encoders": "def drop_afterstates():\n    pass\nLEDUC_CARDS = 6\n",
        "lightmarl.envs.board": "from pettingzoo.classic import tictactoe_v3\nimport open_spiel.python.games.kuhn_poker\n",
        # Env families and words that merely contain a game word pass ("go" in "algorithm").
        "lightmarl.envs.openspiel": "class OpenSpielEnvConfig:\n    pass\ndef algorithm_groups():\n    pass\n",
        # "spread" is a game word (mpe2's spread tasks) even where it means dispersion: name that otherwise.
        "lightmarl.evaluation.statistics": "def spread_of(x):\n    pass\n",
    }
    assert game_names(sources) == [
        "lightmarl.policies.gravity_rules: the module path names 'gravity'",
        "lightmarl.policies.scripted:1 defines ConnectFourHeuristicPolicy ('connectfour')",
        "lightmarl.policies.scripted:3 defines SpreadToLandmarkPolicy ('spread')",
        "lightmarl.policies.encoders:1 defines drop_afterstates ('afterstates')",
        "lightmarl.policies.encoders:3 defines LEDUC_CARDS ('leduc')",
        "lightmarl.envs.board:1 imports pettingzoo.classic.tictactoe_v3 ('tictactoe')",
        "lightmarl.envs.board:2 imports open_spiel.python.games.kuhn_poker ('poker')",
        "lightmarl.evaluation.statistics:1 defines spread_of ('spread')",
    ]
