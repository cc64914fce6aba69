"""HTTP/1.1 on the proxies' hot path, lean: a message head read with ``readline`` and split with bytes
operations, a response head built as one bytes join, and an upstream client on a raw socket.

Why not the standard library here: ``http.server`` and ``http.client`` parse every head with
``email.parser`` and ``http.client`` opens a new buffered file per answer; a profile of passed-through
requests spent more time there than in frank (``benchmarks/proxy_overhead.py``, docs/benchmarks.md).
Everything else a proxy needs of HTTP is small::

    head = read_head(rfile)              # ["POST /v1/chat/completions HTTP/1.1", "Host: ...", ...]
    headers = parse_headers(head[1:])    # Headers: case-insensitive get(), items() with repeats
    conn = UpstreamConnection.open("127.0.0.1", 8080, timeout_s=600)
    answer = conn.exchange("POST", "/tokenize", {"Content-Type": "application/json"}, b"{...}")
    answer.status_code, answer.headers.get("content-type"), answer.read()

Limits, for a client or an upstream that sends too much: a head of at most :data:`MAX_HEAD_BYTES`
and :data:`MAX_HEADERS` lines (:class:`HeadTooLarge`, answered 431 to a client); a line without a colon
or a folded line in a request is a :class:`BadHead` (400). In an upstream's answer a folded line is
joined to the one before with a space (RFC 9112 5.2). A chunked answer is decoded as it arrives
(extensions and trailers read and dropped); an answer with neither a length nor chunks ends at close.
"""

from __future__ import annotations

import io
import re
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import Protocol, cast, overload

MAX_LINE = 65536  # one head line, as http.client's _MAXLINE
MAX_HEADERS = 100  # header lines in one head, as http.client's _MAXHEADERS
MAX_HEAD_BYTES = 64 * 1024
READ_BUFFER = 64 * 1024


class HeadReader(Protocol):
    """What a head is read from: a buffered socket file (``io.BufferedReader``)."""

    def readline(self, size: int | None = -1, /) -> bytes: ...

    def peek(self, size: int = 0, /) -> bytes: ...

    def read(self, size: int | None = -1, /) -> bytes: ...


class BadHead(ValueError):
    """A malformed message head (answered 400 to a client, a :class:`ProtocolError` from an upstream)."""

    status = 400


class HeadTooLarge(BadHead):
    """A head above :data:`MAX_HEAD_BYTES` or :data:`MAX_HEADERS` lines (answered 431)."""

    status = 431


class ProtocolError(ConnectionError):
    """The upstream broke HTTP/1.1 (a bad head, a body cut short): the connection is not reused."""


class Closed(ConnectionError):
    """A reused connection that the upstream closed before answering anything (safe to send again)."""


class Headers:
    """Header fields in arrival order; lookups by name ignore case. ``get`` returns the first value
    (as ``email.message.Message`` does), ``items`` every pair with repeats, iteration the names;
    :meth:`lines` the fields a proxy forwards, as head text."""

    __slots__ = ("_pairs", "_first", "_lower")

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self._pairs: list[tuple[str, str]] = []
        self._first: dict[str, str] = {}
        self._lower: list[str] = []  # the names lowercased, in the order of _pairs
        for name, value in pairs:
            self.add(name, value)

    @classmethod
    def of_fields(cls, fields: list[tuple[str, str]]) -> Headers:
        """Headers of (name, value) pairs already checked: no call per field."""
        headers = cls()
        headers._pairs = fields
        headers._lower = lowered = [name.lower() for name, _ in fields]
        first = headers._first
        for low, (_, value) in zip(lowered, fields):
            if low not in first:
                first[low] = value
        return headers

    def add(self, name: str, value: str) -> None:
        low = name.lower()
        self._pairs.append((name, value))
        self._lower.append(low)
        self._first.setdefault(low, value)

    @overload
    def get(self, name: str) -> str | None: ...

    @overload
    def get(self, name: str, default: str) -> str: ...

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def get_all(self, name: str) -> list[str]:
        key = name.lower()
        return [v for (_, v), low in zip(self._pairs, self._lower) if low == key]

    def items(self) -> list[tuple[str, str]]:
        return list(self._pairs)

    def lines(self, drop: frozenset[str]) -> str:
        """The fields whose lowercased name is not in ``drop``, as ``Name: value\r\n`` head lines (repeats kept)."""
        return "".join([f"{n}: {v}\r\n" for (n, v), low in zip(self._pairs, self._lower) if low not in drop])

    def __getitem__(self, name: str) -> str | None:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._pairs)

    def __len__(self) -> int:
        return len(self._pairs)

    def __repr__(self) -> str:
        return f"Headers({self._pairs!r})"


# ---------------------------------------------------------------- reading a head


def read_head(rfile: HeadReader, first: bytes | None = None) -> list[str]:
    """The lines of one message head (without their line ends, decoded as latin-1) up to the empty line;
    ``first``: its first line when already read. An empty list: the peer closed before sending anything.

    A head already in the read buffer (nearly every one) is taken with one ``find`` and one ``split``;
    otherwise line by line."""
    lines = [first.rstrip(b"\r\n").decode("latin-1")] if first is not None else []
    if first in (b"\r\n", b"\n"):
        return []
    buffered = rfile.peek(MAX_HEAD_BYTES)
    if buffered.startswith(b"\r\n") and lines:
        rfile.read(2)
        return lines
    end = buffered.find(b"\r\n\r\n")
    if end < 0 or b"\n" in buffered[:end].replace(b"\r\n", b"") or b"\r" in buffered[:end].replace(b"\r\n", b""):
        return _read_lines(rfile, lines)
    block = rfile.read(end + 4)[:end].decode("latin-1").split("\r\n")
    _check_size(sum(map(len, lines)) + end, len(lines) + len(block))
    return lines + block


# A head's header section as the bytes after its start line, whole in the read buffer, every line ``token: value``
# with CRLF ends (RFC 9112 field syntax): one match validates it, one findall splits it. Anything else (a bare
# LF or CR, a folded line, a head not yet whole in the buffer, a bad line) takes the line-by-line path.
_PLAIN_FIELDS = re.compile(rb"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*\r\n)*\r\n")
_FIELD = re.compile(r"([^:\r\n]+):[ \t]*(.*?)[ \t]*\r\n")


def read_message_head(rfile: HeadReader, first: bytes, unfold: bool = False) -> tuple[str, Headers] | None:
    """The start line ``first`` (already read) decoded, and the header fields that follow it; None when
    ``first`` is an empty line or nothing (the peer closed). A head in plain syntax is taken with one regular
    expression match and one split (this runs on every request's and answer's path); any other goes line by
    line (:func:`read_head`, :func:`parse_headers`: the same fields, or the same :class:`BadHead`)."""
    if first in (b"", b"\r\n", b"\n"):
        return None
    plain = _PLAIN_FIELDS.match(rfile.peek(MAX_HEAD_BYTES))
    if plain is None:
        lines = read_head(rfile, first)
        return lines[0], parse_headers(lines[1:], unfold)
    fields = _FIELD.findall(rfile.read(plain.end()).decode("latin-1"))
    _check_size(len(first) + plain.end(), len(fields) + 1)
    return first.rstrip(b"\r\n").decode("latin-1"), Headers.of_fields(fields)


def _read_lines(rfile: HeadReader, lines: list[str]) -> list[str]:
    """The head line by line (split over segments, bare ``\\n`` line ends, or larger than the buffer)."""
    total = sum(map(len, lines))
    while True:
        line = rfile.readline(MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            return lines
        if not line:
            if lines:
                raise BadHead("the message head ended before its empty line")
            return lines
        total += len(line)
        _check_size(total if len(line) <= MAX_LINE else MAX_HEAD_BYTES + 1, len(lines) + 1)
        lines.append(line.rstrip(b"\r\n").decode("latin-1"))


def _check_size(total: int, count: int) -> None:
    if total > MAX_HEAD_BYTES or count > MAX_HEADERS + 1:
        raise HeadTooLarge(f"message head above {MAX_HEAD_BYTES} bytes or {MAX_HEADERS} header lines")


def parse_headers(lines: list[str], unfold: bool = False) -> Headers:
    """Header lines → :class:`Headers`; a folded line (leading space or tab) is joined to the one before
    when ``unfold`` (an upstream's answer), a :class:`BadHead` otherwise (a client's request). One loop, no
    call per field: this runs on every request's path."""
    headers = Headers()
    pairs, first, lowered = headers._pairs, headers._first, headers._lower
    for line in _unfolded(lines) if unfold else lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name[-1] in " \t" or name[0] in " \t":
            raise BadHead(_field_error(line))
        low = name.lower()
        value = value.strip(" \t")
        pairs.append((name, value))
        lowered.append(low)
        if low not in first:
            first[low] = value
    return headers


def _field_error(line: str) -> str:
    if line[:1] in (" ", "\t"):
        return "a folded header line (obs-fold) is not accepted"
    return f"header line without a 'name:' ({line[:40]!r})"


def _unfolded(lines: list[str]) -> list[str]:
    if not any(line[:1] in (" ", "\t") for line in lines):
        return lines
    out: list[str] = []
    for line in lines:
        if line[:1] in (" ", "\t") and out:
            out[-1] = f"{out[-1]} {line.strip()}"
        else:
            out.append(line)
    return out


# ---------------------------------------------------------------- writing a head

_date = (0, "")
_server_date: tuple[int, str, bytes] = (0, "", b"")
_status_lines: dict[tuple[str, int, str | None], bytes] = {}


def http_date() -> str:
    """The ``Date`` header's value, formatted once per second."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now)))
    return _date[1]


def date_line() -> bytes:
    """The ``Date`` head line as bytes (a relayed answer's: the engine's ``Server`` goes with it, no ``Server`` of ours)."""
    return b"Date: %s\r\n" % http_date().encode("latin-1")


def server_and_date(server: str) -> bytes:
    """The ``Server`` and ``Date`` head lines as bytes, made once per second (a head is begun on every answer's
    path)."""
    global _server_date
    now = int(time.time())
    if _server_date[0] != now or _server_date[1] != server:
        _server_date = (now, server, f"Server: {server}\r\nDate: {http_date()}\r\n".encode("latin-1"))
    return _server_date[2]


def status_line(version: str, code: int, reason: str | None = None) -> bytes:
    """``HTTP/1.1 200 OK\\r\\n``; the lines of the standard phrases are made once."""
    key = (version, code, reason)
    line = _status_lines.get(key)
    if line is None:
        phrase = (
            reason if reason is not None else HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else ""
        )
        line = f"{version} {code} {phrase}\r\n".encode("latin-1")
        if reason is None:
            _status_lines[key] = line
    return line


def request_head(method: str, path: str, host: str, headers: dict[str, str] | str, length: int | None) -> bytes:
    """One request head as bytes: request line, ``Host``, the headers (a dict, or head lines already made by
    :meth:`Headers.lines`), ``Content-Length`` when a body follows."""
    fields = headers if isinstance(headers, str) else "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
    length_line = "" if length is None else f"Content-Length: {length}\r\n"
    return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{fields}{length_line}\r\n".encode("latin-1")


# ---------------------------------------------------------------- the upstream client


class UpstreamConnection:
    """One kept-alive connection to an upstream (Nagle off); one request at a time."""

    def __init__(self, sock: socket.socket, host: str) -> None:
        self.sock = sock
        self.rfile = cast(io.BufferedReader, sock.makefile("rb", buffering=READ_BUFFER))
        self.host = host
        self.exchanges = 0  # requests answered on this connection
        self.streamed = False  # its last answer was chunked (a stream): an upstream may close it after that
        self.reusable = True
        self._readable = select.poll()  # asked by closed_by_peer: one C call, no lists made
        self._readable.register(sock, select.POLLIN)

    @classmethod
    def open(cls, host: str, port: int, timeout_s: float, tls: bool = False) -> UpstreamConnection:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        return cls(sock, f"{host}:{port}")

    def exchange(
        self,
        method: str,
        path: str,
        headers: dict[str, str] | str,
        body: bytes | None,
        meanwhile: Callable[[], None] | None = None,
    ) -> UpstreamAnswer:
        """Send one request (head and body in one ``sendall``), run ``meanwhile`` (work for while the engine
        works: it may run again if the request is sent again), and read its answer's head; the body is left to
        the :class:`UpstreamAnswer`. A reused connection closed before any answer raises :class:`Closed`."""
        length = len(body) if body is not None else (0 if method in ("POST", "PUT", "PATCH") else None)
        head = request_head(method, path, self.host, headers, length)
        try:
            self.sock.sendall(head + body if body else head)
            if meanwhile is not None:
                meanwhile()
            status, fields = self._answer_head()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Closed(f"upstream {self.host} closed the connection: {exc}") from exc
        return self.answer_of(method, status, fields)

    def send_peek(self, data: bytes, meanwhile: Callable[[], None] | None = None) -> bytes:
        """Send one whole request (its head made by the caller, ``Host`` naming :attr:`host`), run ``meanwhile``,
        and wait for the answer's first bytes: they are returned and left in the read buffer (:meth:`answer`
        reads the head from there). A reused connection closed before any answer raises :class:`Closed`."""
        try:
            self.sock.sendall(data)
            if meanwhile is not None:
                meanwhile()
            first = self.rfile.peek(1)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Closed(f"upstream {self.host} closed the connection: {exc}") from exc
        if not first:
            raise Closed(f"upstream {self.host} closed the connection without an answer")
        return first

    def answer(self, method: str) -> UpstreamAnswer:
        """The answer whose first bytes :meth:`send_peek` saw: its head read, its body left to the answer."""
        status, fields = self._answer_head()
        return self.answer_of(method, status, fields)

    def answer_of(self, method: str, status: str, fields: Headers) -> UpstreamAnswer:
        """An answer whose head was read; counted as this connection's latest exchange."""
        self.exchanges += 1
        answer = UpstreamAnswer(self, method, status, fields)
        self.streamed = answer.chunked
        return answer

    def _answer_head(self) -> tuple[str, Headers]:
        """The status line and fields of the final answer (interim 1xx answers skipped)."""
        while True:
            head = read_head_from_upstream(self.rfile)
            if head is None:
                raise Closed(f"upstream {self.host} closed the connection without an answer")
            code = head[0][9:12]
            if not code.startswith("1") or code == "101":  # 100 Continue, 103 Early Hints: skipped
                return head

    def closed_by_peer(self) -> bool:
        """Whether an idle connection has something to read: the upstream's close (or bytes nobody asked
        for); either way it cannot carry a request. One ``poll`` that does not wait. Not asked of a TLS
        connection (a server's session tickets arrive unasked): its close is found by sending, and resent."""
        if isinstance(self.sock, ssl.SSLSocket):
            return False
        return bool(self._readable.poll(0))

    def close(self) -> None:
        self.reusable = False
        try:
            self.rfile.close()
        finally:
            self.sock.close()


def pump_chunks(conn: UpstreamConnection, send: Callable[[bytes], object], framing: ChunkFraming) -> None:
    """A chunked body's bytes from ``conn`` handed to ``send`` as they arrive (:meth:`UpstreamAnswer.pump_framed`),
    to the end ``framing`` finds; a connection closed after an event stream's end, or with bytes after the body,
    is not reused. A broken frame, or a close before the end: :class:`ProtocolError`."""
    _pump(conn, conn.rfile.read1, send, framing, conn.rfile.read1(READ_BUFFER))


def pump_plain_chunks(
    conn: UpstreamConnection, buffered: int, send: Callable[[bytes], object], framing: ChunkFraming
) -> None:
    """:func:`pump_chunks` for an answer whose head was taken from the read buffer (``plainhead``): the
    ``buffered`` bytes still in it first, then the socket read directly, one C call per piece (no buffered
    reader between). The read buffer is empty after it, so the connection's next answer is read as usual."""
    recv = conn.sock.recv
    _pump(conn, recv, send, framing, conn.rfile.read(buffered) if buffered else recv(READ_BUFFER))


def _pump(
    conn: UpstreamConnection,
    read: Callable[[int], bytes],
    send: Callable[[bytes], object],
    framing: ChunkFraming,
    data: bytes,
) -> None:
    feed = framing.feed
    while True:
        if not data and framing.ended:  # closed after [DONE]: the answer was whole, the connection is spent
            conn.reusable = False
            return
        if not data:
            raise ProtocolError("upstream closed the connection inside a chunked body")
        out = feed(data)
        if out:
            send(out)
        if framing.broken is not None:
            raise ProtocolError(f"upstream sent {framing.broken}")
        if framing.done:
            conn.reusable = conn.reusable and not framing.surplus  # bytes after the answer that nobody asked for
            return
        data = read(READ_BUFFER)


def read_head_from_upstream(rfile: HeadReader) -> tuple[str, Headers] | None:
    """An answer's status line and fields (folded lines joined); None when the upstream closed first."""
    try:
        return read_message_head(rfile, rfile.readline(MAX_LINE + 1), unfold=True)
    except BadHead as exc:
        raise ProtocolError(f"upstream answered a malformed head: {exc}") from exc


class UpstreamAnswer:
    """An upstream's answer whose body is read as it arrives: ``status_code``, ``headers``, ``iter_raw``
    (the body decoded: chunks without their framing), ``read``, and ``finished`` once the body was read
    to its end (the connection may then carry another request)."""

    def __init__(self, conn: UpstreamConnection, method: str, status: str, headers: Headers) -> None:
        self.conn = conn
        self.version, self.status_code = _status(status)
        self.headers = headers
        self.will_close = _will_close(self.version, self.headers)
        self._left: int | None = None  # bytes of the body (or of the current chunk) still to read
        self._mode = _body_mode(method, self.status_code, self.headers)
        if self._mode == "length":
            self._left = _length(self.headers)
        self.length = 0 if self._mode == "none" else self._left
        self.finished = self._mode == "none" or self._left == 0

    def iter_raw(self, size: int = READ_BUFFER) -> Iterator[bytes]:
        if self._mode == "chunked":
            yield from self._chunks(size)
        elif self._mode == "length":
            yield from self._counted(size)
        elif self._mode == "close":
            yield from self._until_close(size)

    def read(self) -> bytes:
        """The whole body (with a length: one read of it)."""
        if self._mode != "length":
            return b"".join(self.iter_raw())
        data = self.conn.rfile.read(self._left) if self._left else b""
        if len(data) != self._left:
            raise ProtocolError(f"upstream body ended {(self._left or 0) - len(data)} bytes short")
        self._left, self.finished = 0, True
        return data

    def pump_framed(self, send: Callable[[bytes], object], framing: ChunkFraming | None = None) -> None:
        """A chunked body's bytes handed to ``send`` as they arrive, framing included (sizes, the final 0-chunk):
        one read, one piece, unchanged when the framing is plain (:class:`ChunkFraming`, which also finds the
        end, so the connection can carry the next request), from one loop (no generator between the read and the
        send). A broken frame: the good bytes before it, then :class:`ProtocolError`; the upstream's close before
        the end: :class:`ProtocolError`. ``framing``: one made by the caller (to hold the final chunk back, or
        read each piece's decoded ``data``)."""
        pump_chunks(self.conn, send, framing or ChunkFraming())
        self.finished = True

    @property
    def chunked(self) -> bool:
        return self._mode == "chunked"

    def _counted(self, size: int) -> Iterator[bytes]:
        while self._left:
            data = self.conn.rfile.read1(min(size, self._left))
            if not data:
                raise ProtocolError(f"upstream body ended {self._left} bytes short")
            self._left -= len(data)
            yield data
        self.finished = True

    def _until_close(self, size: int) -> Iterator[bytes]:
        while data := self.conn.rfile.read1(size):
            yield data
        self.finished, self.will_close = True, True

    def _chunks(self, size: int) -> Iterator[bytes]:
        while (n := self._chunk_size()) > 0:
            self._left = n
            yield from self._counted(size)
            self._crlf()
        self._trailers()
        self.finished = True

    def _chunk_size(self) -> int:
        line = self.conn.rfile.readline(MAX_LINE + 1)
        n = chunk_size(line)
        if n is None:
            raise ProtocolError(f"upstream sent a bad chunk size line {line[:40]!r}")
        return n

    def _crlf(self) -> None:
        if self.conn.rfile.readline(MAX_LINE + 1) not in (b"\r\n", b"\n"):
            raise ProtocolError("upstream chunk not followed by CRLF")

    def _trailers(self) -> None:
        """Trailer fields after the last chunk: read to the empty line and dropped."""
        for _ in range(MAX_HEADERS + 1):
            line = self.conn.rfile.readline(MAX_LINE + 1)
            if line in (b"\r\n", b"\n"):
                return
            if not line:
                raise ProtocolError("upstream stream ended inside the trailers")
        raise ProtocolError("upstream sent too many trailer lines")

    @property
    def reusable(self) -> bool:
        return self.finished and not self.will_close and self.conn.reusable


def _status(line: str) -> tuple[str, int]:
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"upstream answered a bad status line {line[:60]!r}")
    return parts[0], int(parts[1])


def _will_close(version: str, headers: Headers) -> bool:
    if headers.get("connection") is None:
        return version == "HTTP/1.0"
    tokens = {t.strip().lower() for t in ",".join(headers.get_all("connection")).split(",")}
    if version == "HTTP/1.0":
        return "keep-alive" not in tokens
    return "close" in tokens


def _body_mode(method: str, status: int, headers: Headers) -> str:
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return "none"
    if "chunked" in (headers.get("transfer-encoding") or "").lower():
        return "chunked"
    return "length" if headers.get("content-length") is not None else "close"


def _length(headers: Headers) -> int:
    values = {v.strip() for v in headers.get_all("content-length")}
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise ProtocolError(f"upstream sent a bad Content-Length {sorted(values)!r}")
    return int(values.pop())


# ---------------------------------------------------------------- a chunked body's framing

_HEX_DIGITS = b"0123456789abcdefABCDEF"
_DONE_TAIL = b"data: [DONE]\n\n\r\n"  # the last event of an OpenAI-style stream, then its chunk's CRLF


def _ends_at_done(data: bytes, end: int) -> bool:
    """Whether ``data[:end]`` (given back, ending between chunks) ends with the chunk CRLF of a ``data: [DONE]`` event
    that begins a line: the 14 bytes before that CRLF hold no ``\r``, so no framing line is among them."""
    start = end - len(_DONE_TAIL)
    return start > 0 and data.startswith(_DONE_TAIL, start) and data[start - 1] == _LF


_LF = ord("\n")  # before it: the end of the chunk's size line or of the event before, in the same chunk
_CHUNK_SIZE = re.compile(rb"[1-9a-f][0-9a-f]{0,15}(?=\r\n)")  # a data chunk's size, lower-case hex as engines send


def chunk_size(line: bytes) -> int | None:
    """A chunk size line's size (extensions after ``;`` ignored); None when it is not hex digits alone
    (``int`` would take ``0x``, ``_`` and a sign)."""
    digits = line.split(b";", 1)[0].strip(b" \t\r\n")
    if not digits or len(digits) > 16 or digits.translate(None, _HEX_DIGITS):
        return None
    return int(digits, 16)


class ChunkFraming:
    """Follows a chunked body's framing over its raw bytes, fed as they arrive in pieces of any size, and
    gives back what to send on: the same bytes when the framing is plain (``%x\\r\\n`` sizes), chunk data as
    soon as it arrives, a framing line only once it is whole. Extensions are dropped from a size line and
    trailers dropped (as a decoding relay would), a bare LF made CRLF. ``done`` after the final 0-chunk's
    empty line (``surplus``: bytes fed after it), ``broken`` says what was wrong (nothing of it is given
    back). ``hold_final``: the final 0-chunk is not given back (the caller sends ``0\\r\\n\\r\\n`` when it
    is ready to end the answer); ``decode``: each feed's chunk data is also in ``data``; ``end_at_done``: an
    event stream's answer ends at its ``data: [DONE]`` event (see :meth:`feed`)::

        framing = ChunkFraming()
        framing.feed(b"5;x=1\\r\\nhel")           # b"5\\r\\nhel"
        framing.feed(b"lo\\r\\n0\\r\\n\\r\\nXY")  # b"lo\\r\\n0\\r\\n\\r\\n"; framing.done, framing.surplus == 2
    """

    __slots__ = (
        *("_left", "_line", "_expect", "_trailers", "_out", "_mark", "_hold", "_decode"),
        *("done", "broken", "surplus", "data", "_at_done", "ended", "late"),
    )

    def __init__(self, hold_final: bool = False, decode: bool = False, end_at_done: bool = False) -> None:
        self._hold = hold_final  # the final 0-chunk and its empty line are not given back (the caller sends them)
        self._decode = decode  # each feed's chunk data, without framing, in ``data``
        self._at_done = end_at_done  # the answer ends at a piece whose last chunk ends with ``data: [DONE]``
        self.ended = False  # the answer's end was given back (or is the caller's to send, with hold_final)
        self.late = 0  # bytes of chunks after the answer's end (given back to nobody)
        self.data = b""
        self._left = 0  # chunk data still to come
        self._line = b""  # a framing line begun in an earlier piece (held back until whole)
        self._expect = "size"  # the next line: "size", "crlf" (after a chunk's data) or "trailer"
        self._trailers = 0
        self._out: list[bytes] = []  # this piece's output when it differs from the piece
        self._mark = 0  # where this piece's bytes not yet in _out begin
        self.done = False
        self.broken: str | None = None
        self.surplus = 0

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` to send on (see the class); stops at the body's end or at a broken frame.

        With ``end_at_done``, a piece of whole plain chunks whose last chunk ends with the event ``data: [DONE]``
        ends the answer: it is given back with the final 0-chunk after it (``ended``; with ``hold_final`` the
        caller sends that). An engine sends nothing but its own final chunk after ``[DONE]``; those bytes are
        followed to the body's end (so the connection can carry the next request) and given back to nobody, and
        any chunk data among them is counted in ``late``. The client's answer then ends ~40 µs earlier, before
        the engine's last two writes (measured on llama-server; docs/benchmarks.md)."""
        if self.ended:
            self.late += len(self._feed(data))
            return b""
        if not self._left and self._expect == "size" and not self._line:
            size = _CHUNK_SIZE.match(data)  # one chunk, the piece whole (what an engine sends): one match
            if size is not None:
                start = size.end() + 2
                stop = start + int(size.group(), 16)
                if stop + 2 == len(data) and data.endswith(b"\r\n"):
                    self.surplus = 0
                    if self._decode:
                        self.data = data[start:stop]
                    return self._ending(data)
            whole = self._whole_chunks(data)
            if whole is not None:
                return whole
        out = self._framed(data)  # a piece cut elsewhere than between chunks (a framing line held): the same end
        if self._at_done and self.broken is None:
            if self.done:  # with the engine's final chunk (given back whole as 0\r\n\r\n unless held)
                final = 0 if self._hold else 5
                self.ended = (self._hold or out.endswith(b"0\r\n\r\n")) and _ends_at_done(out, len(out) - final)
            elif self.between_chunks:
                return self._ending(out)
        return out

    def _ending(self, data: bytes) -> bytes:
        """What is given back of a piece that ends between chunks: with ``end_at_done``, one whose last event is
        ``data: [DONE]`` ends the answer (the final 0-chunk after it, unless the caller holds it)."""
        if self._at_done and _ends_at_done(data, len(data)):
            self.ended = True  # what follows is the engine's final chunk: not given back (``late`` otherwise)
            if not self._hold:
                self._hold = True
                return data + b"0\r\n\r\n"
        return data

    def _feed(self, data: bytes) -> bytes:
        if not self._left and self._expect == "size" and not self._line:
            whole = self._whole_chunks(data)
            if whole is not None:
                return whole
        return self._framed(data)

    def _framed(self, data: bytes) -> bytes:
        """The general path: ``data`` followed line by line and chunk by chunk."""
        pos, end = 0, len(data)
        self._out, self._mark = [], 0
        decoded: list[bytes] = []
        while pos < end and not self.done and self.broken is None:
            if self._left:
                step = min(self._left, end - pos)
                if self._decode:
                    decoded.append(data[pos : pos + step])
                self._left -= step
                pos += step
            else:
                pos = self._line_at(data, pos)
        self.surplus = end - pos if self.done else 0
        self.data = b"".join(decoded)
        if not self._out:
            return data if pos == end and self._mark == 0 else data[self._mark : pos]
        self._out.append(data[self._mark : pos])
        return b"".join(self._out)

    def _whole_chunks(self, data: bytes) -> bytes | None:
        """What :meth:`feed` gives back for a piece that is whole chunks in plain framing (what engines send: one
        event per chunk), found with a few bytes operations; None, the state untouched, for anything else (the
        general path then reads it byte by byte)."""
        pos, end = 0, len(data)
        parts: list[bytes] = []
        while pos < end:
            nl = data.find(b"\r\n", pos, pos + 18)
            digits = data[pos:nl]
            if nl <= pos or digits.translate(None, _HEX_DIGITS) or digits[:1] == b"0" and nl - pos > 1:
                return None
            n = int(digits, 16)
            if n == 0:  # the final chunk: plain only when it ends the piece with its empty line and no trailers
                if data[nl:] != b"\r\n\r\n" or digits != b"0":
                    return None
                self.done, self._expect, self.surplus = True, "trailer", 0
                self.data = b"".join(parts)
                # [DONE] and the engine's final chunk in one piece (read late): the answer ended at [DONE] too
                if self._at_done and _ends_at_done(data, pos):
                    self.ended = True
                return data[:pos] if self._hold else data
            stop = nl + 2 + n
            if data[stop : stop + 2] != b"\r\n" or digits != b"%x" % n:
                return None
            if self._decode:
                parts.append(data[nl + 2 : stop])
            pos = stop + 2
        self.surplus = 0
        self.data = b"".join(parts)
        if not end:
            return None
        return self._ending(data)

    def _line_at(self, data: bytes, pos: int) -> int:
        """Past the framing line at ``pos``; a line that continues in the next piece is held back; at ``pos``
        when the line is broken."""
        nl = data.find(b"\n", pos)
        if nl < 0:
            self._emit(data, pos, None)
            self._line += data[pos:]
            self._mark = len(data)
            if len(self._line) > MAX_LINE:
                self.broken = "a chunk framing line above 64 KiB"
            return len(data)
        held, line = self._line, self._line + data[pos : nl + 1]
        self._line = b""
        self.broken, plain = self._take(line) if len(line) <= MAX_LINE else ("a chunk framing line above 64 KiB", b"")
        if self.broken is not None:
            return pos
        if held or plain != line:
            self._emit(data, pos, plain)
            self._mark = nl + 1
        return nl + 1

    def _emit(self, data: bytes, pos: int, line: bytes | None) -> None:
        self._out.append(data[self._mark : pos])
        if line:
            self._out.append(line)

    def _take(self, line: bytes) -> tuple[str | None, bytes]:
        """(what is wrong or None, the line to send on)."""
        if self._expect == "size":
            return self._size(line)
        if self._expect == "crlf":
            if line not in (b"\r\n", b"\n"):
                return "a chunk not followed by CRLF", b""
            self._expect = "size"
            return None, b"\r\n"
        if line in (b"\r\n", b"\n"):
            self.done = True
            return None, b"" if self._hold else b"\r\n"
        self._trailers += 1
        return ("too many trailer lines" if self._trailers > MAX_HEADERS else None), b""

    def _size(self, line: bytes) -> tuple[str | None, bytes]:
        n = chunk_size(line)
        if n is None:
            return f"a bad chunk size line {line[:40]!r}", b""
        self._left, self._expect = n, ("crlf" if n else "trailer")
        return None, b"" if self._hold and not n else b"%x\r\n" % n

    @property
    def between_chunks(self) -> bool:
        """Whether what was given back ends on a chunk boundary, so another chunk may be written after it
        (a framing line not yet whole was not given back; nor was a held final chunk)."""
        return not self._left and (self._expect == "size" or (self._hold and self._expect == "trailer"))
