"""docs/evaluation.md: every Python block runs, and prints the output shown below it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "evaluation.md"
# A python block and the text block right after it (its output).
BLOCK = re.compile(r"```python\n(.*?)```\s*```text\n(.*?)```", flags=re.S)


def run_blocks(text: str) -> list[tuple[str, str]]:
    """``(shown, printed)`` output of each python block, run in order in one namespace."""
    namespace: dict = {}
    results = []
    for code, shown in BLOCK.findall(text):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(DOC), "exec"), namespace)
        results.append((shown, printed.getvalue()))
    return results


def test_doc_examples_print_what_the_doc_shows():
    results = run_blocks(DOC.read_text())
    assert len(results) == 4
    for shown, printed in results:
        assert printed.rstrip("\n") == shown.rstrip("\n")


def test_doc_image_exists():
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", DOC.read_text()):
        assert (DOC.parent / image).is_file(), image
