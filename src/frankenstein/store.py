"""The campaign store: one SQLite file in WAL mode, registered migrations, one transaction helper,
and the only place that speaks SQL or decodes stored JSON.

The format version is checked on open so an older Frankenstein never writes into a newer store.
Every write goes through :meth:`Store.transaction`, so a start (its row and all its turns) is
committed whole or not at all: a ``kill -9`` mid-start leaves nothing half-counted.

Writes (the only ones; each appends its record to the evidence chain in the same transaction, see
:mod:`frankenstein.chain`, and its head line to ``frank.head`` beside the database):

    insert_start(...) -> int                       a start with its turns, artifacts and episodes; only a slot
                                                   its design registered (block, position, rep, arm)
    append_registry(build) -> RegistryRow          build(last row or None) -> the row to append, in one transaction
    append_ledger(build) -> LedgerEntry            build(last step or None) -> the step to append, in one transaction
    insert_refusal(...) -> int
    insert_override(...) -> int                    a forced action on a campaign that failed verification

Integrity:

    verify() -> int                                every chain link, every record against its digest, the head
                                                   file, records outside the chain, starts outside their design's
                                                   slots; raises RegistryError naming the first broken record

Typed reads:

    registry_rows(), registry_head(), registry_row(design_id), design_ids(since)
    starts_of(design_id) -> list[StartRow]         ordered by block, position
    turns_of(start_id) -> list[dict]               per-turn metrics are a JSON column: a new metric needs no migration
    artifacts_of(design_id, name) -> {start_id: bytes}
    episodes_of(design_id) -> list[EpisodeRow]
    ledger_steps(), last_steps(n), refusals(since), overrides(), chain_links()
    served_requests() -> list[ServedRequest]       observations of `frank serve` (insert_served: outside the chain)
    observed_draws() -> list[ObservedDraw]         agent draws outside designs (insert_observed_draw: outside the chain)
"""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from frankenstein import chain, schema
from frankenstein.chain import Link
from frankenstein.errors import RegistryError, StoreError

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

TURN_KEYS = ("idx", "turn_id", "warmup", "error")  # columns; every other key of a turn row is a metric
LEGACY_TURN_METRICS = (
    "prompt_tokens",
    "cached_tokens",
    "generated_tokens",
    "prompt_ms",
    "decode_ms",
    "target_steps",
    "drafted",
    "accepted",
    "ttft_ms",
    "e2e_ms",
)


def busy_timeout_s(env: Mapping[str, str]) -> float:
    """Seconds SQLite itself waits for a lock per statement (``FRANK_DB_BUSY_TIMEOUT_S``, default 30)."""
    return _seconds(env, "FRANK_DB_BUSY_TIMEOUT_S", "30")


def lock_wait_s(env: Mapping[str, str]) -> float:
    """Seconds a write waits in all for another process's write lock (``FRANK_DB_LOCK_WAIT_S``,
    default 600: a minute-long hold by a backup or a second tool never loses a start)."""
    return _seconds(env, "FRANK_DB_LOCK_WAIT_S", "600")


def _seconds(env: Mapping[str, str], name: str, default: str) -> float:
    """A finite, non-negative number of seconds from the environment, or one clear error naming the variable."""
    text = env.get(name, default)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise StoreError(f"environment variable {name}={text!r}: expected a finite number of seconds >= 0")
    return value


def _disk_full(exc: BaseException) -> bool:
    """SQLite's SQLITE_FULL ("database or disk is full") or the OS's ENOSPC / EDQUOT."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return "database or disk is full" in str(exc)


def _test_kill(point: str) -> None:
    """Test hook: ``FRANK_TEST_KILL_AT=POINT`` makes frank SIGKILL itself here (tests of a crash inside a commit)."""
    if os.environ.get("FRANK_TEST_KILL_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def read_only_reason(path: Path) -> str | None:
    """Why the store at ``path`` can only be read (its folder or file not writable, a read-only file system),
    or None. SQLite's own word for it is "unable to open database file", even for a reading command."""
    folder = path.parent
    if folder.is_dir() and os.statvfs(folder).f_flag & os.ST_RDONLY:
        return "it is on a read-only file system"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{path.name} is not writable"
    if folder.is_dir() and not os.access(folder, os.W_OK):
        return f"its folder {folder} is not writable"
    return None


def _open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection. A WAL database in a folder that cannot be written needs ``immutable`` (no
    shared-memory file can be made), which reads the database file alone: a WAL file left with frames in it
    is refused rather than ignored."""
    if not path.exists():
        raise StoreError(f"{path}: no campaign store here, and the folder is read-only")
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        uri = f"{path.resolve().as_uri()}?mode=ro"
    else:
        uri = f"{path.resolve().as_uri()}?immutable=1"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


def now_iso() -> str:
    """UTC timestamp with milliseconds, sortable as text."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class Store:
    """A campaign's SQLite store."""

    def __init__(self, path: str | Path, *, head_mirror: Path | None = None) -> None:
        self.path = Path(path)
        self.head_path = chain.head_path(self.path)
        self.head_mirror = head_mirror  # ``[integrity] head_mirror``: every head line appended there too
        self._links: list[Link] = []  # appended in the open transaction; their head lines go out before COMMIT
        self._schema = schema.expected((*BOOTSTRAP, *(x for _, sql in MIGRATIONS for x in statements(sql))))
        self.read_only = read_only_reason(self.path)
        try:
            if self.read_only is not None:
                self.conn = _open_read_only(self.path)
                self._check_read_only_format()
                return
            self.conn = sqlite3.connect(
                self.path,
                timeout=min(busy_timeout_s(os.environ), lock_wait_s(os.environ)),  # one try never outwaits the whole
                isolation_level=None,
                check_same_thread=False,
            )
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
            self._repair_head()
            self._start_mirror()
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
        """The one way to write: BEGIN IMMEDIATE … COMMIT, rolled back on any exception. A transaction that
        appended chain records commits under the head file's lock: the pending lines, COMMIT, the head lines
        (:meth:`_commit`). A full disk is named as such; nothing of the transaction is then written."""
        if self.read_only is not None:
            raise StoreError(
                f"{self.path}: the campaign is read-only ({self.read_only}); this command writes to it, so it cannot "
                "run here (reading commands such as `frank verify` and `frank report` can)"
            )
        self._begin()
        self._links = []
        try:
            try:
                yield self.conn
                self._commit(self._links)
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                self._links = []
        except (sqlite3.OperationalError, OSError) as exc:
            if not _disk_full(exc):
                raise
            raise StoreError(
                f"{self.path}: disk full ({exc}): nothing of this record was written and nothing recorded before it "
                "was lost; free some space and run the command again (`frank run ID --resume` goes on where it "
                "stopped)"
            ) from exc

    def _commit(self, links: list[Link]) -> None:
        """COMMIT; with chain records, under the head file's lock: ``frank.head.pending`` first, then COMMIT,
        then the head lines, then the pending file goes. A kill anywhere in between is repaired on the next open
        (:meth:`_repair_head`). ``FRANK_TEST_KILL_AT`` (``before-commit`` | ``after-commit``) is a test hook:
        frank SIGKILLs itself at that point, so the tests can show the repair on a real kill."""
        if not links:
            self.conn.execute("COMMIT")
            return
        pending = chain.pending_path(self.head_path)
        with chain.head_lock(self.head_path) as fd:
            try:
                chain.write_pending(self.head_path, links)
                _test_kill("before-commit")
                self.conn.execute("COMMIT")
            except BaseException:
                pending.unlink(missing_ok=True)
                raise
            _test_kill("after-commit")
            try:
                chain.append_head(fd, links)
            except OSError as exc:
                raise StoreError(
                    f"{self.head_path}: cannot append the head line ({exc}); the record was committed and "
                    f"{pending.name} keeps its line: the next frank command on this campaign appends it"
                ) from exc
            pending.unlink(missing_ok=True)
            self._mirror(links)

    def _mirror(self, links: Sequence[Link | tuple[int, str]]) -> None:
        """Append head lines to ``[integrity] head_mirror`` (after frank.head: a mirror behind is still a head)."""
        if self.head_mirror is None or not links:
            return
        try:
            with chain.head_lock(self.head_mirror) as fd:
                chain.append_head(fd, links)
        except OSError as exc:
            raise StoreError(
                f"[integrity] head_mirror {self.head_mirror}: cannot append the head line ({exc}); the record was "
                "committed and frank.head has it"
            ) from exc

    def _start_mirror(self) -> None:
        """A mirror named but not there yet starts with every head line of the chain as it is now: it guards
        from this moment on (whoever could delete it could as well rewrite it)."""
        if self.head_mirror is None or self.head_mirror.exists():
            return
        self._mirror([(x.seq, x.row_hash) for x in self.chain_links()] or [])
        if not self.head_mirror.exists():
            self.head_mirror.touch()

    def _repair_head(self) -> None:
        """A pending file left by a kill inside a commit: append the head lines of the records the database
        holds; when it holds none of them, the commit never happened and there is nothing to add."""
        pending = chain.pending_path(self.head_path)
        if not pending.exists():
            return
        with chain.head_lock(self.head_path) as fd:
            lines = chain.read_head(pending)
            if lines is None:  # another process repaired it while this one waited for the lock
                return
            committed = {x.seq: x.row_hash for x in self.chain_links()}
            missing = chain.repair_plan(lines, committed, chain.read_head(self.head_path))
            chain.append_head(fd, missing)
            pending.unlink(missing_ok=True)
        if self.head_mirror is not None:
            self._mirror(chain.repair_plan(lines, committed, chain.read_head(self.head_mirror)))

    def _begin(self) -> None:
        """Take the write lock, waiting while another process holds it: SQLite's busy timeout per try,
        then retries with backoff until :func:`lock_wait_s` has passed. The caller's data (a finished
        start) stays in memory meanwhile; only a lock that never frees ends in one clear error."""
        wait_s = lock_wait_s(os.environ)
        t0 = time.monotonic()
        deadline, delay = t0 + wait_s, 0.05
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise StoreError(f"{self.path}: cannot write: {exc}") from exc
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(
                        f"{self.path}: the database stayed locked by another process for "
                        f"{time.monotonic() - t0:.0f} s; nothing was written (FRANK_DB_LOCK_WAIT_S={wait_s:g} "
                        "sets how long to wait)"
                    ) from exc
                time.sleep(min(delay, left))
                delay = min(delay * 2, 2.0)

    def _check_read_only_format(self) -> None:
        """A read-only store cannot be migrated: it is read as it is when its format is this frank's."""
        row = self.conn.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
        done = {r[0] for r in self.conn.execute("SELECT name FROM migrations")}
        missing = [name for name, _ in MIGRATIONS if name not in done]
        if row is None or int(row[0]) != FORMAT_VERSION or missing:
            raise StoreError(
                f"{self.path}: the campaign is read-only ({self.read_only}) and its store is at another format "
                f"({row[0] if row else 'none'}, this frank reads {FORMAT_VERSION}); it cannot be upgraded read-only"
            )

    def _migrate(self) -> None:
        with self.transaction() as c:
            for statement in BOOTSTRAP:
                c.execute(statement)
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
                for statement in statements(sql):
                    c.execute(statement)
                c.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, now_iso()))
                if name == "0004_chain":
                    self._seal_existing(c)
            c.execute(
                "UPDATE meta SET value=? WHERE key='format_version'",
                (str(max(FORMAT_VERSION, int(row[0]) if row else 0)),),
            )

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        """Raw rows, for tests and one-off inspection; library code uses the typed reads below."""
        return self.conn.execute(sql, params).fetchall()

    # ------------------------------------------------------------ writes

    def insert_start(
        self,
        *,
        arm: str,
        status: str,
        started_at: str,
        metrics: dict[str, Any],
        turns: Sequence[dict[str, Any]] = (),
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
        episodes: Sequence[dict[str, Any]] = (),
    ) -> int:
        """Write one start with its turns, artifacts and episodes in one transaction; return its id.
        A start of a registered design must be a slot its registration created (block, position, rep, arm).
        A start with phases (``resources["phases"]``) gets its ``write_s``: the seconds from this call until
        its rows (start, turns, artifacts, episodes) are inserted, the wait for the write lock included,
        measured just before its chain link is computed (the link and the commit are not in it)."""
        t0 = time.monotonic()
        with self.transaction() as c:
            problem = _slot_problem(c, design_id, block, position, rep, arm) if design_id is not None else None
            if problem:
                raise StoreError(
                    f"start refused: design {design_id}, block {_one(block)}, position {_one(position)}, "
                    f"rep {rep}, arm {arm}: {problem}"
                )
            row: dict[str, Any] = {
                "design_id": design_id,
                "block": block,
                "position": position,
                "arm": arm,
                "rep": rep,
                "status": status,
                "reason": reason,
                "started_at": started_at,
                "finished_at": now_iso(),
                "engine": engine,
                "engine_version": engine_version,
                "recipe": _dumps(recipe) if recipe is not None else None,
                "metrics": _dumps(metrics),
                "resources": _dumps(resources or {}),
                "capabilities": _dumps(capabilities or {}),
            }
            start_id = _insert(c, "starts", row)
            meant: dict[str, list[dict[str, Any]]] = {
                "starts": [],
                "turns": sorted((_turn_row(start_id, t) for t in turns), key=lambda r: r["idx"]),
                "artifacts": [
                    {"start_id": start_id, "name": n, "data": d} for n, d in sorted((artifacts or {}).items())
                ],
                "episodes": sorted(
                    (_episode_row(start_id, e) for e in episodes), key=lambda r: (r["task_id"], r["draw"])
                ),
            }
            for table in ("turns", "artifacts", "episodes"):
                _insert_many(c, table, meant[table])
            if resources is not None and isinstance(resources.get("phases"), Mapping):  # the caller's dict gets it too
                resources["phases"] = {**resources["phases"], "write_s": round(time.monotonic() - t0, 4)}
                row["resources"] = _dumps(resources)
                c.execute("UPDATE starts SET resources = ? WHERE id = ?", (row["resources"], start_id))
            meant["starts"] = [{"id": start_id, **row}]
            self._chain(c, "start", start_id, meant)
        return start_id

    def append_registry(self, build: Callable[[RegistryRow | None], RegistryRow]) -> RegistryRow:
        """Append the row ``build`` makes from the last row (None when empty), read in the same transaction."""
        with self.transaction() as c:
            last = c.execute("SELECT * FROM registry ORDER BY seq DESC LIMIT 1").fetchone()
            row = build(_registry(last) if last else None)
            c.execute(
                "INSERT INTO registry (seq, design_id, kind, name, canonical, design_hash, seed, schedule, registered_at,"
                " tool_version, prev_hash, row_hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    row.seq,
                    row.design_id,
                    row.kind,
                    row.name,
                    row.canonical,
                    row.design_hash,
                    row.seed,
                    row.schedule,
                    row.registered_at,
                    row.tool_version,
                    row.prev_hash,
                    row.row_hash,
                ),
            )
            self._chain(c, "registry", row.seq, {"registry": [asdict(row)]})
        return row

    def append_ledger(self, build: Callable[[LedgerEntry | None], LedgerEntry]) -> LedgerEntry:
        """Append the step ``build`` makes from the last step (None when empty); ``build`` may refuse by raising.
        The stored ``seq`` and ``at`` are the store's, whatever ``build`` put there."""
        with self.transaction() as c:
            last = c.execute("SELECT * FROM ledger ORDER BY seq DESC LIMIT 1").fetchone()
            e = build(_ledger(last) if last else None)
            at = now_iso()
            row = {
                "action": e.action,
                "part": e.part,
                "design_id": e.design_id,
                "scope": _dumps(e.scope),
                "forced": int(e.forced),
                "why": e.why,
                "parts": json.dumps(e.parts),
                "at": at,
            }
            seq = _insert(c, "ledger", row)
            self._chain(c, "ledger", seq, {"ledger": [{"seq": seq, **row}]})
        return LedgerEntry(
            seq=seq,
            action=e.action,
            part=e.part,
            design_id=e.design_id,
            scope=e.scope,
            forced=e.forced,
            why=e.why,
            parts=list(e.parts),
            at=at,
        )

    def insert_refusal(
        self, *, what: RefusalWhat, name: str, reason: str, part: str | None = None, path: str | None = None
    ) -> int:
        """Append one refusal in its own transaction; returns its seq."""
        row = {"what": what, "name": name, "part": part, "path": path, "reason": reason, "at": now_iso()}
        return self._append_one("refusal", row)

    def insert_override(self, *, command: str, why: str, problem: str) -> int:
        """Record that ``command`` was forced on a campaign that failed verification (``problem``), and why."""
        return self._append_one("override", {"command": command, "why": why, "problem": problem, "at": now_iso()})

    def _append_one(self, kind: str, row: dict[str, Any]) -> int:
        """Insert one single-row record and chain it, in its own transaction; returns its seq."""
        table, key = RECORD_TABLES[kind]
        with self.transaction() as c:
            seq = _insert(c, table, row)
            self._chain(c, kind, seq, {table: [{key: seq, **row}]})
        return seq

    # ------------------------------------------------------------ the evidence chain

    def insert_served(self, rows: Sequence[ServedRequest]) -> None:
        """Append served-request observations in one transaction (a batch; not part of the evidence chain)."""
        if not rows:
            return
        with self.transaction() as c:
            c.executemany(
                "INSERT INTO served_requests (at, step, route, status, ms, engine_error, outside_scope) "
                "VALUES (?,?,?,?,?,?,?)",
                [(r.at, r.step, r.route, r.status, r.ms, int(r.engine_error), r.outside_scope) for r in rows],
            )

    def insert_observed_draw(self, row: ObservedDraw) -> int:
        """Append one agent draw run outside any design (not part of the evidence chain); its seq."""
        with self.transaction() as c:
            cur = c.execute(
                "INSERT INTO observed_draws (at, step, draw, episodes, passed, engine_errors, episode_errors) "
                "VALUES (?,?,?,?,?,?,?)",
                (row.at, row.step, row.draw, row.episodes, row.passed, row.engine_errors, row.episode_errors),
            )
        return int(cur.lastrowid or 0)

    def _chain(
        self, c: sqlite3.Connection, kind: str, ref: int, meant: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
    ) -> Link:
        """Append record (kind, ref) to the chain. Its digest is of ``meant``, the rows frank built in memory
        and inserted, never of what the database hands back (a trigger could have rewritten them); a database
        holding a trigger, view or table frank did not create is refused before anything is sealed. Without
        ``meant`` (sealing records written before the chain existed) the record is digested as it reads now."""
        problem = schema.foreign(c, self._schema)
        if problem:
            raise StoreError(f"{self.path}: {problem}; nothing was written (verify names it; remove it first)")
        if meant is None:
            found = _record(c, kind, ref)
            assert found is not None, (kind, ref)
            label, record_digest = found[0], chain.digest(found[1])
        else:
            table = RECORD_TABLES[kind][0]
            label, record_digest = chain.label_of(kind, meant[table][0]), chain.digest(_as_meant(c, kind, ref, meant))
        last = c.execute("SELECT * FROM chain ORDER BY seq DESC LIMIT 1").fetchone()
        link = chain.make_link(_link(last) if last else None, kind, ref, label, record_digest)
        c.execute(
            "INSERT INTO chain VALUES (?,?,?,?,?,?,?)",
            (link.seq, link.kind, link.ref, link.label, link.digest, link.prev_hash, link.row_hash),
        )
        self._links.append(link)
        return link

    def _seal_existing(self, c: sqlite3.Connection) -> None:
        """Chain the records of a store written before the chain existed (in table order), so they are
        protected from now on; what was changed before this point cannot be told."""
        for kind, (table, key) in RECORD_TABLES.items():
            for (ref,) in c.execute(f"SELECT {key} FROM {table} ORDER BY {key}").fetchall():
                self._chain(c, kind, int(ref))

    def verify(self) -> int:
        """Check the evidence chain end to end; return the number of records. Raises :class:`RegistryError`
        naming the first broken record: a chain row changed or removed, a record changed or deleted, the head
        file disagreeing (the chain rewritten, the last records deleted), a record written outside frank, a
        start outside its design's registered slots, rows of a start that is not recorded; first of all, a
        trigger, view or table in the database that frank did not create."""
        problem = schema.foreign(self.conn, self._schema)
        if problem:
            raise RegistryError(f"{self.path.name}: {problem}")
        with chain.head_read_lock(self.head_path):
            links = self.chain_links()
            head = chain.read_head(self.head_path)
        prev: Link | None = None
        for link in links:
            problem = chain.check_link(prev, link)
            if problem is None:
                found = _record(self.conn, link.kind, link.ref)
                if found is None:
                    problem = f"{link.label}: deleted after it was recorded (chain record {link.seq})"
                elif chain.digest(found[1]) != link.digest:
                    problem = f"{found[0]}: changed after it was recorded (chain record {link.seq})"
            if problem:
                raise RegistryError(problem)
            prev = link
        problem = chain.check_head(links, head, self.head_path)
        if problem:
            raise RegistryError(problem)
        problem = self._outside_chain(links) or self._outside_slots() or self._orphans()
        if problem:
            raise RegistryError(problem)
        return len(links)

    def verify_kept(self, text: str, source: str) -> tuple[Link, int]:
        """Check a head kept outside the campaign (``frank verify --expect-head``): the chain must still hold
        that record with that hash. Returns it and the chain's length; raises :class:`RegistryError`
        naming what is wrong (no head in ``text``, records deleted, the chain rewritten)."""
        kept = chain.parse_kept(text)
        if kept is None:
            raise RegistryError(f"{source}: no chain head in it (expected 'SEQ HASH' as frank verify prints it)")
        links = self.chain_links()
        link, problem = chain.check_kept(links, kept[0], kept[1], source)
        if link is None:
            raise RegistryError(problem or f"{source}: the kept head is not in the chain")
        return link, len(links)

    def _outside_chain(self, links: list[Link]) -> str | None:
        chained = {(x.kind, x.ref) for x in links}
        for kind, (table, key) in RECORD_TABLES.items():
            for (ref,) in self.conn.execute(f"SELECT {key} FROM {table} ORDER BY {key}").fetchall():
                if (kind, ref) not in chained:
                    found = _record(self.conn, kind, int(ref))
                    label = found[0] if found else f"{kind} {ref}"
                    why = ""
                    if kind == "start":
                        r = self.conn.execute("SELECT * FROM starts WHERE id = ?", (ref,)).fetchone()
                        slot = r["design_id"] and _slot_problem(
                            self.conn, r["design_id"], r["block"], r["position"], r["rep"], r["arm"]
                        )
                        why = f"; {slot}" if slot else ""
                    return f"{label}: not in the chain (written outside frank){why}"
        return None

    def _outside_slots(self) -> str | None:
        for r in self.conn.execute("SELECT * FROM starts WHERE design_id IS NOT NULL ORDER BY id").fetchall():
            problem = _slot_problem(self.conn, r["design_id"], r["block"], r["position"], r["rep"], r["arm"])
            if problem:
                return f"{chain.label_of('start', r)}: {problem}"
        return None

    def _orphans(self) -> str | None:
        for table, _ in START_CHILDREN:
            r = self.conn.execute(
                f"SELECT start_id FROM {table} WHERE start_id NOT IN (SELECT id FROM starts) LIMIT 1"
            ).fetchone()
            if r is not None:
                return f"{table} of start {r[0]}: that start is not recorded (deleted, or the rows were written outside frank)"
        return None

    def chain_links(self) -> list[Link]:
        return [_link(r) for r in self.query("SELECT * FROM chain ORDER BY seq")]

    def chain_head(self) -> Link | None:
        rows = self.query("SELECT * FROM chain ORDER BY seq DESC LIMIT 1")
        return _link(rows[0]) if rows else None

    # ------------------------------------------------------------ reads

    def registry_rows(self) -> list[RegistryRow]:
        return [_registry(r) for r in self.query("SELECT * FROM registry ORDER BY seq")]

    def registry_head(self) -> str | None:
        """The last registry row's hash (None when empty)."""
        rows = self.query("SELECT row_hash FROM registry ORDER BY seq DESC LIMIT 1")
        return str(rows[0]["row_hash"]) if rows else None

    def registry_row(self, design_id: str) -> RegistryRow | None:
        rows = self.query("SELECT * FROM registry WHERE design_id = ?", (design_id,))
        return _registry(rows[0]) if rows else None

    def design_ids(self, since: str = "") -> list[str]:
        """Registered design ids, oldest first, registered at or after ``since`` (a timestamp prefix)."""
        return [
            r["design_id"]
            for r in self.query("SELECT design_id FROM registry WHERE registered_at >= ? ORDER BY seq", (since,))
        ]

    def starts_of(self, design_id: str) -> list[StartRow]:
        """Every recorded start of a design (failed ones too), by block and position."""
        rows = self.query("SELECT * FROM starts WHERE design_id = ? ORDER BY block, position, rep", (design_id,))
        return [_start(r) for r in rows]

    def turns_of(self, start_id: int) -> list[dict[str, Any]]:
        """A start's turns: ``idx``, ``turn_id``, ``warmup``, ``error`` and every metric recorded for the turn."""
        out = []
        for r in self.query("SELECT * FROM turns WHERE start_id = ? ORDER BY idx", (start_id,)):
            turn: dict[str, Any] = {k: r[k] for k in LEGACY_TURN_METRICS if r[k] is not None}
            turn.update(_loads(r["metrics"]))
            turn.update({"idx": r["idx"], "turn_id": r["turn_id"], "warmup": bool(r["warmup"]), "error": r["error"]})
            out.append(turn)
        return out

    def artifacts_of(self, design_id: str, name: str) -> dict[int, bytes]:
        """The artifact ``name`` of each start of a design that has one, by start id."""
        rows = self.query(
            "SELECT a.start_id, a.data FROM artifacts a JOIN starts s ON s.id = a.start_id"
            " WHERE s.design_id = ? AND a.name = ?",
            (design_id, name),
        )
        return {int(r["start_id"]): bytes(r["data"]) for r in rows}

    def episodes_of(self, design_id: str) -> list[EpisodeRow]:
        """Every graded episode of a design's starts, by block, position, task and draw."""
        rows = self.query(
            "SELECT s.block, s.position, s.arm, e.* FROM episodes e JOIN starts s ON s.id = e.start_id"
            " WHERE s.design_id = ? ORDER BY s.block, s.position, e.task_id, e.draw",
            (design_id,),
        )
        return [
            EpisodeRow(
                start_id=r["start_id"],
                block=r["block"],
                arm=r["arm"],
                task_id=r["task_id"],
                draw=r["draw"],
                task_hash=r["task_hash"],
                status=r["status"],
                passed=bool(r["passed"]),
                grader_rc=r["grader_rc"],
                turns=r["turns"],
                detail=_loads(r["detail"]),
            )
            for r in rows
        ]

    def ledger_steps(self) -> list[LedgerEntry]:
        """Every ledger step, oldest first."""
        return [_ledger(r) for r in self.query("SELECT * FROM ledger ORDER BY seq")]

    def last_steps(self, n: int) -> list[LedgerEntry]:
        """The last ``n`` ledger steps, newest first."""
        return [_ledger(r) for r in self.query("SELECT * FROM ledger ORDER BY seq DESC LIMIT ?", (n,))]

    def refusals(self, since: str | None = None) -> list[Refusal]:
        """Stored refusals, oldest first; ``since`` is an ISO date or timestamp prefix (inclusive)."""
        rows = self.query("SELECT * FROM refusals WHERE at >= ? ORDER BY seq", (since or "",))
        return [Refusal(r["seq"], r["what"], r["name"], r["part"], r["path"], r["reason"], r["at"]) for r in rows]

    def served_requests(self) -> list[ServedRequest]:
        """Every served-request observation (``frank serve``), oldest first."""
        return [
            ServedRequest(
                r["at"],
                r["step"],
                r["route"],
                r["status"],
                r["ms"],
                bool(r["engine_error"]),
                r["seq"],
                r["outside_scope"],
            )
            for r in self.query("SELECT * FROM served_requests ORDER BY seq")
        ]

    def observed_draws(self) -> list[ObservedDraw]:
        """Every agent draw run outside a design (``frank tasks draw --campaign``), oldest first."""
        keys = ("at", "step", "draw", "episodes", "passed", "engine_errors", "episode_errors", "seq")
        return [ObservedDraw(*(r[k] for k in keys)) for r in self.query("SELECT * FROM observed_draws ORDER BY seq")]

    def overrides(self) -> list[Override]:
        """Every forced override of a failed verification, oldest first."""
        return [
            Override(r["seq"], r["command"], r["why"], r["problem"], r["at"])
            for r in self.query("SELECT * FROM overrides ORDER BY seq")
        ]


# ---------------------------------------------------------------- rows


@dataclass(frozen=True)
class StartRow:
    id: int
    design_id: str | None
    block: int
    position: int
    arm: str
    rep: int
    status: str  # ok | failed | invalid
    reason: str | None
    started_at: str
    finished_at: str
    engine: str | None
    engine_version: str | None
    recipe: dict[str, Any] | None
    metrics: dict[str, Any]
    resources: dict[str, Any]
    capabilities: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def phases(self) -> dict[str, Any]:
        """Where the start's time went (:mod:`frankenstein.design.phases`), kept in ``resources["phases"]``
        (no new column: the evidence chain digests every column of a start): ``at``, ``total_s``,
        ``phases`` {name: seconds}, ``notes``; {} for a start recorded before phases were."""
        found = self.resources.get("phases")
        return dict(found) if isinstance(found, dict) else {}


@dataclass(frozen=True)
class EpisodeRow:
    start_id: int
    block: int
    arm: str
    task_id: str
    draw: int
    task_hash: str
    status: str
    passed: bool
    grader_rc: int | None
    turns: int
    detail: dict[str, Any]


@dataclass(frozen=True)
class RegistryRow:
    seq: int
    design_id: str
    kind: str
    name: str
    canonical: str
    design_hash: str
    seed: str
    schedule: str
    registered_at: str
    tool_version: str
    prev_hash: str
    row_hash: str


@dataclass(frozen=True)
class LedgerEntry:
    seq: int
    action: str  # adopt | revert | park | stop | unpark
    part: str
    design_id: str | None
    scope: dict[str, Any]
    forced: bool
    why: str | None
    parts: list[str]
    at: str


RefusalWhat = Literal["registration", "adopt"]


@dataclass(frozen=True)
class Refusal:
    seq: int
    what: RefusalWhat
    name: str
    part: str | None
    path: str | None
    reason: str
    at: str


@dataclass(frozen=True)
class ServedRequest:
    """One request ``frank serve`` answered: when, the ledger step served (None: no step yet), the route
    (count_tokens, chat, ...), the HTTP status sent, milliseconds from request to the last byte sent,
    and whether the engine failed it (a 5xx from the engine or no answer)."""

    at: str
    step: int | None
    route: str
    status: int
    ms: float
    engine_error: bool
    seq: int | None = None
    outside_scope: str | None = None  # outside the served recipe's adopted scope, in words; None: within it


@dataclass(frozen=True)
class ObservedDraw:
    """One agent draw (every task once) run outside any design: when, the ledger step served (None: no step
    yet), the draw number, its episodes, how many passed, how many the engine failed (``engine_error``) and
    how many ended in another error (format, grader)."""

    at: str
    step: int | None
    draw: int
    episodes: int
    passed: int
    engine_errors: int
    episode_errors: int
    seq: int | None = None


@dataclass(frozen=True)
class Override:
    seq: int
    command: str
    why: str
    problem: str
    at: str


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


def _insert(c: sqlite3.Connection, table: str, row: Mapping[str, Any]) -> int:
    """INSERT one row given as column -> value; returns its rowid."""
    cols = ", ".join(row)
    cur = c.execute(f"INSERT INTO {table} ({cols}) VALUES ({','.join('?' * len(row))})", tuple(row.values()))
    return int(cur.lastrowid or 0)


def _insert_many(c: sqlite3.Connection, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT rows that share their columns (those of the first), in one ``executemany``."""
    if rows:
        cols = list(rows[0])
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})"
        c.executemany(sql, [tuple(r[k] for k in cols) for r in rows])


def _turn_row(start_id: int, t: Mapping[str, Any]) -> dict[str, Any]:
    """A turn as its row reads back (the fixed metric columns of 0001 stay NULL: metrics are one JSON object)."""
    values = {k: v for k, v in t.items() if k not in TURN_KEYS}
    row = {"start_id": start_id, "idx": t["idx"], "turn_id": t["turn_id"], "warmup": int(t["warmup"])}
    return {**row, **dict.fromkeys(LEGACY_TURN_METRICS), "error": t.get("error"), "metrics": _dumps(values)}


def _episode_row(start_id: int, e: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "start_id": start_id,
        "task_id": e["task_id"],
        "draw": e["draw"],
        "task_hash": e["task_hash"],
        "status": e["status"],
        "passed": int(e["passed"]),
        "grader_rc": e.get("grader_rc"),
        "turns": e["turns"],
        "detail": _dumps(e.get("detail", {})),
    }


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


def _link(r: sqlite3.Row) -> Link:
    return Link(
        seq=r["seq"],
        kind=r["kind"],
        ref=r["ref"],
        label=r["label"],
        digest=r["digest"],
        prev_hash=r["prev_hash"],
        row_hash=r["row_hash"],
    )


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


def _loads(text: str | None) -> dict[str, Any]:
    """A stored JSON object; anything unreadable or not an object reads as empty (absent, never invented)."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _start(r: sqlite3.Row) -> StartRow:
    recipe = json.loads(r["recipe"]) if r["recipe"] else None
    return StartRow(
        id=r["id"],
        design_id=r["design_id"],
        block=r["block"],
        position=r["position"],
        arm=r["arm"],
        rep=r["rep"],
        status=r["status"],
        reason=r["reason"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        engine=r["engine"],
        engine_version=r["engine_version"],
        recipe=recipe,
        metrics=_loads(r["metrics"]),
        resources=_loads(r["resources"]),
        capabilities=_loads(r["capabilities"]),
    )


def _registry(r: sqlite3.Row) -> RegistryRow:
    return RegistryRow(**{k: r[k] for k in RegistryRow.__dataclass_fields__})


def _ledger(r: sqlite3.Row) -> LedgerEntry:
    return LedgerEntry(
        seq=r["seq"],
        action=r["action"],
        part=r["part"],
        design_id=r["design_id"],
        scope=json.loads(r["scope"]),
        forced=bool(r["forced"]),
        why=r["why"],
        parts=json.loads(r["parts"]),
        at=r["at"],
    )
