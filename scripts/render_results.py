#!/usr/bin/env python3
"""Write the result tables in the docs from the committed JSON files in ``benchmarks/results/``.

Every ``<!-- results:NAME -->`` ... ``<!-- /results:NAME -->`` block in ``README.md``,
``benchmarks/README.md`` and ``docs/**/*.md`` is replaced by the table of
``benchmarks/results/NAME.json`` (written by ``benchmarks/results.py``'s ``write_result``) and a
line with the command, the date, the machine and the commit measured. How the numbers reached the
file (a ``source`` note) stays in the JSON: the pages show what was measured, not its history. The tables are never edited by hand:

    python scripts/render_results.py           # rewrite the tables
    python scripts/render_results.py --check   # exit 1, naming each table that differs from its JSON
                                               # and each measured table typed outside a results block

``tests/test_results_tables.py`` runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)


def pages(root: Path = ROOT) -> list[Path]:
    """The Markdown files that may hold result tables."""
    return [root / "README.md", root / "benchmarks" / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _cell(value: Any, fmt: str | None) -> str:
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value)
    if isinstance(value, int | float):
        if fmt:
            text = format(value, fmt)
        elif isinstance(value, int):
            text = f"{value:,}"
        else:
            text = f"{value:.4g}"
        return text.replace("-", "−") if text.startswith("-") else text
    return str(value).replace("|", "\\|")


NUMBER = re.compile(r"^\**[−+-]?[\d,]*\.?\d+(\s?±\s?[\d,.]+)?(\s?[×x%]|\s?[a-zµ]+)?\**$|^$")


def _numeric(value: Any) -> bool:
    # Numbers, and cells written as numbers ("1,234", "−0.42 ± 0.1", "1.07×", "4.3 ms"), align right.
    return value is None or isinstance(value, int | float) or (isinstance(value, str) and bool(NUMBER.match(value)))


def _table(columns: list[Any], rows: Iterable[list[Any]]) -> list[str]:
    names = [c if isinstance(c, str) else c["name"] for c in columns]
    formats = [None if isinstance(c, str) else c.get("format") for c in columns]
    rows = [list(r) for r in rows]
    numeric = [bool(rows) and all(_numeric(r[i]) for r in rows) for i in range(len(names))]
    lines = ["| " + " | ".join(names) + " |", "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    lines += ["| " + " | ".join(_cell(v, f) for v, f in zip(row, formats)) + " |" for row in rows]
    return lines


def render(result: Mapping[str, Any]) -> str:
    """The Markdown block for one result: its table, then the command and where it was measured."""
    table = result.get("table")
    if table is None:  # one row per seed / run, one column per metric
        per_seed = result["per_seed"]
        metrics: list[str] = []
        for numbers in per_seed.values():
            metrics += [m for m in numbers if m not in metrics]
        table = {
            "columns": ["seed", *metrics],
            "rows": [[seed, *(numbers.get(m) for m in metrics)] for seed, numbers in per_seed.items()],
        }
    lines = _table(table["columns"], table["rows"])
    machine = result.get("machine") or {}
    where = ", ".join(
        part
        for part in (
            machine.get("gpu"),
            machine.get("cpu"),
            f"{machine['cores']} cores" if machine.get("cores") else None,
            "load " + " / ".join(f"{x:g}" for x in machine["load"] if x is not None) if machine.get("load") else None,
        )
        if part
    )
    commit = (result.get("commit") or "")[:10]
    lines += ["", f"`{result['command']}`", ""]
    detail = f"Measured {result['date'][:10]}" + (f" on {where}" if where else "")
    detail += (f", commit `{commit}`" if commit else "") + (" with uncommitted changes" if result.get("dirty") else "")
    lines.append(detail + f" (`benchmarks/results/{result['name']}.json`).")
    if result.get("notes"):
        lines += ["", result["notes"]]
    return "\n".join(lines) + "\n"


def load(name: str, results_dir: Path = RESULTS_DIR) -> dict[str, Any]:
    path = results_dir / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"a table names result {name!r}, but there is no {path.relative_to(ROOT)}")
    return json.loads(path.read_text())


def rendered(text: str, results_dir: Path = RESULTS_DIR) -> str:
    """``text`` with every results block rewritten from its JSON file."""
    return BLOCK.sub(lambda m: m.group(1) + render(load(m.group("name"), results_dir)) + m.group(4), text)


def stale(files: Iterable[Path], results_dir: Path = RESULTS_DIR) -> list[str]:
    """``file: name`` for every results block whose text is not what its JSON renders to."""
    out = []
    for path in files:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            if match.group("body") != render(load(match.group("name"), results_dir)):
                out.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {match.group('name')}")
    return out


FENCE = re.compile(r"^```.*?^```", re.S | re.M)
#: a table cell that reads as a measured figure: a decimal ("0.924", "−21.70 [−22.1, −21.3]", "0.41 / 0.62")
#: or a number with thousands separators ("2,299"). Counts, sizes and versions ("18 float", "3") are not.
MEASURED_CELL = re.compile(
    r"^\**[−+-]?\d[\d,]*\.\d+\**(\s*\[[^\]]*\])?$"
    r"|^\**[−+-]?\d+\.\d+\s*/\s*[−+-]?\d+\.\d+"
    r"|^\**\d{1,3}(,\d{3})+\**$"
)


def hand_typed(files: Iterable[Path]) -> list[str]:
    """``file:line`` for every table row outside the results blocks (and code blocks) with a cell that
    reads as a measured figure: such a table belongs in a JSON file under ``benchmarks/results/``."""
    out = []
    for path in files:
        text = path.read_text()
        # Blank out results blocks and code blocks, keeping their newlines so line numbers stay right.
        for pattern in (BLOCK, FENCE):
            text = pattern.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.startswith("|"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if any(MEASURED_CELL.match(c) for c in cells):
                out.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{number}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a table differs from its JSON or measured figures are typed in a table",
    )
    args = parser.parse_args(argv)
    if args.check:
        differ = stale(pages())
        for line in differ:
            print(f"stale table: {line} (run python scripts/render_results.py)", file=sys.stderr)  # noqa: T201
        typed = hand_typed(pages())
        for line in typed:
            hint = "write it to benchmarks/results/ and show it with a results block"
            print(f"hand-typed result table: {line} ({hint})", file=sys.stderr)  # noqa: T201
        return 1 if differ or typed else 0
    for path in pages():
        text = path.read_text()
        new = rendered(text)
        if new != text:
            path.write_text(new)
            print(f"rewrote {path.relative_to(ROOT)}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
