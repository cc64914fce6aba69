"""The HTTP server both proxies are built on (``frank record``'s recording proxy and ``frank serve``'s
region-cache front): the standard library's ``ThreadingHTTPServer`` with a deep accept backlog, its
handlers on :class:`LeanHandler` (heads parsed and written by :mod:`~frankenstein.workload.wire`, not
``email.parser``), and request-body reading that answers 400 to bad input instead of dropping the
connection.

Concurrency they are built for: one thread per client connection, a listen backlog of
:data:`BACKLOG` (the kernel caps it at ``net.core.somaxconn``, 4096 on current Linux), so bursts of
a thousand simultaneous clients on loopback are accepted, queued and answered, none reset
(``benchmarks/proxy_load.py``). At most :data:`UPSTREAM_SLOTS` requests are open to the engine at
once; the rest wait in the proxy. The engine behind them still runs what it runs (llama-server:
``--parallel`` slots); the proxies add threads and a queue, not capacity.

Request bodies are limited to ``max_body_bytes`` of the server (:data:`MAX_BODY_BYTES` by default,
``--max-body-mb`` of ``frank serve`` and ``frank record``): a larger ``Content-Length`` is answered 413 before
a byte of the body is read, so a 100 MB ``/count`` body costs nothing (it took 51 s of CPU unlimited).

Upstream connections are kept alive and reused (:class:`UpstreamPool` of ``wire`` connections): a fresh
connection per request cost a connect and a close on every request's path (``benchmarks/proxy_overhead.py``).
A request body sent chunked (``Transfer-Encoding``) is refused with 411: it is never read, so its bytes
could not be told from the next request's.
"""

from __future__ import annotations

import io
import json
import queue
import re
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from frankenstein.workload.plainhead import ANSWER_DROP_FIELDS, HOP_FIELDS, PlainAnswer, plain_answer
from frankenstein.workload.wire import (
    READ_BUFFER,
    BadHead,
    ChunkFraming,
    Closed,
    Headers,
    ProtocolError,
    UpstreamAnswer,
    UpstreamConnection,
    pump_plain_chunks,
    read_message_head,
    date_line,
    server_and_date,
    status_line,
)

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
# Headers a proxy never forwards either way (hop-by-hop, and those it recomputes itself; ``expect`` is answered by
# the proxy itself, 100 Continue, before it reads the body).
HOP_HEADERS = frozenset(HOP_FIELDS)
# An engine's answer's fields not relayed: those, and its Date (the proxy's own goes with every answer, so there is one;
# the engine's Server is relayed, and the proxy adds none: a second Date or Server field is not HTTP).
ANSWER_DROP = frozenset(ANSWER_DROP_FIELDS)


class BadRequest(Exception):
    """The client's request is malformed; answered with 400 and this message."""

    status = 400


class HeadTooBig(BadRequest):
    """The request's head is above :data:`~frankenstein.workload.wire.MAX_HEAD_BYTES` or its header count; 431."""

    status = 431


class LengthRequired(BadRequest):
    """A request body sent chunked (``Transfer-Encoding``): not read, answered 411 and the connection closed."""

    status = 411


class TooLarge(BadRequest):
    """The request's body is above the server's limit; answered with 413 before the body is read."""

    status = 413


class FieldLines(Protocol):
    """Fields a proxy forwards as head lines, and asks by name: :class:`~frankenstein.workload.wire.Headers`, or a
    plain answer's :class:`PlainFields`."""

    def lines(self, drop: frozenset[str]) -> str: ...

    def get(self, name: str, default: str) -> str: ...


NO_BODY = frozenset({204, 304})  # statuses whose answers never carry a body


def bodiless_length(status: int, headers: FieldLines) -> bytes:
    """The ``Content-Length`` line of an answer relayed without a body (to a ``HEAD``; a 204 or 304): the engine's own
    value (the length a ``GET`` would have had), none for a 1xx or 204 (which must not carry one) or when the engine
    gave none or a malformed one. A client reads no body after such a head whatever its length says."""
    if status < 200 or status == 204:
        return b""
    value = headers.get("content-length", "").strip()
    return b"Content-Length: %s\r\n" % value.encode() if value.isascii() and value.isdigit() else b""


class SlotsLike(Protocol):
    """What bounds the requests open upstream: :class:`Slots`, or a ``threading.BoundedSemaphore``."""

    def acquire(self) -> bool: ...

    def release(self) -> None: ...


class Slots:
    """At most ``n`` holders at once: ``acquire`` waits for a free slot, ``release`` frees one. Tokens in a
    ``queue.SimpleQueue``: one C call each way, where ``threading.BoundedSemaphore`` runs a Python
    ``Condition`` on every request's path. A release without an acquire is refused, as the semaphore does."""

    def __init__(self, n: int) -> None:
        self._free: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._n = n
        for _ in range(n):
            self._free.put(None)

    def acquire(self) -> bool:
        self._free.get()
        return True

    def release(self) -> None:
        if self._free.qsize() >= self._n:
            raise ValueError("Slots released more often than acquired")
        self._free.put(None)


class ProxyHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = BACKLOG
    max_body_bytes = MAX_BODY_BYTES  # set per server (--max-body-mb)

    def server_activate(self) -> None:
        super().server_activate()
        self.upstream_slots = Slots(UPSTREAM_SLOTS)

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
    if handler.headers.get("Transfer-Encoding") is not None:
        raise LengthRequired("a request body must come with a Content-Length (Transfer-Encoding is not accepted)")
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


def send_json(handler: LeanHandler, status: int, obj: Any) -> None:
    """``obj`` as a JSON answer: head and body in one send on the socket."""
    data = json.dumps(obj).encode()
    handler.send_response(status)
    head = handler.head_ending(b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data))
    try:
        handler.connection.sendall(head + data)
    except OSError:
        handler.close_connection = True


def bad_request(handler: LeanHandler, exc: BadRequest) -> None:
    """Answer 400 (413 for a body above the limit) with the reason and close: the rest of the connection's
    bytes cannot be trusted (nor read: a refused body is never read)."""
    handler.close_connection = True
    send_json(handler, exc.status, {"error": {"message": str(exc), "type": "invalid_request_error"}})


class LeanHandler(BaseHTTPRequestHandler):
    """``BaseHTTPRequestHandler`` with the hot path of :mod:`~frankenstein.workload.wire`: the request head
    split with bytes operations into :class:`~frankenstein.workload.wire.Headers` (no ``email.parser``), and
    the status line, ``Server`` and ``Date`` (formatted once a second) as one buffered write. A malformed head
    is answered 400 (431 when too large) in JSON and the connection closed; ``Expect: 100-continue`` is
    answered at once."""

    protocol_version = "HTTP/1.1"
    wbufsize = WRITE_BUFFER  # headers and body leave in one send (each write is followed by a flush)
    raw_requestline: bytes  # the request line, read by handle_one_request
    _headers_buffer: list[bytes]  # the head being made (send_response, send_header)

    headers: Headers  # type: ignore[assignment]  # wire.Headers: get(), items(), iteration, as handlers use them
    status_sent: int | None = None  # the status of the answer begun last (send_response)

    def setup(self) -> None:
        super().setup()
        self.reader = cast(io.BufferedReader, self.rfile)  # rbufsize -1: buffered (peek, read1)
        self._server_field = self.version_string()

    def parse_request(self) -> bool:
        self.command, self.path, self.request_version = "", "", "HTTP/1.1"
        self.close_connection = True
        try:
            return self._parse_head()
        except BadHead as exc:
            bad_request(self, BadRequest(str(exc)) if exc.status == 400 else HeadTooBig(str(exc)))
            return False

    def _parse_head(self) -> bool:
        head = read_message_head(self.reader, self.raw_requestline)
        if head is None:
            return False  # an empty line where a request line belongs: closed, as the standard library does
        self.requestline, self.headers = head
        headers = self.headers
        words = self.requestline.split()
        if len(words) != 3 or words[2] not in ("HTTP/1.0", "HTTP/1.1"):
            raise BadHead(f"bad request line {self.requestline[:80]!r}")
        self.command, path, self.request_version = words
        self.path = "/" + path.lstrip("/") if path.startswith("//") else path
        connection = headers.get("connection")
        self.close_connection = (
            self.request_version == "HTTP/1.0" if connection is None else _wants_close(self.request_version, connection)
        )
        expect = headers.get("expect")
        if expect is not None and expect.lower() == "100-continue" and self.request_version == "HTTP/1.1":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
        return True

    def head_ending(self, fields: bytes = b"") -> bytes:
        """The head begun by :meth:`send_response` with ``fields`` (whole ``Name: value\\r\\n`` lines) and its
        empty line, as bytes for the caller to send (with the body: one send); the head's buffer is emptied."""
        self._headers_buffer.append(fields + b"\r\n")
        head = b"".join(self._headers_buffer)
        self._headers_buffer = []
        return head

    def answer_head(self, status: int, headers: FieldLines, fields: bytes) -> bytes:
        """An engine's answer's whole head in one call: the status line, ``Date``, ``headers`` less
        :data:`ANSWER_DROP` (its ``Server`` kept), ``fields`` (whole lines) and the empty line."""
        self.status_sent = status
        start = status_line(self.protocol_version, status) + date_line()
        return start + headers.lines(ANSWER_DROP).encode("latin-1") + fields + b"\r\n"

    def send_response(self, code: int, message: str | None = None) -> None:
        """The status line, ``Server`` and ``Date`` into the head's buffer (written by ``end_headers``); the status
        kept as ``status_sent``."""
        self.status_sent = code
        self._headers_buffer = [status_line(self.protocol_version, code, message), server_and_date(self._server_field)]


def _wants_close(version: str, connection: str | None) -> bool:
    tokens = {t.strip() for t in (connection or "").lower().split(",")}
    return "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)


class UpstreamPool:
    """Kept-alive connections to one upstream (:class:`~frankenstein.workload.wire.UpstreamConnection`), each
    used by one request at a time.

    A request on a reused connection that the upstream closed meanwhile (llama-server may close an idle
    kept-alive connection just as it is reused: no answer at all, or a reset while sending) is sent again on
    a fresh connection; so are connect failures (nothing sent yet), ``connect_retries`` times. A connection
    goes back to the pool only when its answer was read to the end and the upstream did not ask to close."""

    def __init__(self, url: str, timeout_s: float, connect_retries: int = CONNECT_RETRIES) -> None:
        parts = urlsplit(url)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._tls else 80)
        self._timeout_s, self._retries = timeout_s, connect_retries
        self.host_field = f"{self._host}:{self._port}".encode("latin-1")  # the Host of a head made by the caller
        self._idle: list[UpstreamConnection] = []
        self._lock = threading.Lock()
        self._closed = False
        self.opened = 0  # fresh connections made (fewer than requests: reuse)
        self.dropped = 0  # idle connections found closed by the upstream, dropped before use
        self.stale = 0  # of those, found closed only as a request was about to use them: a connect on its path
        self.resent = 0  # requests sent again because the upstream closed the connection as it was reused
        # The upstream closes a connection after each stream (llama-server does, ~40 us after the final chunk, so
        # the close often arrives after the answer is given back): once seen, a connection that carried a stream
        # is replaced after its answer, never pooled to be found closed on the next request's path.
        self.closes_after_streams = False

    def open(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str] | str,
        slots: SlotsLike,
        meanwhile: Callable[[], None] | None = None,
    ) -> PooledAnswer:
        """Send one request and return its answer unread; :meth:`PooledAnswer.close` gives the connection back.
        ``meanwhile`` runs once the request is sent, before its answer is read (again if it is sent again)."""
        slots.acquire()
        try:
            answer = self._send(method, path, body, headers, meanwhile)
        except BaseException:
            slots.release()
            raise
        return PooledAnswer(answer, self, slots)

    def _send(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str] | str,
        meanwhile: Callable[[], None] | None,
    ) -> UpstreamAnswer:
        conn = self._live_idle()
        if conn is not None:
            try:
                return self._exchange(conn, method, path, body, headers, meanwhile)
            except Closed:
                self.resent += 1  # closed by the upstream just as it was reused: sent again on a fresh connection
                self.closes_after_streams |= conn.streamed
        return self._exchange(self._connect(), method, path, body, headers, meanwhile)

    def send_plain(
        self, data: bytes, slots: SlotsLike, meanwhile: Callable[[], None] | None = None
    ) -> tuple[UpstreamConnection, bytes]:
        """Send one whole request (its head made by the caller, ``Host:`` :attr:`host_field`) and wait for its
        answer's first bytes, left unread in the connection's buffer: (the connection, those bytes). Connections
        as :meth:`open` takes them (a reused one the upstream closed: the request sent again on a fresh one). The
        slot is held until :meth:`finish` (or :meth:`answer`'s ``close``)."""
        slots.acquire()
        try:
            conn = self._live_idle()
            if conn is not None:
                try:
                    return conn, self._peek(conn, data, meanwhile)
                except Closed:
                    self.resent += 1
                    self.closes_after_streams |= conn.streamed
            conn = self._connect()
            return conn, self._peek(conn, data, meanwhile)
        except BaseException:
            slots.release()
            raise

    def answer(self, conn: UpstreamConnection, method: str, slots: SlotsLike) -> PooledAnswer:
        """The answer :meth:`send_plain` saw begin, read by the general path (its head parsed into ``Headers``)."""
        try:
            answer = self._exchange_done(conn, method)
        except BaseException:
            slots.release()
            raise
        return PooledAnswer(answer, self, slots)

    def finish(self, conn: UpstreamConnection, reusable: bool, slots: SlotsLike) -> None:
        """After a plain answer was relayed: the connection back to the pool (``reusable``: its answer was read to
        the end on a kept-alive connection) or closed, and the slot freed."""
        try:
            if reusable and conn.reusable:
                self.give_back(conn)
            else:
                conn.close()
        finally:
            slots.release()

    @staticmethod
    def _peek(conn: UpstreamConnection, data: bytes, meanwhile: Callable[[], None] | None) -> bytes:
        try:
            return conn.send_peek(data, meanwhile)
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def _exchange_done(conn: UpstreamConnection, method: str) -> UpstreamAnswer:
        try:
            return conn.answer(method)
        except BaseException:
            conn.close()
            raise

    def _live_idle(self) -> UpstreamConnection | None:
        """An idle connection the upstream has not closed meanwhile (llama-server closes one after every
        stream): a closed one is dropped here, before a request is sent on it for nothing."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None or not conn.closed_by_peer():
                return conn
            self.closes_after_streams |= conn.streamed
            conn.close()
            self.dropped += 1
            self.stale += 1

    @staticmethod
    def _exchange(
        conn: UpstreamConnection,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str] | str,
        meanwhile: Callable[[], None] | None,
    ) -> UpstreamAnswer:
        try:
            return conn.exchange(method, path, headers, body, meanwhile)
        except BaseException:
            conn.close()
            raise

    def _connect(self) -> UpstreamConnection:
        for attempt in range(self._retries + 1):
            try:
                conn = UpstreamConnection.open(self._host, self._port, self._timeout_s, self._tls)
                self.opened += 1
                return conn
            except OSError:
                if attempt == self._retries:
                    raise
        raise AssertionError("unreachable")

    def give_back(self, conn: UpstreamConnection) -> None:
        """A finished connection back to the pool; one the upstream closed already, or one that carried a stream
        of an upstream seen to close after streams (llama-server), is replaced by a fresh one now, after the client
        has its answer, so that the next request does not connect on its path."""
        if (conn.streamed and self.closes_after_streams) or conn.closed_by_peer():
            self.closes_after_streams |= conn.streamed
            conn.close()
            self._spare()
            return
        with self._lock:
            self._idle.append(conn)

    def _spare(self) -> None:
        """Open the replacement of a dropped connection; the drop and the opening are counted together, so a
        reader of the counters never sees the one without the other."""
        try:
            conn = UpstreamConnection.open(self._host, self._port, self._timeout_s, self._tls)
        except OSError:
            with self._lock:
                self.dropped += 1
            return  # the next request connects (and retries) itself
        with self._lock:
            self.dropped += 1
            if self._closed:
                conn.close()
                return
            self.opened += 1
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class PooledAnswer:
    """An upstream's answer on a pooled connection: ``status_code``, ``headers`` (case-insensitive ``get``,
    ``items()`` with repeats), ``iter_raw`` (the body as it arrives), ``read``; :meth:`close` gives the
    connection back when the answer was read to its end, and the upstream slot in any case."""

    def __init__(self, answer: UpstreamAnswer, pool: UpstreamPool, slots: SlotsLike) -> None:
        self._answer, self._pool = answer, pool
        self.slots: SlotsLike | None = slots
        self.status_code = answer.status_code
        self.headers = answer.headers
        self.length = answer.length  # the body's Content-Length; None when chunked or ended by a close
        self.chunked = answer.chunked  # pump_framed gives the body's raw bytes, framing included

    def iter_raw(self, size: int = READ_BUFFER) -> Iterator[bytes]:
        return self._answer.iter_raw(size)

    def framing(self, hold_final: bool = False, decode: bool = False) -> ChunkFraming:
        """What follows this answer's chunks for :meth:`pump_framed`; an event stream's (``text/event-stream``)
        ends at its ``data: [DONE]`` event (:class:`ChunkFraming`'s ``end_at_done``)."""
        sse = self.headers.get("content-type", "").startswith("text/event-stream")
        return ChunkFraming(hold_final=hold_final, decode=decode, end_at_done=sse)

    def pump_framed(self, send: Callable[[bytes], object], framing: ChunkFraming | None = None) -> None:
        self._answer.pump_framed(send, framing)

    def read(self) -> bytes:
        return self._answer.read()

    def close(self) -> None:
        if self._answer.reusable:
            self._pool.give_back(self._answer.conn)
        else:
            self._answer.conn.close()
        if self.slots is not None:
            self.slots.release()
            self.slots = None


class PlainFields:
    """A plain answer's forwarded fields (``plainhead``: those of :data:`ANSWER_DROP` dropped) as :class:`PooledAnswer`'s
    ``headers`` are asked: ``get`` (the first value; a dropped field is not here) and ``lines`` of the fields to
    forward (less :data:`ANSWER_DROP` only: they are dropped already)."""

    def __init__(self, kept: bytes) -> None:
        self._kept = kept

    def get(self, name: str, default: str = "") -> str:
        field = re.search(rb"^" + re.escape(name.encode("latin-1")) + rb": ([^\r\n]*)\r\n", self._kept, re.I | re.M)
        return field.group(1).decode("latin-1") if field else default

    def lines(self, drop: frozenset[str]) -> str:
        if drop != ANSWER_DROP:
            raise ValueError("a plain answer's fields are kept less ANSWER_DROP only")
        return self._kept.decode("latin-1")


class PlainPooledAnswer:
    """A plain answer (``plainhead.plain_answer``) on a pooled connection, used as :class:`PooledAnswer` is:
    ``status_code``, ``headers`` (:class:`PlainFields`), ``length``, ``chunked``, ``read``, ``iter_raw``, ``framing``,
    ``pump_framed``, ``close``. Its head is left in the read buffer and taken with the body's first read (an answer
    with a length up to the buffer: head and body in one read); nothing is parsed into ``Headers``."""

    def __init__(
        self, conn: UpstreamConnection, answer: PlainAnswer, buffered: int, pool: UpstreamPool, slots: SlotsLike
    ) -> None:
        self.status_code, kept, self.length, self._sse, self._head = answer
        self.headers = PlainFields(kept)
        self.chunked = self.length is None
        self._conn, self._pool = conn, pool
        self.slots: SlotsLike | None = slots
        self._buffered = buffered  # what the read buffer holds, the head included
        self._finished = False
        conn.exchanges += 1
        conn.streamed = self.chunked

    def read(self) -> bytes:
        """The whole body: one with a length in one read, the head's with it; a chunked one decoded (its data
        without the framing, as :class:`PooledAnswer` reads it)."""
        if self.length is None:
            parts: list[bytes] = []
            framing = ChunkFraming(decode=True)
            self.pump_framed(lambda _: parts.append(framing.data), framing)
            return b"".join(parts)
        want = self._head + self.length
        data = self._conn.rfile.read(want)
        if len(data) != want:
            raise ProtocolError(f"upstream body ended {want - len(data)} bytes short")
        self._finished = True
        return data[self._head :]

    def iter_raw(self, size: int = READ_BUFFER) -> Iterator[bytes]:
        """A body with a length in pieces as they arrive (a chunked one is pumped: :meth:`pump_framed`)."""
        if self.length is None:
            raise ProtocolError("a chunked plain answer is pumped (pump_framed) or read whole (read)")
        rfile, left = self._conn.rfile, self.length
        rfile.read(self._head)
        while left:
            piece = rfile.read1(min(size, left))
            if not piece:
                raise ProtocolError(f"upstream body ended {left} bytes short")
            left -= len(piece)
            yield piece
        self._finished = True

    def framing(self, hold_final: bool = False, decode: bool = False) -> ChunkFraming:
        return ChunkFraming(hold_final=hold_final, decode=decode, end_at_done=self._sse)

    def pump_framed(self, send: Callable[[bytes], object], framing: ChunkFraming | None = None) -> None:
        self._conn.rfile.read(self._head)
        pump_plain_chunks(self._conn, self._buffered - self._head, send, framing or self.framing())
        self._finished = True

    def close(self) -> None:
        if self.slots is not None:
            self._pool.finish(self._conn, self._finished, self.slots)
            self.slots = None


def open_plain(
    pool: UpstreamPool,
    method: str,
    head: bytes,
    body: bytes,
    slots: SlotsLike,
    meanwhile: Callable[[], None] | None = None,
) -> PooledAnswer | PlainPooledAnswer:
    """Send a request whose head the caller made (``plainhead.upstream_head``) and return its answer unread: a plain
    one as :class:`PlainPooledAnswer`, any other read by the general path (:class:`PooledAnswer`)."""
    conn, first = pool.send_plain(head + body, slots, meanwhile)
    answer = plain_answer(first)
    if answer is None:
        return pool.answer(conn, method, slots)
    return PlainPooledAnswer(conn, answer, len(first), pool, slots)
