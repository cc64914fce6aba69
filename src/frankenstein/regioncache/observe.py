"""What ``frank serve`` keeps of the traffic it serves: one row per request (route, status, time,
engine error), tagged with the ledger step whose recipe was served, written to the campaign's store
in batches by one background thread.

The request path only appends a tuple to a deque (no lock, no I/O); the writer wakes every
``flush_s`` seconds and writes what is there in one transaction (``Store.insert_served``).
``close()`` writes the rest. These are observations (report/observed.py prints them as such): not in
the evidence chain, never read by a verdict.

Routes (:func:`route_of`): ``tokenize``, ``count``, ``count_tokens`` (Anthropic), ``chat``
(``/v1/chat/completions``), ``completions`` (``/v1/completions``), ``completion`` (llama.cpp),
``other`` for the rest (health, metrics, models...). frank's own ``/frank/...`` routes are not kept.

With ``access``, every request (frank's own routes too) is also a line of an access log file: time, path
without its query string, status, milliseconds (:func:`access_line`); no bodies, no headers.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import TextIO

from frankenstein.store import ServedRequest, Store

ROUTES = {
    "/tokenize": "tokenize",
    "/count": "count",
    "/v1/messages/count_tokens": "count_tokens",
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/completion": "completion",
}


def iso(t: float) -> str:
    """``t`` (epoch seconds) as the store's UTC timestamps (``store.now_iso``'s format)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


OWN_PREFIX = "/frank/"


def route_of(path: str) -> str:
    return ROUTES.get(path.split("?", 1)[0].rstrip("/"), "other")


class ServedLog:
    """Collects observations from handler threads; a daemon thread writes them to ``store``."""

    def __init__(self, store: Store, step: int | None, flush_s: float = 1.0, access: Path | None = None) -> None:
        self.store = store
        self.step = step
        self.flush_s = flush_s
        self.access = access
        self._access: TextIO | None = open_access_log(access) if access is not None else None
        self._lines: deque[str] = deque()
        self._pending: deque[tuple[float, str, int, float, bool, str | None]] = deque()
        self._stop = threading.Event()
        self.written = 0
        self._thread = threading.Thread(target=self._run, name="frank-serve-observe", daemon=True)
        self._thread.start()

    def add(self, path: str, status: int, ms: float, engine_error: bool, outside_scope: str | None = None) -> None:
        """Called once per answered request (cheap: one tuple appended; the writer makes the row). frank's
        own routes (``/frank/...``, e.g. ``/frank/status``) are not served traffic and are not kept.
        ``outside_scope``: how the request fell outside the served recipe's adopted scope, in words."""
        at = time.time()
        if self._access is not None:
            self._lines.append(access_line(at, path, status, ms))
        if path.startswith(OWN_PREFIX):
            return
        self._pending.append((at, path, status, ms, engine_error, outside_scope))

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            self._flush()

    def _flush(self) -> None:
        self._write_access()
        batch = []
        while self._pending:
            at, path, status, ms, error, outside = self._pending.popleft()
            batch.append(ServedRequest(iso(at), self.step, route_of(path), status, ms, error, outside_scope=outside))
        if batch:
            self.store.insert_served(batch)
            self.written += len(batch)

    def close(self) -> None:
        """Stop the writer and write what is left."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._flush()
        if self._access is not None:
            self._access.close()

    def _write_access(self) -> None:
        if self._access is None or not self._lines:
            return
        while self._lines:
            self._access.write(self._lines.popleft() + "\n")
        self._access.flush()


def open_access_log(path: Path) -> TextIO:
    """The access log, appended to, readable by its owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", encoding="utf-8")


def access_line(at: float, path: str, status: int, ms: float) -> str:
    """One request: time, route (the path without its query string: no credentials a client put there), status,
    milliseconds. No bodies, no headers."""
    route = path.split("?", 1)[0].split("#", 1)[0]
    return f"{iso(at)} {route} {status} {ms:.1f} ms"
