"""The documentation site builds with ``mkdocs build --strict``: every page in the nav, every link
and anchor between pages, every README section a page includes and every ``::: lightmarl...`` API
reference resolves (``make docs-check`` runs the same build)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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


def test_site_builds_strict(tmp_path):
    result = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "population" / "index.html").read_text()
    assert "BindingTable" in api  # mkdocstrings rendered the docstrings, not an empty page


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
