"""Small Markdown and number formatters shared by the note's sections; each returns a string or lines."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from frankenstein.measure.metrics import BUILTIN


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


def decimals(x: float) -> int:
    """How many decimals ``x`` shows at five significant digits (``num``): 14.36 -> 2, 10.0 -> 0."""
    text = f"{x:.5g}"
    return 0 if "e" in text or "." not in text else len(text.split(".")[1])


def row_nums(xs: Sequence[float | None], extra: Sequence[float | None] = (), sign: bool = False) -> list[str]:
    """``xs`` at one precision: as many decimals as the most precise of them needs at five significant
    digits, so trailing zeros stay (14.360 beside 14.359); ``extra`` (a mean) one decimal more; ``sign``:
    a + on positive values (differences)."""
    places = max((decimals(x) for x in xs if x is not None), default=0)
    plus = "+" if sign else ""

    def fmt(x: float | None, d: int) -> str:
        return "—" if x is None else f"{round(x, 9):{plus}.{d}f}"

    return [fmt(x, places) for x in xs] + [fmt(x, places + 1) for x in extra]


PER = {"verify_step_ms": "ms per step", "decode_ms_per_token": "ms per token"}  # the unit with what it is per


def unit(metric: str) -> str:
    """The metric's unit in words beside a difference ('ms per step'): the metric registry's unit
    (:mod:`frankenstein.measure.metrics`), with what it is per where the name says; the name where unknown."""
    if metric in PER:
        return PER[metric]
    m = BUILTIN.get(metric)
    return m.unit if m is not None else metric


def difference(x: float | None, metric: str) -> str:
    """An absolute difference in the metric's unit: '-0.70 ms per step' (two significant decimals at least)."""
    if x is None:
        return "—"
    x = round(x, 9)  # a mean of differences that cancel reads 0, not float noise
    places = min(6, max(2, 1 - math.floor(math.log10(abs(x))))) if x else 2
    return f"{x:+.{places}f} {unit(metric)}"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.2f}%"


def code(text: str) -> str:
    return f"`{text}`"


def slug(text: str) -> str:
    """A file-name-safe form of a design id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)
