"""Chain verification: a record as stored and as frank meant it, the slots a registration created, and the
end-to-end check of the evidence chain (every link, every record against its digest, the head file, records
outside the chain, starts outside their slots, orphan rows)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from frankenstein import chain, schema
from frankenstein.chain import Link
from frankenstein.errors import RegistryError
from frankenstein.store.migrations import RECORD_TABLES, START_CHILDREN
from frankenstein.store.rows import _link


def registered_slots(schedule: list[list[str]]) -> dict[tuple[int, int], tuple[str, int]]:
    """(block, position) -> (arm, rep) for every start a schedule registered (the same walk as ``Registered.slots``)."""
    out = {}
    for b, order in enumerate(schedule):
        seen: dict[str, int] = {}
        for pos, arm in enumerate(order):
            out[(b, pos)] = (arm, seen.get(arm, 0))
            seen[arm] = seen.get(arm, 0) + 1
    return out


def _slot_problem(
    c: sqlite3.Connection, design_id: str, block: int | None, position: int | None, rep: int, arm: str
) -> str | None:
    """Why a start is not one the registration of ``design_id`` created (None when it is; an unregistered
    design is left to the caller: a start may be stored before its design is read back)."""
    row = c.execute("SELECT schedule FROM registry WHERE design_id = ?", (design_id,)).fetchone()
    if row is None:
        return None
    try:
        slots = registered_slots(json.loads(row[0]))
    except (ValueError, TypeError):
        return "its design's stored schedule does not read"
    blocks = len(json.loads(row[0]))
    if (block, position) not in slots:
        return (
            f"block {_one(block)}, position {_one(position)} is not a slot the registration created "
            f"({blocks} blocks of {len(slots) // max(blocks, 1)} starts)"
        )
    want_arm, want_rep = slots[(block, position)]  # type: ignore[index]
    if (arm, rep) != (want_arm, want_rep):
        return f"the registration put arm {want_arm} rep {want_rep} in this slot, not arm {arm} rep {rep}"
    return None


def _one(v: int | None) -> int | None:
    return v + 1 if v is not None else None


def _as_meant(
    c: sqlite3.Connection, kind: str, ref: int, meant: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """The record as frank meant it: every value frank set is its own, never the database's; only a column
    frank does not set (a default a later migration adds) is taken from the row as stored. A table whose row
    count differs from what was inserted is taken as meant (the extra or missing rows then fail ``verify``)."""
    found = _record(c, kind, ref)
    stored = found[1] if found else {}
    out = {}
    for table, rows in meant.items():
        back = stored.get(table, [])
        if len(back) != len(rows):
            out[table] = [dict(r) for r in rows]
        else:
            out[table] = [{**dict(b), **r} for b, r in zip(back, rows, strict=True)]
    return out


def _record(c: sqlite3.Connection, kind: str, ref: int) -> tuple[str, dict[str, list[sqlite3.Row]]] | None:
    """A record's label and its rows by table, as stored now (None when its main row is gone)."""
    table, key = RECORD_TABLES[kind]
    main = c.execute(f"SELECT * FROM {table} WHERE {key} = ?", (ref,)).fetchall()
    if not main:
        return None
    tables = {table: main}
    if kind == "start":
        for child, order in START_CHILDREN:
            tables[child] = c.execute(f"SELECT * FROM {child} WHERE start_id = ? ORDER BY {order}", (ref,)).fetchall()
    return chain.label_of(kind, main[0]), tables


def verify_chain(conn: sqlite3.Connection, path: Path, head_path: Path, expected: frozenset[schema.Object]) -> int:
    """Check the evidence chain end to end; return the number of records. Raises :class:`RegistryError`
    naming the first broken record: a chain row changed or removed, a record changed or deleted, the head
    file disagreeing (the chain rewritten, the last records deleted), a record written outside frank, a
    start outside its design's registered slots, rows of a start that is not recorded; first of all, a
    trigger, view or table in the database that frank did not create."""
    problem = schema.foreign(conn, expected)
    if problem:
        raise RegistryError(f"{path.name}: {problem}")
    with chain.head_read_lock(head_path):
        links = chain_links(conn)
        head = chain.read_head(head_path)
    prev: Link | None = None
    for link in links:
        problem = chain.check_link(prev, link)
        if problem is None:
            found = _record(conn, link.kind, link.ref)
            if found is None:
                problem = f"{link.label}: deleted after it was recorded (chain record {link.seq})"
            elif chain.digest(found[1]) != link.digest:
                problem = f"{found[0]}: changed after it was recorded (chain record {link.seq})"
        if problem:
            raise RegistryError(problem)
        prev = link
    problem = chain.check_head(links, head, head_path)
    if problem:
        raise RegistryError(problem)
    problem = _outside_chain(conn, links) or _outside_slots(conn) or _orphans(conn)
    if problem:
        raise RegistryError(problem)
    return len(links)


def verify_kept(conn: sqlite3.Connection, text: str, source: str) -> tuple[Link, int]:
    """Check a head kept outside the campaign (``frank verify --expect-head``): the chain must still hold
    that record with that hash. Returns it and the chain's length; raises :class:`RegistryError`
    naming what is wrong (no head in ``text``, records deleted, the chain rewritten)."""
    kept = chain.parse_kept(text)
    if kept is None:
        raise RegistryError(f"{source}: no chain head in it (expected 'SEQ HASH' as frank verify prints it)")
    links = chain_links(conn)
    link, problem = chain.check_kept(links, kept[0], kept[1], source)
    if link is None:
        raise RegistryError(problem or f"{source}: the kept head is not in the chain")
    return link, len(links)


def _outside_chain(conn: sqlite3.Connection, links: list[Link]) -> str | None:
    chained = {(x.kind, x.ref) for x in links}
    for kind, (table, key) in RECORD_TABLES.items():
        for (ref,) in conn.execute(f"SELECT {key} FROM {table} ORDER BY {key}").fetchall():
            if (kind, ref) not in chained:
                found = _record(conn, kind, int(ref))
                label = found[0] if found else f"{kind} {ref}"
                why = ""
                if kind == "start":
                    r = conn.execute("SELECT * FROM starts WHERE id = ?", (ref,)).fetchone()
                    slot = r["design_id"] and _slot_problem(
                        conn, r["design_id"], r["block"], r["position"], r["rep"], r["arm"]
                    )
                    why = f"; {slot}" if slot else ""
                return f"{label}: not in the chain (written outside frank){why}"
    return None


def _outside_slots(conn: sqlite3.Connection) -> str | None:
    for r in conn.execute("SELECT * FROM starts WHERE design_id IS NOT NULL ORDER BY id").fetchall():
        problem = _slot_problem(conn, r["design_id"], r["block"], r["position"], r["rep"], r["arm"])
        if problem:
            return f"{chain.label_of('start', r)}: {problem}"
    return None


def _orphans(conn: sqlite3.Connection) -> str | None:
    for table, _ in START_CHILDREN:
        r = conn.execute(
            f"SELECT start_id FROM {table} WHERE start_id NOT IN (SELECT id FROM starts) LIMIT 1"
        ).fetchone()
        if r is not None:
            return (
                f"{table} of start {r[0]}: that start is not recorded (deleted, or the rows were written outside frank)"
            )
    return None


def chain_links(conn: sqlite3.Connection) -> list[Link]:
    """Every link of the evidence chain, in order."""
    return [_link(r) for r in conn.execute("SELECT * FROM chain ORDER BY seq").fetchall()]
