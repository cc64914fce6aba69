"""The proxies' shortest path: a request or an answer head in the plainest HTTP/1.1, taken whole from the read
buffer with one regular-expression match, its hop-by-hop fields dropped with one substitution::

    req = plain_request(rfile.peek(1), limit=32 << 20)     # None: not plain, nothing read (the general path takes it)
    method, target, fields, length, head_len = req          # b"POST", b"/v1/chat/completions", b"Content-Type: ...\\r\\n"
    ans = plain_answer(conn.rfile.peek(1))                 # (200, fields, 417, None, head_len) or None

Plain means: a request line ``GET`` or ``POST``, an origin-form target of visible ASCII, ``HTTP/1.1``; an answer
``HTTP/1.1`` with a status from 200 to 599 and either one ``Content-Length`` or ``Transfer-Encoding: chunked``; every
field ``name: value`` (one space after the colon, no space at the value's ends, CRLF), at most
:data:`~frankenstein.workload.wire.MAX_HEADERS` of them, the head whole in the buffer. A field the general path must
act on (``Expect``, ``Transfer-Encoding`` in a request, ``Connection`` other than ``keep-alive``, ``Upgrade``, ...)
makes the head not plain. What the caller forwards of a plain head is byte for byte what the general path's
``Headers.lines(HOP_HEADERS)`` gives (``tests/test_plainhead.py`` compares the two on generated heads).

Why: code run after a thread slept runs 5 to 10 times slower than warm on the machines measured here
(``benchmarks/cold_code.py``), so a request's cost is how much distinct code it touches. This path touches two
matches where the general one parses each field into ``Headers`` and writes them out again.
"""

from __future__ import annotations

import re

from frankenstein.workload.wire import MAX_HEAD_BYTES, MAX_HEADERS

# Not forwarded either way (as listener.HOP_HEADERS): hop-by-hop fields and those a proxy recomputes.
HOP_FIELDS = (
    *("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer"),
    *("transfer-encoding", "upgrade", "host", "content-length", "accept-encoding", "content-encoding", "expect"),
)

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_FIELDS = rb"((?:" + _TOKEN + rb": (?:[^ \t\r\n](?:[^\r\n]*[^ \t\r\n])?)?\r\n)*)\r\n"
# GET or POST, a target beginning with one '/', of visible ASCII (the general path splits the line on whitespace)
_REQUEST = re.compile(rb"(GET|POST) (/(?:[!-.0-~][!-~]*)?) HTTP/1\.1\r\n" + _FIELDS)
_ANSWER = re.compile(rb"HTTP/1\.1 ([2-5][0-9][0-9]) [^\r\n]*\r\n" + _FIELDS)
# Not forwarded of an answer (as listener.ANSWER_DROP): those, and its Date (the proxy writes its own, once); the engine's
# Server is forwarded, and the proxy adds none.
ANSWER_DROP_FIELDS = (*HOP_FIELDS, "date")


def _dropping(names: tuple[str, ...]) -> re.Pattern[bytes]:
    return re.compile(rb"^(?:" + b"|".join(n.encode() for n in names) + rb"): [^\r\n]*\r\n", re.I | re.M)


_HOP = _dropping(HOP_FIELDS)
_ANSWER_HOP = _dropping(ANSWER_DROP_FIELDS)
_LENGTH = re.compile(rb"^content-length: ([^\r\n]*)\r\n", re.I | re.M)
_CONTENT_TYPE = re.compile(rb"^content-type: ([^\r\n]*)\r\n", re.I | re.M)
# Fields after which a request is not plain: what the general path answers itself (Expect, a chunked body: 411),
# or a connection's fate other than kept alive.
_REQUEST_GENERAL = re.compile(
    rb"^(?:expect|transfer-encoding|upgrade|te|trailer|connection(?!: keep-alive\r\n)):", re.I | re.M
)
# In an answer: a framing or a connection's fate other than one length or plain chunks on a kept-alive connection.
_ANSWER_GENERAL = re.compile(
    rb"^(?:upgrade|trailer|transfer-encoding(?!: chunked\r\n)|connection(?!: keep-alive\r\n)):", re.I | re.M
)
_CHUNKED = re.compile(rb"^transfer-encoding:", re.I | re.M)
_NO_BODY = (204, 304)

PlainRequest = tuple[bytes, bytes, bytes, int, int]  # method, target, fields forwarded, body length, head length
PlainAnswer = tuple[int, bytes, int | None, bool, int]  # status, fields forwarded, length (None: chunked), SSE, head


def plain_request(buf: bytes, limit: int) -> PlainRequest | None:
    """The plain request head at the start of ``buf`` (see the module): (method, target, the fields to forward,
    the body's length, the head's length); None for anything else, a body above ``limit`` bytes included."""
    m = _REQUEST.match(buf)
    if m is None or m.end() > MAX_HEAD_BYTES:
        return None
    fields = m.group(3)
    if fields.count(b"\n") > MAX_HEADERS or _REQUEST_GENERAL.search(fields):
        return None
    lengths = _LENGTH.findall(fields)
    if len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
        return None
    n = int(lengths[0]) if lengths else 0
    if n > limit:
        return None
    return m.group(1), m.group(2), _HOP.sub(b"", fields), n, m.end()


def plain_answer(buf: bytes) -> PlainAnswer | None:
    """The plain answer head at the start of ``buf`` (see the module): (status, the fields to forward, the body's
    length or None when chunked, whether it is an event stream, the head's length); None for anything else."""
    m = _ANSWER.match(buf)
    if m is None or m.end() > MAX_HEAD_BYTES:
        return None
    status, fields = int(m.group(1)), m.group(2)
    if status in _NO_BODY or fields.count(b"\n") > MAX_HEADERS or _ANSWER_GENERAL.search(fields):
        return None
    lengths = _LENGTH.findall(fields)
    chunked = _CHUNKED.search(fields) is not None
    if chunked == bool(lengths) or len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
        return None  # both or neither (an answer ended by a close), or a length the general path refuses
    kept = _ANSWER_HOP.sub(b"", fields)
    if not chunked:
        return status, kept, int(lengths[0]), False, m.end()
    content_type = _CONTENT_TYPE.search(fields)
    sse = content_type is not None and content_type.group(1).startswith(b"text/event-stream")
    return status, kept, None, sse, m.end()


def upstream_head(method: bytes, target: bytes, host: bytes, fields: bytes, length: int) -> bytes:
    """The head a plain request is sent upstream with: ``wire.request_head``'s bytes (``Host`` first, the forwarded
    fields, ``Content-Length`` when a body follows or the method is POST)."""
    length_line = b"Content-Length: %d\r\n" % length if length or method == b"POST" else b""
    return b"%s %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n" % (method, target, host, fields, length_line)
