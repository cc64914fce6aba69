"""How many generation requests ``frank serve`` lets through at once: the served recipe's adopted concurrency.

    Admission(limit, mode)   mode "queue": a request past the limit waits for a free place;
                             mode "refuse": it is answered 429 at once, naming the scope
    admission.enter() -> bool, admission.leave()

A recipe adopted with ``frank adopt --scope concurrency=N`` was shown to hold at N requests at a time, not
more (:mod:`frankenstein.scope`); the front holds it for the requests it passes to the engine (the counts it
answers itself are not generation and are not held).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Literal

OverScope = Literal["queue", "refuse"]


class Admission:
    """Places as tokens in a ``queue.SimpleQueue`` (one C call each way; a ``BoundedSemaphore`` runs a Python
    ``Condition`` on every request's path) and the counts under one lock, taken once per ``enter`` that finds a
    place free and once per ``leave``."""

    def __init__(self, limit: int, mode: OverScope, why: str) -> None:
        self.limit = limit
        self.mode = mode
        self.why = why  # 'adopted for concurrency 1 (ledger step 1)'
        self._free: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(limit):
            self._free.put(None)
        self._lock = threading.Lock()
        self._running = self._waiting = self._refused = 0

    def enter(self) -> bool:
        """Take a place: wait for one (queue) or give up at once (refuse); False: refused."""
        try:
            self._free.get_nowait()
        except queue.Empty:
            return self._wait()
        with self._lock:
            self._running += 1
        return True

    def _wait(self) -> bool:
        with self._lock:
            self._waiting += 1
        got = self.mode == "queue"
        if got:
            self._free.get()
        with self._lock:
            self._waiting -= 1
            self._running += got
            self._refused += not got
        return got

    def leave(self) -> None:
        with self._lock:
            if self._running <= 0:
                raise ValueError("Admission left more often than entered")
            self._running -= 1
        self._free.put(None)

    def counts(self) -> dict[str, Any]:
        """For ``GET /frank/status``: the limit, the mode, requests running, waiting and refused so far."""
        with self._lock:
            return {
                "limit": self.limit,
                "mode": self.mode,
                "running": self._running,
                "waiting": self._waiting,
                "refused": self._refused,
            }

    def refusal(self) -> dict[str, Any]:
        """The 429 body of a refused request."""
        return {
            "error": {
                "message": f"frank serve: the served recipe is {self.why}; {self.limit} request(s) are running, "
                "so this one is refused (--over-scope refuse); retry when one finishes",
                "type": "over_scope",
            }
        }

    def describe(self) -> str:
        """The start-up line: the limit, where it comes from, and what happens past it."""
        past = "waits for a free place" if self.mode == "queue" else "is refused with 429"
        return (
            f"frank serve: the served recipe is {self.why}: at most {self.limit} generation request(s) at once "
            f"reach the engine; one more {past} (--over-scope {self.mode})"
        )
