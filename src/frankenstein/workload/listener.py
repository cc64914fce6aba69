"""The HTTP server both proxies are built on (``frank record``'s recording proxy and ``frank serve``'s
region-cache front): the standard library's ``ThreadingHTTPServer`` with a deep accept backlog, and
request-body reading that answers 400 to bad input instead of dropping the connection.

Concurrency they are built for: one thread per client connection, a listen backlog of
:data:`BACKLOG` (the kernel caps it at ``net.core.somaxconn``, 4096 on current Linux), so bursts of
a thousand simultaneous clients on loopback are accepted, queued and answered, none reset
(``benchmarks/proxy_load.py``). At most :data:`UPSTREAM_SLOTS` requests are open to the engine at
once; the rest wait in the proxy. The engine behind them still runs what it runs (llama-server:
``--parallel`` slots); the proxies add threads and a queue, not capacity.

Request bodies are limited to ``max_body_bytes`` of the server (:data:`MAX_BODY_BYTES` by default,
``--max-body-mb`` of ``frank serve`` and ``frank record``): a larger ``Content-Length`` is answered 413 before
a byte of the body is read, so a 100 MB ``/count`` body costs nothing (it took 51 s of CPU unlimited).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BACKLOG = 4096
CONNECT_RETRIES = 3  # upstream connects retried by the proxies (safe: nothing was sent yet)
# Requests a proxy has open to its upstream at once; more wait in the proxy. An engine's own accept
# backlog is small (llama-server's HTTP library listens with a backlog of 5), so a burst of a
# thousand forwarded connects would overflow it and be dropped; queued here they are all answered.
UPSTREAM_SLOTS = 64
MAX_BODY_BYTES = 32 * 1024 * 1024  # 32 MiB: ~8 M tokens of text, far above any model's context
# Headers a proxy never forwards either way (hop-by-hop, and those it recomputes itself).
HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "content-encoding",
    }
)


class BadRequest(Exception):
    """The client's request is malformed; answered with 400 and this message."""

    status = 400


class TooLarge(BadRequest):
    """The request's body is above the server's limit; answered with 413 before the body is read."""

    status = 413


class ProxyHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = BACKLOG
    max_body_bytes = MAX_BODY_BYTES  # set per server (--max-body-mb)

    def server_activate(self) -> None:
        super().server_activate()
        self.upstream_slots = threading.BoundedSemaphore(UPSTREAM_SLOTS)

    def get_request(self) -> tuple[socket.socket, Any]:
        """Every accepted connection with Nagle off: headers and body go out as separate writes, and with
        Nagle on a keep-alive client's delayed ACK held each answer back ~40 ms (benchmarks/proxy_overhead.py)."""
        conn, addr = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, addr

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away mid-request is normal under load: nothing to print. Anything else is
        one line on stderr, never a traceback on the operator's console."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        print(f"frank: request from {client_address} failed: {type(exc).__name__}: {exc}", file=sys.stderr)


def read_body(handler: BaseHTTPRequestHandler, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body by its ``Content-Length``; a missing length is an empty body, one above ``limit``
    bytes a :class:`TooLarge` (nothing of the body read)."""
    value = handler.headers.get("Content-Length")
    if value is None or value.strip() == "":
        return b""
    text = value.strip()
    if not text.isdigit():  # negative, a sign, a fraction, words: all refused
        raise BadRequest(f"Content-Length {value!r} is not a non-negative integer")
    n = int(text)
    if n > limit:
        raise TooLarge(f"Content-Length {n} is above this server's limit of {limit} bytes (--max-body-mb)")
    data = handler.rfile.read(n) if n else b""
    if len(data) != n:
        raise BadRequest(f"body ended after {len(data)} of {n} bytes")
    return data


def loads(raw: bytes) -> Any:
    """``json.loads`` whose too-deep nesting is a :class:`BadRequest`, not a ``RecursionError``;
    other malformed JSON raises ``ValueError`` as usual."""
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise BadRequest("request body is JSON nested too deeply") from exc


def send_json(handler: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    try:
        handler.wfile.write(data)
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True


def bad_request(handler: BaseHTTPRequestHandler, exc: BadRequest) -> None:
    """Answer 400 (413 for a body above the limit) with the reason and close: the rest of the connection's
    bytes cannot be trusted (nor read: a refused body is never read)."""
    handler.close_connection = True
    send_json(handler, exc.status, {"error": {"message": str(exc), "type": "invalid_request_error"}})
