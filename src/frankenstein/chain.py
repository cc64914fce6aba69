"""The evidence chain: every record a verdict or the ledger rests on, hashed into one chain whose head
is also kept outside the database. Pure: hashing, labels, the head file and the checks on plain data;
the store does the SQL (the ``store`` package is the only one that imports this module).

A *record* is one appended thing, by kind: a registry row, a start (its row with all its turns,
artifacts and episodes), a ledger step, a refusal, an override (a forced action on a campaign that
failed verification). Each chain row holds::

    seq, kind, ref (the record's id), label (what to call it in a message), digest, prev_hash, row_hash
    digest   = sha256 of the record's canonical JSON as stored (artifact bytes by their sha256)
    row_hash = sha256(prev_hash, seq, kind, ref, label, digest)

So editing a record breaks its digest, deleting or inserting a chain row breaks the links, and a record
written outside frank (raw SQL) has no chain row. Rewriting the whole chain with recomputed hashes is
caught by the head file beside the database (``frank.head``): append-only, one line ``seq row_hash``
per record, written in the same write lock as the record, just after the commit. The lines a commit is
about to make are first written to ``frank.head.pending``; a crash between the two leaves that file, and
the next open appends the lines of records the database holds (or drops them when it holds none, the commit
never happened). The pending file (with its folder), the COMMIT (SQLite ``synchronous=FULL``) and the head lines
are each fsynced in that order, so a power cut leaves one of the states a kill leaves. Keep a copy of the head's last line elsewhere (``frank verify`` prints it) and nothing in
the campaign folder can be rewritten quietly.
"""

from __future__ import annotations

import hashlib
import json
import fcntl
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENESIS = "0" * 64
KINDS = ("registry", "start", "ledger", "refusal", "override")


@dataclass(frozen=True)
class Link:
    seq: int
    kind: str
    ref: int
    label: str
    digest: str
    prev_hash: str
    row_hash: str


def sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def digest(tables: Mapping[str, Sequence[Any]]) -> str:
    """The hash of a record's rows (table name -> rows as the store reads them back: mappings, e.g. sqlite3.Row)."""

    def value(v: Any) -> Any:
        return {"sha256": sha256(bytes(v))} if isinstance(v, (bytes, memoryview)) else v

    body = {t: [{k: value(v) for k, v in dict(r).items()} for r in rows] for t, rows in tables.items()}
    return sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def link_hash(prev: str, seq: int, kind: str, ref: int, label: str, record_digest: str) -> str:
    return sha256("\n".join([prev, str(seq), kind, str(ref), label, record_digest]))


def make_link(last: Link | None, kind: str, ref: int, label: str, record_digest: str) -> Link:
    seq = (last.seq if last else 0) + 1
    prev = last.row_hash if last else GENESIS
    return Link(seq, kind, ref, label, record_digest, prev, link_hash(prev, seq, kind, ref, label, record_digest))


def label_of(kind: str, row: Mapping[str, Any]) -> str:
    """What a message calls a record: enough to find it (and, for a start, its slot) after it is gone."""
    if kind == "registry":
        return f"registry row {row['seq']} ({row['design_id']})"
    if kind == "start":
        if row["design_id"] is None:
            return f"start {row['id']} (no design, arm {row['arm']})"
        return (
            f"start {row['id']} (design {row['design_id']}, block {_one(row['block'])}, "
            f"position {_one(row['position'])}, rep {row['rep']}, arm {row['arm']})"
        )
    if kind == "ledger":
        return f"ledger step {row['seq']} ({row['action']} {row['part']})"
    if kind == "refusal":
        return f"refusal {row['seq']} ({row['what']} {row['name']})"
    return f"override {row['seq']} ({row['command']}: {row['why']})"


def _one(v: Any) -> Any:
    return v + 1 if isinstance(v, int) else v


def check_link(prev: Link | None, link: Link) -> str | None:
    """Why ``link`` does not follow ``prev`` (None when it does)."""
    expect_seq = (prev.seq if prev else 0) + 1
    if link.seq != expect_seq or link.prev_hash != (prev.row_hash if prev else GENESIS):
        return (
            f"chain record {link.seq} ({link.label}): the chain is broken before it "
            f"(chain record {expect_seq} was removed or changed)"
        )
    if link.row_hash != link_hash(link.prev_hash, link.seq, link.kind, link.ref, link.label, link.digest):
        return f"chain record {link.seq} ({link.label}): the chain row was changed"
    return None


# ---------------------------------------------------------------- the head file


def head_path(db_path: Path) -> Path:
    return db_path.with_suffix(".head")


def pending_path(head: Path) -> Path:
    """The lines a transaction is about to commit (``frank.head.pending``), written before its COMMIT."""
    return head.with_name(head.name + ".pending")


@contextmanager
def head_lock(path: Path) -> Iterator[int]:
    """The head file opened for appending, under an exclusive ``flock``: a commit's pending file, COMMIT and
    head lines happen under it, and so does the repair on open, so one never sees the other half done. A file
    it creates has its folder fsynced, so the file's name survives a power cut."""
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if created:
            sync_folder(path.parent)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


@contextmanager
def head_read_lock(path: Path) -> Iterator[None]:
    """A shared ``flock`` on the head file while the chain and the head are read together (so a reader never
    sees a commit whose head line is still to come); no file, no lock (and none is made)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def head_lines(links: Sequence[Link | tuple[int, str]]) -> bytes:
    pairs = [(x.seq, x.row_hash) if isinstance(x, Link) else x for x in links]
    return "".join(f"{seq} {h}\n" for seq, h in pairs).encode()


def write_pending(head: Path, links: Sequence[Link]) -> None:
    """Say which records the coming COMMIT holds, before it (replacing any older pending file): the file and
    its folder are fsynced, so after a power cut it is there whenever the COMMIT is."""
    path = pending_path(head)
    with open(path, "wb") as f:
        f.write(head_lines(links))
        f.flush()
        os.fsync(f.fileno())
    sync_folder(path.parent)


def append_head(fd: int, links: Sequence[Link | tuple[int, str]]) -> None:
    """Append one ``seq row_hash`` line per record, after its COMMIT (O_APPEND), and fsync it: once this
    returns, a power cut keeps the line."""
    if links:
        os.write(fd, head_lines(links))
        os.fsync(fd)


def sync_folder(folder: Path) -> None:
    """fsync a folder, so the names of the files created in it are on the disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def repair_plan(
    pending: list[tuple[int, str]], committed: Mapping[int, str], head: list[tuple[int, str]] | None
) -> list[tuple[int, str]]:
    """After a crash inside a commit (a pending file left): the head lines still to append. Records the
    database holds (the crash came after COMMIT) that the head file lacks are appended; records it does not
    hold (the crash came before COMMIT: nothing was written) need nothing. A pending file that is neither
    (some committed, some not) is no crash frank leaves; nothing is appended and ``verify`` judges."""
    done = [(seq, h) for seq, h in pending if committed.get(seq) == h]
    if len(done) != len(pending):
        return []
    have = set(head or [])
    return [x for x in done if x not in have]


def read_head(path: Path) -> list[tuple[int, str]] | None:
    """The head file's lines as (seq, row_hash); None when there is no file. A malformed line reads as (-1, text)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    out = []
    for line in text.splitlines():
        seq, _, h = line.partition(" ")
        out.append((int(seq), h) if seq.isdigit() and len(h) == 64 else (-1, line))
    return out


def check_head(links: Sequence[Link], head: list[tuple[int, str]] | None, path: Path) -> str | None:
    """Why the chain in the store is not the chain the head file saw appended (None when it is)."""
    if head is None:
        return (
            f"{path.name} is missing: the chain has {len(links)} records and no head outside the database"
            if links
            else None
        )
    for i, (seq, h) in enumerate(head):
        if seq < 0:
            return f"{path.name} line {i + 1} is not 'SEQ HASH' ({h[:40]!r}): the head file was edited"
        if i >= len(links):
            return (
                f"{path.name}: chain record {seq} was appended but is not in the store "
                f"(the last {len(head) - len(links)} record(s) were deleted)"
            )
        x = links[i]
        if (seq, h) != (x.seq, x.row_hash):
            return f"chain record {x.seq} ({x.label}): does not match {path.name} (the chain was rewritten)"
    if len(links) > len(head):
        x = links[len(head)]
        return f"chain record {x.seq} ({x.label}): not in {path.name} (appended outside frank, or {path.name} was cut)"
    return None


# ---------------------------------------------------------------- a head kept elsewhere

_KEPT = re.compile(r"(?:\b(\d+) (?:records, head )?)?\b([0-9a-f]{64})\b")


def parse_kept(text: str) -> tuple[int | None, str] | None:
    """A head kept outside the campaign, as ``frank verify`` prints it (``… 57 records, head HASH …``) or
    ``frank.head`` holds it (``57 HASH``), or the bare hash: (seq or None, row_hash) of the last one in
    ``text``; None when it holds none."""
    found = list(_KEPT.finditer(text))
    if not found:
        return None
    seq, h = found[-1].groups()
    return (int(seq) if seq else None, h)


def check_kept(links: Sequence[Link], seq: int | None, row_hash: str, source: str) -> tuple[Link | None, str | None]:
    """The chain record a kept head names, or why the chain does not hold it (records deleted, the chain
    rewritten, another campaign). The chain may have grown since the head was kept."""
    short = f"{row_hash[:16]}…"
    if seq is None:
        match = next((x for x in links if x.row_hash == row_hash), None)
        if match is None:
            return None, f"the kept head {short} ({source}) is not in the chain (rewritten, cut, or another campaign)"
        return match, None
    if seq < 1 or seq > len(links):
        return None, (
            f"the kept head ({source}) is chain record {seq}, but the chain has {len(links)} records "
            "(records were deleted, or the campaign was replaced)"
        )
    x = links[seq - 1]
    if x.seq != seq or x.row_hash != row_hash:
        return None, f"chain record {seq} ({x.label}) is not the kept head {short} ({source}): the chain was rewritten"
    return x, None
