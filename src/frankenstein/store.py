"""The campaign store: one SQLite file in WAL mode, registered migrations, one transaction helper.

The format version is checked on open so an older Frankenstein never writes into a newer store.
Every write goes through :meth:`Store.transaction`, so a start (its row and all its turns) is
committed whole or not at all: a ``kill -9`` mid-start leaves nothing half-counted.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from frankenstein.errors import StoreError

FORMAT_VERSION = 1

# (name, SQL). Append only: a migration, once released, never changes.
MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_core",
        """
        CREATE TABLE registry (
            seq           INTEGER PRIMARY KEY,
            design_id     TEXT NOT NULL UNIQUE,
            kind          TEXT NOT NULL,
            name          TEXT NOT NULL,
            canonical     TEXT NOT NULL,
            design_hash   TEXT NOT NULL,
            seed          TEXT NOT NULL,
            schedule      TEXT NOT NULL,
            registered_at TEXT NOT NULL,
            tool_version  TEXT NOT NULL,
            prev_hash     TEXT NOT NULL,
            row_hash      TEXT NOT NULL
        );
        CREATE TABLE starts (
            id            INTEGER PRIMARY KEY,
            design_id     TEXT,
            block         INTEGER,
            position      INTEGER,
            arm           TEXT NOT NULL,
            rep           INTEGER NOT NULL DEFAULT 0,
            status        TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'invalid')),
            reason        TEXT,
            started_at    TEXT NOT NULL,
            finished_at   TEXT NOT NULL,
            engine        TEXT,
            engine_version TEXT,
            recipe        TEXT,
            metrics       TEXT NOT NULL DEFAULT '{}',
            resources     TEXT NOT NULL DEFAULT '{}',
            capabilities  TEXT NOT NULL DEFAULT '{}',
            UNIQUE (design_id, block, position, rep)
        );
        CREATE TABLE turns (
            start_id         INTEGER NOT NULL REFERENCES starts(id),
            idx              INTEGER NOT NULL,
            turn_id          TEXT NOT NULL,
            warmup           INTEGER NOT NULL,
            prompt_tokens    INTEGER,
            cached_tokens    INTEGER,
            generated_tokens INTEGER,
            prompt_ms        REAL,
            decode_ms        REAL,
            target_steps     INTEGER,
            drafted          INTEGER,
            accepted         INTEGER,
            ttft_ms          REAL,
            e2e_ms           REAL,
            error            TEXT,
            PRIMARY KEY (start_id, idx)
        );
        CREATE TABLE artifacts (
            start_id  INTEGER NOT NULL REFERENCES starts(id),
            name      TEXT NOT NULL,
            data      BLOB NOT NULL,
            PRIMARY KEY (start_id, name)
        );
        CREATE TABLE episodes (
            start_id      INTEGER NOT NULL REFERENCES starts(id),
            task_id       TEXT NOT NULL,
            draw          INTEGER NOT NULL,
            task_hash     TEXT NOT NULL,
            status        TEXT NOT NULL,
            passed        INTEGER NOT NULL,
            grader_rc     INTEGER,
            turns         INTEGER NOT NULL,
            detail        TEXT NOT NULL DEFAULT '{}',
            PRIMARY KEY (start_id, task_id, draw)
        );
        CREATE TABLE ledger (
            seq        INTEGER PRIMARY KEY,
            action     TEXT NOT NULL CHECK (action IN ('adopt', 'revert')),
            part       TEXT NOT NULL,
            design_id  TEXT,
            scope      TEXT NOT NULL DEFAULT '{}',
            forced     INTEGER NOT NULL DEFAULT 0,
            why        TEXT,
            parts      TEXT NOT NULL,
            at         TEXT NOT NULL
        );
        """,
    ),
    (
        "0002_refusals",
        """
        CREATE TABLE refusals (
            seq        INTEGER PRIMARY KEY,
            what       TEXT NOT NULL CHECK (what IN ('registration', 'adopt')),
            name       TEXT NOT NULL,
            part       TEXT,
            path       TEXT,
            reason     TEXT NOT NULL,
            at         TEXT NOT NULL
        );
        """,
    ),
]


def now_iso() -> str:
    """UTC timestamp with milliseconds, sortable as text."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class Store:
    """A campaign's SQLite store."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot open the store: {exc}") from exc

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The one way to write: BEGIN IMMEDIATE … COMMIT, rolled back on any exception."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self.transaction() as c:
            c.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            c.execute(
                "CREATE TABLE IF NOT EXISTS migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied_at TEXT NOT NULL)"
            )
            row = c.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
            if row is None:
                c.execute("INSERT INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
            elif int(row[0]) > FORMAT_VERSION:
                raise StoreError(
                    f"{self.path}: store format version {row[0]} is newer than this Frankenstein understands "
                    f"({FORMAT_VERSION}); upgrade Frankenstein"
                )
            done = {r[0] for r in c.execute("SELECT name FROM migrations")}
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                for statement in sql.split(";"):
                    if statement.strip():
                        c.execute(statement)
                c.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, now_iso()))
            c.execute("UPDATE meta SET value=? WHERE key='format_version'", (str(max(FORMAT_VERSION, int(row[0]) if row else 0)),))

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        return self.conn.execute(sql, params).fetchall()

    def insert_start(
        self,
        *,
        arm: str,
        status: str,
        started_at: str,
        metrics: dict[str, Any],
        turns: list[dict[str, Any]] = (),  # type: ignore[assignment]
        design_id: str | None = None,
        block: int | None = None,
        position: int | None = None,
        rep: int = 0,
        reason: str | None = None,
        engine: str | None = None,
        engine_version: str | None = None,
        recipe: dict[str, Any] | None = None,
        resources: dict[str, Any] | None = None,
        capabilities: dict[str, Any] | None = None,
        artifacts: dict[str, bytes] | None = None,
        episodes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> int:
        """Write one start with its turns, artifacts and episodes in one transaction; return its id."""
        with self.transaction() as c:
            cur = c.execute(
                """INSERT INTO starts (design_id, block, position, arm, rep, status, reason, started_at, finished_at,
                   engine, engine_version, recipe, metrics, resources, capabilities)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)""",
                (
                    design_id, block, position, arm, rep, status, reason, started_at, now_iso(), engine,
                    engine_version, json.dumps(recipe, sort_keys=True) if recipe is not None else None,
                    json.dumps(metrics, sort_keys=True), json.dumps(resources or {}, sort_keys=True),
                    json.dumps(capabilities or {}, sort_keys=True),
                ),
            )
            start_id = int(cur.lastrowid or 0)
            for t in turns:
                c.execute(
                    f"INSERT INTO turns (start_id, {', '.join(TURN_COLUMNS)}) VALUES (?, {', '.join('?' * len(TURN_COLUMNS))})",
                    (start_id, *(t.get(k) for k in TURN_COLUMNS)),
                )
            for name, data in (artifacts or {}).items():
                c.execute("INSERT INTO artifacts VALUES (?,?,?)", (start_id, name, data))
            for e in episodes:
                c.execute(
                    "INSERT INTO episodes VALUES (?,?,?,?,?,?,?,?,?)",
                    (start_id, e["task_id"], e["draw"], e["task_hash"], e["status"], int(e["passed"]),
                     e.get("grader_rc"), e["turns"], json.dumps(e.get("detail", {}), sort_keys=True)),
                )
        return start_id


TURN_COLUMNS = (
    "idx", "turn_id", "warmup", "prompt_tokens", "cached_tokens", "generated_tokens", "prompt_ms", "decode_ms",
    "target_steps", "drafted", "accepted", "ttft_ms", "e2e_ms", "error",
)
