"""``frank record``'s requests that are not recorded (``/tokenize``, ``/health``, ``/v1/models``, ...): passed through,
the engine's answer relayed whole, its head and body in one send."""

from __future__ import annotations

from pathlib import Path

from frankenstein.workload.record import serve_recorder
from helpers_upstream import ScriptedUpstreamTestDouble, exchange


def test_a_head_request_gets_the_head_alone_and_the_connection_carries_the_next(tmp_path: Path) -> None:
    """``HEAD`` (the general path) is answered with its head and no body, so the ``GET`` after it on the same client
    connection reads its own answer, not bytes left over."""
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n",
        b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"status":"ok"}',
    ]
    double = ScriptedUpstreamTestDouble(answers)
    with serve_recorder(double.url, out=tmp_path / "t.jsonl") as rec:
        head, get = exchange(
            rec.url, [b"HEAD /health HTTP/1.1\r\nHost: me\r\n\r\n", b"GET /health HTTP/1.1\r\nHost: me\r\n\r\n"]
        )
        errors = rec.errors
    double.close()
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n") and b"Content-Length" in head, head
    assert get.startswith(b"HTTP/1.1 200 OK\r\n") and get.endswith(b'Content-Length: 15\r\n\r\n{"status":"ok"}'), get
    assert [r.split(b"\r\n")[0] for r in double.requests] == [b"HEAD /health HTTP/1.1", b"GET /health HTTP/1.1"]
    assert errors == [] and double.connections == 1
