"""A burst of turns through a recording proxy, for the ``kill -9`` tests of ``frank record`` and ``frank serve
--record``: clients send turns back to back until the proxy dies under them, and say which answers they got whole."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import httpx


class Burst:
    """``clients`` threads sending generation turns to ``url`` back to back, each turn its own session
    (``X-Frank-Session``: ``c<client>-<i>``), every other one streamed (``body(stream)`` makes the request). A client
    stops at its first failed request (the proxy died under it: that turn was in flight). ``done``: the sessions whose
    answers came whole (200, read to their end); ``sent``: every session sent; ``refused``: any other status."""

    def __init__(self, url: str, body: Callable[[bool], dict[str, Any]], clients: int = 4) -> None:
        self.url, self._body = url, body
        self.done: list[str] = []
        self.sent: list[str] = []
        self.refused: list[tuple[str, int]] = []
        self._enough = threading.Event()
        self._want = 0
        self._threads = [threading.Thread(target=self._client, args=(c,), daemon=True) for c in range(clients)]
        for t in self._threads:
            t.start()

    def wait_for(self, turns: int, timeout_s: float) -> bool:
        """Whether ``turns`` answers came whole within ``timeout_s``."""
        self._want = turns
        if len(self.done) >= turns:
            return True
        return self._enough.wait(timeout_s)

    def join(self, timeout_s: float = 30) -> None:
        for t in self._threads:
            t.join(timeout=timeout_s)
        assert not any(t.is_alive() for t in self._threads), "a client still waits on a dead proxy"

    def _client(self, c: int) -> None:
        with httpx.Client(timeout=30, trust_env=False) as http:
            for i in range(100_000):
                session = f"c{c}-{i}"
                self.sent.append(session)
                try:
                    r = http.post(self.url, json=self._body(i % 2 == 1), headers={"X-Frank-Session": session})
                    r.read()
                except httpx.HTTPError:
                    return  # the proxy died under this request: in flight, may or may not be in the trace
                if r.status_code != 200:
                    self.refused.append((session, r.status_code))
                    return
                self.done.append(session)
                if self._want and len(self.done) >= self._want:
                    self._enough.set()


def kill_9_mid_burst(proc: subprocess.Popen[str], burst: Burst, answers: int, timeout_s: float, group: bool) -> None:
    """SIGKILL ``proc`` (its whole process group with ``group``) once ``burst`` has ``answers`` whole answers; ``proc``
    is reaped (its group killed) whatever fails, and the burst's clients are joined."""
    try:
        assert burst.wait_for(answers, timeout_s)
        (os.killpg if group else os.kill)(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    burst.join()
