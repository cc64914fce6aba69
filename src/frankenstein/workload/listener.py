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

Upstream connections are kept alive and reused (:class:`UpstreamPool`): a fresh connection per request
cost a connect and a close on every request's path (``benchmarks/proxy_overhead.py``).
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from frankenstein.engines.http import Streamed

BACKLOG = 4096
CONNECT_RETRIES = 3  # upstream connects retried by the proxies (safe: nothing was sent yet)
# Requests a proxy has open to its upstream at once; more wait in the proxy. An engine's own accept
# backlog is small (llama-server's HTTP library listens with a backlog of 5), so a burst of a
# thousand forwarded connects would overflow it and be dropped; queued here they are all answered.
UPSTREAM_SLOTS = 64
# The handlers' write buffer: a response's headers and body are written, then flushed once (one send
# instead of one per header block and body); every write of a stream is flushed as it comes.
WRITE_BUFFER = 64 * 1024
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


class UpstreamPool:
    """Kept-alive connections to one upstream, each used by one request at a time.

    A request on a reused connection that the upstream closed meanwhile (llama-server may close an idle
    kept-alive connection just as it is reused: no answer at all, or a reset while sending) is sent again on
    a fresh connection; so are connect failures (nothing sent yet), ``connect_retries`` times. A connection
    goes back to the pool only when its answer was read to the end and the upstream did not ask to close."""

    def __init__(self, url: str, timeout_s: float, connect_retries: int = CONNECT_RETRIES) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port
        self._timeout_s, self._retries = timeout_s, connect_retries
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.opened = 0  # fresh connections made (fewer than requests: reuse)

    def open(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], slots: threading.BoundedSemaphore
    ) -> Streamed:
        """Send one request and return its answer unread; :meth:`Streamed.close` gives the connection back."""
        slots.acquire()
        try:
            answer = self._send(method, path, body, headers)
        except BaseException:
            slots.release()
            raise
        answer.slots = slots
        return answer

    def _send(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Streamed:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            try:
                return self._exchange(conn, method, path, body, headers)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()  # closed by the upstream while idle: sent again on a fresh connection
        return self._exchange(self._connect(), method, path, body, headers)

    def _exchange(
        self, conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> Streamed:
        try:
            conn.request(method, path, body=body, headers=headers)
            return _PooledAnswer(conn, conn.getresponse(), self)
        except BaseException:
            conn.close()
            raise

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        for attempt in range(self._retries + 1):
            conn = cls(self._host, self._port, timeout=self._timeout_s)
            try:
                conn.connect()
                conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.opened += 1
                return conn
            except OSError:
                conn.close()
                if attempt == self._retries:
                    raise
        raise AssertionError("unreachable")

    def give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _PooledAnswer(Streamed):
    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, pool: UpstreamPool) -> None:
        super().__init__(conn, resp)
        self._pool, self._kept_conn, self._kept_resp = pool, conn, resp

    def close(self) -> None:
        """Back to the pool when the answer was read to its end and may be followed by another; closed otherwise."""
        resp = self._kept_resp
        if not resp.isclosed() and resp.length == 0 and not resp.chunked:
            resp.read()  # the body was read to its length: this marks the answer finished for http.client
        if resp.isclosed() and not resp.will_close:
            self._pool.give_back(self._kept_conn)
            if self.slots is not None:
                self.slots.release()
                self.slots = None
            return
        super().close()
