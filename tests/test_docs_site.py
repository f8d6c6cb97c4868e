"""The documentation site builds with ``mkdocs build --strict``: every page in the nav, every link
and anchor between pages, every README section a page includes and every ``::: lightmarl...`` API
reference resolves (``make docs-check`` runs the same build)."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import yaml
from mkdocstrings import Inventory

from lightmarl._imports import import_object
from lightmarl.evaluation.scenarios import EvaluationConfig
from lightmarl.training import MARLModule

ROOT = Path(__file__).resolve().parents[1]


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def class_paths(node: object) -> set[str]:
    if isinstance(node, dict):
        found = {node["class_path"]} if isinstance(node.get("class_path"), str) else set()
        return found.union(*(class_paths(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(class_paths(v) for v in node))
    return set()


def lightmarl_classes(annotation: object) -> set[type]:
    found = {annotation} if inspect.isclass(annotation) and annotation.__module__.startswith("lightmarl.") else set()
    return found.union(*(lightmarl_classes(arg) for arg in typing.get_args(annotation)))


def recipe_classes() -> set[type]:
    """Every lightmarl class a recipe can name: the class paths of the shipped recipes and config
    fragments, and every lightmarl type the schema reaches from ``model:`` (``MARLModule``) and
    ``evaluation:`` (``EvaluationConfig``), through constructor arguments and dataclass fields."""
    files = [*ROOT.glob("recipes/**/*.yaml"), *ROOT.glob("configs/**/*.yaml")]
    named = set().union(*(class_paths(yaml.safe_load(f.read_text())) for f in files))
    todo = [
        MARLModule,
        EvaluationConfig,
        *(import_object(p, field="class_path") for p in named if p.startswith("lightmarl.")),
    ]
    seen: set[type] = set()
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.add(cls)
            hints = typing.get_type_hints(cls if dataclasses.is_dataclass(cls) else cls.__init__)
            todo += [c for hint in hints.values() for c in lightmarl_classes(hint)]
    return seen


def test_site_builds_strict(tmp_path):
    result = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "population" / "index.html").read_text()
    assert "BindingTable" in api  # mkdocstrings rendered the docstrings, not an empty page
    # The API reference has an entry for every class a recipe can name, under its own path or a re-export.
    with (tmp_path / "site" / "objects.inv").open("rb") as file:
        documented = set(Inventory.parse_sphinx(file))
    classes = recipe_classes()
    assert {"LeagueConfig", "EvaluationConfig", "ScenarioConfig", "WeightExchange"} <= {c.__name__ for c in classes}
    missing = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if f"{c.__module__}.{c.__qualname__}" not in documented
        and not any(n.endswith(f".{c.__qualname__}") for n in documented)
    )
    assert not missing, f"no API entry for {missing}"
    # Cross-references render as links, never as raw Sphinx roles (":class:`X`" shows as text).
    pages = sorted((tmp_path / "site" / "api").rglob("*.html"))
    raw = {p.parent.name: re.findall(r":(?:class|meth|func|mod|data|attr):`?[\w.~]+", p.read_text()) for p in pages}
    assert not {k: v for k, v in raw.items() if v}, raw
    assert all("autorefs-internal" in p.read_text() for p in pages)


def test_a_broken_link_fails_the_build(tmp_path):
    # The same site with one page linking to a page that does not exist: strict mode must refuse it.
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "howto" / "bring_your_env.md"
    page.write_text(page.read_text() + "\nSee [nowhere](../no_such_page.md).\n")
    config = tmp_path / "mkdocs.yml"
    text = (ROOT / "mkdocs.yml").read_text().replace("docs_dir: docs", f"docs_dir: {docs}")
    config.write_text(text.replace("paths: [src]", f"paths: [{ROOT / 'src'}]"))
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "no_such_page.md" in result.stderr
