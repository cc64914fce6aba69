"""Group rows by a column."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def group_by(rows: list[dict[str, Any]], key: str) -> dict[Any, list[dict[str, Any]]]:
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row[key]].append(row)
    return {k: groups[k] for k in sorted(groups)}


def column(rows: list[dict[str, Any]], name: str) -> list[Any]:
    return [row[name] for row in rows]
