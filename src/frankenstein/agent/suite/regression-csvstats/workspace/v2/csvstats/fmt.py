"""Output: the text table (as in 1.x) and JSON (new in 2.0)."""

from __future__ import annotations

import json
from typing import Any

BASE_FIELDS = ("count", "mean", "median", "stdev", "min", "max")


def number(x: Any) -> str:
    return str(x) if isinstance(x, int) else f"{x:.2f}"


def fields_of(summaries: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    extra = [k for k in (summaries[0][2] if summaries else {}) if k not in BASE_FIELDS]
    return [*BASE_FIELDS, *extra]


def table(summaries: list[tuple[str, str, dict[str, Any]]]) -> str:
    fields = fields_of(summaries)
    header = ["group", "column", *fields]
    rows = [[label, col, *(number(s[f]) for f in fields)] for label, col, s in summaries]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in [header, *rows])


def as_json(summaries: list[tuple[str, str, dict[str, Any]]]) -> str:
    out: dict[str, dict[str, Any]] = {}
    for label, col, s in summaries:
        out.setdefault(label, {})[col] = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in s.items()}
    return json.dumps(out, indent=2, sort_keys=True)
