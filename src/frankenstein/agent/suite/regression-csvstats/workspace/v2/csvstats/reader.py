"""Read a CSV file into rows, inferring numbers."""

from __future__ import annotations

import csv
from pathlib import Path

Value = int | float | str


def convert(text: str) -> Value:
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def read_rows(path: str | Path) -> list[dict[str, Value]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [{key: convert(raw) for key, raw in row.items()} for row in csv.DictReader(f)]


def is_number(value: Value) -> bool:
    return isinstance(value, (int, float))


def numeric_columns(rows: list[dict[str, Value]]) -> list[str]:
    if not rows:
        return []
    return [name for name in rows[0] if all(is_number(r[name]) for r in rows)]
