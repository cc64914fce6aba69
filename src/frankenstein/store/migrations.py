"""The store's schema: its format version, the registered migrations (append only), the record tables the
evidence chain covers, and how a store is brought to this frank's format on open."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from frankenstein.errors import StoreError
from frankenstein.store.rows import now_iso

# 2: per-turn metrics in turns.metrics (JSON); version-1 stores are migrated on open.
# 3: the evidence chain (0004); records written before it are sealed into the chain when it is created.
FORMAT_VERSION = 3

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
    (
        # Per-turn metrics as one JSON object: a new engine metric needs no migration. The fixed metric
        # columns of 0001 stay for campaigns written before; turns_of() reads both.
        "0003_turn_metrics",
        "ALTER TABLE turns ADD COLUMN metrics TEXT NOT NULL DEFAULT '{}'",
    ),
    (
        # The evidence chain over every appended record (frankenstein.chain), and forced overrides of a
        # failed verification (themselves records in the chain).
        "0004_chain",
        """
        CREATE TABLE chain (
            seq        INTEGER PRIMARY KEY,
            kind       TEXT NOT NULL,
            ref        INTEGER NOT NULL,
            label      TEXT NOT NULL,
            digest     TEXT NOT NULL,
            prev_hash  TEXT NOT NULL,
            row_hash   TEXT NOT NULL
        );
        CREATE TABLE overrides (
            seq        INTEGER PRIMARY KEY,
            command    TEXT NOT NULL,
            why        TEXT NOT NULL,
            problem    TEXT NOT NULL,
            at         TEXT NOT NULL
        );
        """,
    ),
    (
        # Per-request timings of the traffic `frank serve` served, tagged with the ledger step it served
        # (NULL: the base recipe, before any step). Observations, not evidence: outside the chain, never
        # read by a verdict (report/observed.py prints them as such).
        "0005_served_requests",
        """
        CREATE TABLE served_requests (
            seq           INTEGER PRIMARY KEY,
            at            TEXT NOT NULL,
            step          INTEGER,
            route         TEXT NOT NULL,
            status        INTEGER NOT NULL,
            ms            REAL NOT NULL,
            engine_error  INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX served_requests_step ON served_requests (step, route)
        """,
    ),
    (
        # Agent draws run outside any design (`frank tasks draw --campaign`), one row per draw, tagged with the
        # ledger step served when it ran (NULL: the base recipe). Observations, not evidence: outside the chain,
        # never read by a verdict (report/observed.py prints them per ledger step as such).
        "0006_observed_draws",
        """
        CREATE TABLE observed_draws (
            seq             INTEGER PRIMARY KEY,
            at              TEXT NOT NULL,
            step            INTEGER,
            draw            INTEGER NOT NULL,
            episodes        INTEGER NOT NULL,
            passed          INTEGER NOT NULL,
            engine_errors   INTEGER NOT NULL,
            episode_errors  INTEGER NOT NULL
        );
        CREATE INDEX observed_draws_step ON observed_draws (step)
        """,
    ),
    (
        # Part status steps (frankenstein.part_status): park, stop and unpark are ledger steps too. SQLite cannot
        # change a CHECK, so the table is rebuilt with the same columns and rows (the chain's digests of its
        # records read the same).
        "0007_ledger_part_status",
        """
        CREATE TABLE ledger_with_status (
            seq        INTEGER PRIMARY KEY,
            action     TEXT NOT NULL CHECK (action IN ('adopt', 'revert', 'park', 'stop', 'unpark')),
            part       TEXT NOT NULL,
            design_id  TEXT,
            scope      TEXT NOT NULL DEFAULT '{}',
            forced     INTEGER NOT NULL DEFAULT 0,
            why        TEXT,
            parts      TEXT NOT NULL,
            at         TEXT NOT NULL
        );
        INSERT INTO ledger_with_status (seq, action, part, design_id, scope, forced, why, parts, at)
            SELECT seq, action, part, design_id, scope, forced, why, parts, at FROM ledger;
        DROP TABLE ledger;
        ALTER TABLE ledger_with_status RENAME TO ledger
        """,
    ),
    (
        # A served request outside what the served recipe was adopted for (`adopt --scope`), in words
        # (e.g. "context 40960 > 32768 tokens"); NULL: within it, or nothing to check it against.
        "0008_served_outside_scope",
        "ALTER TABLE served_requests ADD COLUMN outside_scope TEXT",
    ),
]

BOOTSTRAP = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS migrations (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, applied_at TEXT NOT NULL)",
)


def statements(sql: str) -> list[str]:
    """A migration's statements, one by one."""
    return [x for x in sql.split(";") if x.strip()]


# Each record kind: its table, its key column, and its child tables (rows keyed by the record's id).
RECORD_TABLES: dict[str, tuple[str, str]] = {
    "registry": ("registry", "seq"),
    "start": ("starts", "id"),
    "ledger": ("ledger", "seq"),
    "refusal": ("refusals", "seq"),
    "override": ("overrides", "seq"),
}
START_CHILDREN = (("turns", "idx"), ("artifacts", "name"), ("episodes", "task_id, draw"))


def migrate(c: sqlite3.Connection, path: Path, seal: Callable[[sqlite3.Connection], None]) -> None:
    """Bring the store on ``c`` (inside the caller's transaction) to this frank's format: bootstrap, every
    migration not yet applied, in order; ``seal`` chains the records written before the chain existed."""
    for statement in BOOTSTRAP:
        c.execute(statement)
    row = c.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
    if row is None:
        c.execute("INSERT INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
    elif int(row[0]) > FORMAT_VERSION:
        raise StoreError(
            f"{path}: store format version {row[0]} is newer than this Frankenstein understands "
            f"({FORMAT_VERSION}); upgrade Frankenstein"
        )
    done = {r[0] for r in c.execute("SELECT name FROM migrations")}
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        for statement in statements(sql):
            c.execute(statement)
        c.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, now_iso()))
        if name == "0004_chain":
            seal(c)
    c.execute(
        "UPDATE meta SET value=? WHERE key='format_version'",
        (str(max(FORMAT_VERSION, int(row[0]) if row else 0)),),
    )


def check_read_only_format(conn: sqlite3.Connection, path: Path, reason: str | None) -> None:
    """A read-only store cannot be migrated: it is read as it is when its format is this frank's."""
    row = conn.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
    done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
    missing = [name for name, _ in MIGRATIONS if name not in done]
    if row is None or int(row[0]) != FORMAT_VERSION or missing:
        raise StoreError(
            f"{path}: the campaign is read-only ({reason}) and its store is at another format "
            f"({row[0] if row else 'none'}, this frank reads {FORMAT_VERSION}); it cannot be upgraded read-only"
        )
