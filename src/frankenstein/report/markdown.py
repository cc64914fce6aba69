"""Small Markdown and number formatters shared by the note's sections; each returns a string or lines."""

from __future__ import annotations

import re
from collections.abc import Sequence


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """A pipe table; ``align`` has one 'l' or 'r' per column. Cells are escaped for pipes."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    rule = "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"
    return [line(header), rule, *(line(r) for r in rows)]


def num(x: float | None) -> str:
    """Five significant digits, '—' for missing."""
    return "—" if x is None else f"{x:.5g}"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.2f}%"


def code(text: str) -> str:
    return f"`{text}`"


def slug(text: str) -> str:
    """A file-name-safe form of a design id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)
