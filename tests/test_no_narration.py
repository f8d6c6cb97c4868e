"""The pages a user reads and the docstrings of ``src`` describe what is, not how it came to be:
no provenance in prose ("transcribed from ... at commit ...": a result's provenance is its JSON
in benchmarks/results/, shown by the rendered block's command, date and commit line) and no
narration of history ("now warns", "the recipe now", "a session earlier", "target ... met")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: phrases that narrate history, provenance or the project's own machines; case-insensitive.
NARRATION = [
    r"transcribed from",
    r"\bat commit\b",
    r"run directories were not committed",
    r"raw (run )?files were not (committed|kept)",
    r"\bnow (warns|fails|asks|has|stops|writes|reads|learns|runs)\b",
    r"\b(is|are) now (`|\w+ed\b)",
    r"\bthe recipe now\b",
    r"\b(a|one|this|the previous|an earlier|a later) session\b",
    r"\bsession (earlier|later|ago|before)\b",
    r"\btargets?\b[^|\n]{0,80}?\b(is|are)? ?met\b",
    r"\b(not )?met(, just)?:",
    r"fresh clone of this machine",
    r"this machine kind",
    r"CI machines of this project",
    r"\b(landed|committed) (later|right after|afterwards)\b",
    r"before results were files",
]
PATTERN = re.compile("|".join(f"(?:{p})" for p in NARRATION), re.I)


def texts() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "src").rglob("*.py"))]


def narration(text: str) -> list[str]:
    # A wrapped sentence is read as one line: "target ≤ 0.05\nmet" is still a claim of history.
    flat = re.sub(r"\s*\n\s*(#\s*)?", " ", text)
    return [m.group(0) for m in PATTERN.finditer(flat)]


def test_no_page_or_docstring_narrates_history():
    found = {str(p.relative_to(ROOT)): hits for p in texts() if (hits := narration(p.read_text()))}
    assert not found, f"narration or provenance in prose: {found}"


@pytest.mark.parametrize(
    "sentence",
    [
        "Measured on 2 cores; transcribed from README.md at commit f4fbaa5 (the run directories were not committed).",
        "The quickstart with `lr: 1e6` now warns `binding 'main' is diverging`.",
        "| **`ThreatFeaturesEncoder`** (the recipe now; load ~2) |",
        "league's seeds 0 and 1 a session earlier at the same 0.0121",
        "exploitability 0.015 (seed 0), target ≤ 0.05\nmet; naive self-play",
        "On a fresh clone of this machine\nkind: 594 passed",
        "(CI machines of this project have it on local disk)",
        "`lightmarl.envs.memory` is now `lightmarl.envs.testing.memory`",
        "The teacher is now asked once per update",
    ],
)
def test_the_phrases_of_the_issue_are_caught(sentence):
    assert narration(sentence)


def test_descriptions_of_what_is_are_not_caught():
    assert not narration(
        "A resumed run is no longer bit-identical. Every player met its opponent in both seats. "
        "The run stops now, without a checkpoint. Lightning has registered its handler by now. "
        "Freeze the player as it is now; the statistics as they are now."
    )
