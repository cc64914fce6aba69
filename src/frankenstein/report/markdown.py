"""Small Markdown and number formatters shared by the note's sections; each returns a string or lines."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    """One table as :func:`md_table` rendered it: its cells (unescaped) and its Markdown lines."""

    header: list[str]
    rows: list[list[str]]
    align: str
    lines: list[str]


_CAPTURED: ContextVar[list[Table] | None] = ContextVar("frank_md_tables", default=None)


@contextmanager
def capture_tables() -> Iterator[list[Table]]:
    """Every table :func:`md_table` renders inside the block is appended to the yielded list, in order
    (how ``note.json`` gets every table of the note, whichever section made it)."""
    tables: list[Table] = []
    token = _CAPTURED.set(tables)
    try:
        yield tables
    finally:
        _CAPTURED.reset(token)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """A pipe table; ``align`` has one 'l' or 'r' per column. Cells are escaped for pipes."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    rule = "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"
    lines = [line(header), rule, *(line(r) for r in rows)]
    captured = _CAPTURED.get()
    if captured is not None:
        captured.append(Table([str(c) for c in header], [[str(c) for c in r] for r in rows], align, lines))
    return lines


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
