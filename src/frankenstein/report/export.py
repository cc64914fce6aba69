"""Machine-readable exports: ``frank analyze --json``, ``frank replay --json/--csv`` and the note's
``note.json``. Each JSON document names its schema and version (``"schema": "frank.analysis"``,
``"version": 2``; :data:`VERSIONS`); the JSON Schema files ship in ``frankenstein/data/schemas/`` and docs/exports.md
describes every field. Numbers are plain JSON numbers (non-finite ones become null); exact p values are
fractions as text ("1/64") beside their decimal.

    analysis_doc(analysis, percentiles, not_fresh) -> dict   frank analyze DESIGN_ID --json
    verdict_doc(verdict, source) -> dict            frank analyze --blocks FILE --json
    replay_doc(start_id, outcome) -> dict           frank replay ... --json
    replay_csv(start_id, outcome) -> str            frank replay ... --csv
    note_doc(data, tables, lines) -> dict           note.json beside note.md
    dumps(doc) -> str                               the JSON text (sorted keys, two-space indent)
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from frankenstein.design import timespent
from frankenstein.design.analysis import Analysis
from frankenstein.design.percentiles import Percentiles, rows_percentiles
from frankenstein.design.rules import Verdict
from frankenstein.design.start import StartOutcome
from frankenstein.report.collect import NoteData
from frankenstein.report.markdown import Table

# Version 2 of analysis, replay and note: the latency percentiles gained tpot_ms (the old per-turn mean,
# formerly itl_ms), pre_ms and post_ms, and itl_ms became the pooled chunk gaps; replay turns carry
# chunk_gaps_ms. The verdict document did not change.
VERSIONS = {"analysis": 2, "verdict": 1, "replay": 2, "note": 2}
SCHEMAS = {
    "analysis": "analysis.schema.json",
    "verdict": "verdict.schema.json",
    "replay": "replay.schema.json",
    "note": "note.schema.json",
}
TURN_KEYS = ("idx", "turn_id", "warmup", "error")


def jsonable(x: Any) -> Any:
    """Plain JSON values: Fractions as text, non-finite floats as null, tuples as lists, keys as text."""
    if isinstance(x, Fraction):
        return str(x)
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if x is None or isinstance(x, str | int | bool):
        return x
    return str(x)


def dumps(doc: Mapping[str, Any]) -> str:
    return json.dumps(jsonable(doc), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


# ---------------------------------------------------------------- frank analyze --json


def _per_arm(per_block: Mapping[str, Mapping[int, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Each metric's arithmetic mean per arm over the blocks that have it."""
    out: dict[str, dict[str, float]] = {}
    for metric, blocks in per_block.items():
        acc: dict[str, list[float]] = {}
        for arms in blocks.values():
            for arm, v in arms.items():
                acc.setdefault(arm, []).append(v)
        out[metric] = {arm: sum(vs) / len(vs) for arm, vs in acc.items()}
    return out


def _p(v: Verdict | None) -> dict[str, Any] | None:
    if v is None or v.p is None:
        return None
    return {"exact": str(v.p), "value": float(v.p), "scipy": v.p_scipy}


def verdict_doc(v: Verdict, source: str) -> dict[str, Any]:
    """``frank analyze --blocks FILE --json``: the rule's verdict on block values measured elsewhere."""
    return jsonable(
        {
            "schema": "frank.verdict",
            "version": VERSIONS["verdict"],
            "source": source,
            "word": v.word,
            "reason": v.reason,
            "p": _p(v),
            "interval": v.ci.model_dump(mode="json") if v.ci is not None else None,
            "verdict": v.model_dump(mode="json"),
        }
    )


def analysis_doc(a: Analysis, percentiles: Percentiles | None = None, not_fresh: Sequence[str] = ()) -> dict[str, Any]:
    """Everything ``frank analyze DESIGN_ID`` prints, as one JSON object; ``not_fresh``: the arms whose ok
    starts ran against a server already running (``design.facts``)."""
    reg, d = a.reg, a.reg.design
    v = a.verdict
    return jsonable(
        {
            "schema": "frank.analysis",
            "version": VERSIONS["analysis"],
            "design": {
                "id": reg.design_id,
                "hash": reg.design_hash,
                "name": d.name,
                "kind": d.kind,
                "hypothesis": d.hypothesis,
                "primary_metric": d.primary_metric,
                "units": {m: reg.unit(m) for m in (d.primary_metric, *d.secondary)},
                "direction": reg.frozen.direction,
                "blocks": d.blocks,
                "registered_at": reg.registered_at,
            },
            "word": a.word,
            "reason": a.reason,
            "blocks_done": a.blocks_done,
            "p": _p(v),
            "interval": v.ci.model_dump(mode="json") if v is not None and v.ci is not None else None,
            "verdict": v.model_dump(mode="json") if v is not None else None,
            "per_block": {
                m: {str(b + 1): arms for b, arms in sorted(blocks.items())} for m, blocks in a.per_block.items()
            },
            "per_arm": _per_arm(a.per_block),
            "secondary": a.secondary,
            "speculation": a.speculation,
            "percentiles": percentiles or {},
            "time_spent": timespent.as_json(a.time_spent),
            "dropped": a.dropped,
            "failures": [
                {"block": f.block + 1, "arm": f.arm, "status": f.status, "reason": f.reason} for f in a.failures
            ],
            "warnings": a.warnings,
            "not_fresh": list(not_fresh),
            "invalidated": a.invalidated,
            "fidelity": a.fidelity,
            "lines": a.lines,
            "vetoes": [{"name": v.name, "metric": v.metric, "word": v.word, "observed": v.observed} for v in a.vetoes],
            "predictions": [
                {
                    "design_id": c.design_id,
                    "predicted": c.predicted,
                    "observed": c.observed,
                    "unit": c.unit,
                    "ratio": c.ratio,
                    "difference": c.difference,
                    "blocks": c.blocks,
                }
                for c in a.predictions
            ],
        }
    )


# ---------------------------------------------------------------- frank replay --json / --csv


def _turn(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k not in TURN_KEYS}
    return {
        "idx": int(row["idx"]),
        "turn_id": str(row["turn_id"]),
        "warmup": bool(row["warmup"]),
        "error": row.get("error"),
        "metrics": out,
    }


def replay_doc(start_id: int, out: StartOutcome) -> dict[str, Any]:
    """The start (recipe, engine, status, its metrics, latency percentiles) and every turn's row."""
    return jsonable(
        {
            "schema": "frank.replay",
            "version": VERSIONS["replay"],
            "start_id": start_id,
            "recipe": {"name": out.recipe.name, "engine": out.recipe.engine, "parts": list(out.recipe.parts)},
            "engine": out.engine,
            "engine_version": out.engine_version,
            "status": out.status,
            "reason": out.reason,
            "started_at": out.started_at,
            "phases": timespent.record_json(timespent.read(out.resources.get("phases"))),
            "metrics": out.metrics,
            "percentiles": rows_percentiles(out.rows),
            "turns": [_turn(r) for r in out.rows],
        }
    )


def replay_csv(start_id: int, out: StartOutcome) -> str:
    """One row per turn: start id, status, the turn's keys and metrics, then the start's metrics as
    ``start.<name>`` columns (the same on every row). Missing values are empty cells; a list (a turn's
    ``chunk_gaps_ms``) is one cell of JSON text."""
    turn_keys = sorted({k for r in out.rows for k in r if k not in TURN_KEYS})
    start_keys = sorted(out.metrics)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["start_id", "status", *TURN_KEYS, *turn_keys, *(f"start.{k}" for k in start_keys)])
    for r in out.rows:
        cells = [start_id, out.status, r["idx"], r["turn_id"], int(bool(r["warmup"])), r.get("error")]
        cells += [r.get(k) for k in turn_keys] + [out.metrics.get(k) for k in start_keys]
        w.writerow([_cell(c) for c in cells])
    return buf.getvalue()


def _cell(c: Any) -> Any:
    if c is None:
        return ""
    return json.dumps(c, separators=(",", ":")) if isinstance(c, list) else c


# ---------------------------------------------------------------- note.json

NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def cell_number(cell: str) -> float | None:
    """The number a cell shows: '8.25' → 8.25, '+1.50%' → 0.015, '−0.1' → -0.1; None for anything else."""
    text = cell.strip().replace("−", "-").strip("`")
    scale = 1.0
    if text.endswith("%"):
        text, scale = text[:-1], 0.01
    if not NUMBER.fullmatch(text):
        return None
    return float(text) * scale


def _title(line: str) -> str:
    return line.lstrip("#").strip()


def locate(tables: Sequence[Table], lines: Sequence[str]) -> list[tuple[Table, int]]:
    """Each captured table that the note's lines contain, with the index of its first line (in order)."""
    out, cursor = [], 0
    for t in tables:
        n = len(t.lines)
        at = next((i for i in range(cursor, len(lines) - n + 1) if list(lines[i : i + n]) == t.lines), None)
        if at is None:  # rendered but not part of the note (a section that built a table and dropped it)
            continue
        out.append((t, at))
        cursor = at + n
    return out


def _place(before: Sequence[str]) -> tuple[str | None, str | None, str | None]:
    """The ``## `` section line, the ``### `` subsection title and the caption (the paragraph line just
    above the table, when it ends with a colon) of a table whose lines follow ``before``."""
    section = subsection = caption = None
    nearest = True
    for line in reversed(before):
        if not line.strip():
            continue
        if line.startswith("## "):
            section = line
            break
        if line.startswith("### "):
            subsection = subsection or _title(line)
        elif nearest and line.rstrip().endswith(":"):
            caption = line.strip()
        nearest = False
    return section, subsection, caption


def note_doc(data: NoteData, tables: Sequence[Table], lines: Sequence[str]) -> dict[str, Any]:
    """The note's designs (id, hash, analysis) and every table in it with its section and caption."""
    heads = {f"## Design `{d.design_id}`": d for d in data.designs}
    out_tables = []
    for t, at in locate(tables, lines):
        section, subsection, caption = _place(lines[:at])
        design = next((d for head, d in heads.items() if section and section.startswith(head + ":")), None)
        out_tables.append(
            {
                "section": _title(section) if section else None,
                "subsection": subsection,
                "caption": caption,
                "design_id": design.design_id if design else None,
                "design_hash": design.reg.design_hash if design else None,
                "header": t.header,
                "align": t.align,
                "rows": t.rows,
                "numbers": [[cell_number(c) for c in row] for row in t.rows],
            }
        )
    return jsonable(
        {
            "schema": "frank.note",
            "version": VERSIONS["note"],
            "campaign": data.campaign,
            "served_recipe": {"base": data.base, "parts": data.served},
            "since": data.since,
            "verification": data.verification,
            "designs": [
                {
                    "design_id": d.design_id,
                    "design_hash": d.reg.design_hash,
                    "name": d.reg.design.name,
                    "kind": d.reg.design.kind,
                    "word": d.says,
                    "error": d.error,
                    "analysis": analysis_doc(d.analysis, d.percentiles, d.facts.not_fresh)
                    if d.analysis is not None
                    else None,
                }
                for d in data.designs
            ],
            "tables": out_tables,
        }
    )
