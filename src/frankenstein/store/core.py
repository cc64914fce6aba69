"""The campaign store: one SQLite file in WAL mode, one transaction helper, the head file, the writes and
the typed reads (the ``store`` package, with its migrations, rows and chain verification, is the only place
that speaks SQL or decodes stored JSON).

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
from dataclasses import asdict
from pathlib import Path
from typing import Any

from frankenstein import chain, schema
from frankenstein.chain import Link
from frankenstein.errors import StoreError
from frankenstein.store import migrations, verify
from frankenstein.store.migrations import BOOTSTRAP, MIGRATIONS, RECORD_TABLES, statements
from frankenstein.store.rows import (
    LEGACY_TURN_METRICS,
    EpisodeRow,
    LedgerEntry,
    ObservedDraw,
    Override,
    Refusal,
    RefusalWhat,
    RegistryRow,
    ServedRequest,
    StartRow,
    _dumps,
    _episode_row,
    _ledger,
    _link,
    _loads,
    _registry,
    _start,
    _turn_row,
    now_iso,
)
from frankenstein.store.verify import _as_meant, _one, _record, _slot_problem


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
            self.conn.execute("PRAGMA synchronous=FULL")  # a COMMIT is on the disk before its head line is written
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
        with chain.head_lock(self.head_mirror):  # an empty chain: the file alone (its folder fsynced)
            pass

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
        migrations.check_read_only_format(self.conn, self.path, self.read_only)

    def _migrate(self) -> None:
        with self.transaction() as c:
            migrations.migrate(c, self.path, self._seal_existing)

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
        """Check the evidence chain end to end; return the number of records (:func:`verify.verify_chain`)."""
        return verify.verify_chain(self.conn, self.path, self.head_path, self._schema)

    def verify_kept(self, text: str, source: str) -> tuple[Link, int]:
        """Check a head kept outside the campaign (:func:`verify.verify_kept`)."""
        return verify.verify_kept(self.conn, text, source)

    def chain_links(self) -> list[Link]:
        return verify.chain_links(self.conn)

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
