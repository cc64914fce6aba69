"""The schema frank creates, and whatever else a database holds: a trigger, a view, an index, a table or a
changed table that frank did not create is refused before any write is sealed and by ``frank verify``.

A trigger can rewrite a record between frank's INSERT and the chain's digest of it, or after; a view or an
extra table can hide or shadow what is read. The expected set is built once per process by applying the
store's own statements to an empty in-memory database, so it follows every migration without a list to
keep in step; tables are compared by their SQL text (whitespace folded), so ``ALTER TABLE`` is seen too.

    expected(statements) -> frozenset[Object]
    foreign(conn, expected) -> str | None        the first object frank did not create, as a sentence
"""

from __future__ import annotations

import sqlite3
from functools import cache

Object = tuple[str, str, str, str]  # type, name, table, SQL (whitespace folded; '' for SQLite's own indexes)


def _objects(conn: sqlite3.Connection) -> set[Object]:
    """Every object of the main schema but SQLite's statistics tables (``ANALYZE``'s ``sqlite_stat*``, which
    steer the query planner and hold no records)."""
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    return {
        (str(t), str(n), str(tbl), " ".join(str(sql or "").split()))
        for t, n, tbl, sql in rows
        if not str(n).startswith("sqlite_stat")
    }


@cache
def expected(statements: tuple[str, ...]) -> frozenset[Object]:
    """What ``statements`` create in an empty database."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in statements:
            conn.execute(statement)
        return frozenset(_objects(conn))
    finally:
        conn.close()


def foreign(conn: sqlite3.Connection, want: frozenset[Object]) -> str | None:
    """The first schema object of ``conn`` that is not in ``want`` (by type, name, table, SQL), as a sentence."""
    have = _objects(conn)
    names = {(t, n) for t, n, _, _ in want}
    for t, n, tbl, sql in sorted(have - want, key=lambda o: ("table", "index", "view", "trigger").index(o[0])):
        what = f"{t} {n!r}" + (f" on {tbl}" if t in ("trigger", "index") and tbl != n else "")
        if (t, n) in names:
            return f"the database's {what} is not the one frank created (it was altered: {sql[:120]!r})"
        article = "an" if t[0] in "aeiou" else "a"
        return f"the database holds {article} {what} that frank did not create ({sql[:120]!r})"
    return None
