"""The plain path of ``frank serve`` (workload/plainhead.py, proxy._passed_plain): a request or an answer in the
plainest HTTP/1.1 is taken whole with one match, and the engine and the client must get exactly the bytes the
general path (``read_message_head`` into ``Headers``, ``Headers.lines(HOP_HEADERS)``, ``request_head``) gives.

Generated heads compare the two byte for byte; a list of heads the general path must keep (because it acts on
them: 100 Continue, 411, a close, a refused length) attacks the match; and a real ``frank serve`` front in front of
an upstream test double that records every byte it is sent shows both paths give the engine the same request and
the client the same answer. (The double stands in for an engine because llama-server cannot show what it was
sent; the real llama-server behind the plain path is tests/test_serve.py's.)"""

from __future__ import annotations

import io
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from frankenstein.regioncache import RegionCache
from frankenstein.regioncache.proxy import Front, start_front
from frankenstein.shipped import data_path
from frankenstein.workload.listener import (
    ANSWER_DROP,
    HOP_HEADERS,
    PlainPooledAnswer,
    UpstreamPool,
    _wants_close,
    open_plain,
)
from frankenstein.workload.record import serve_recorder
from frankenstein.workload.trace import load_trace
from frankenstein.workload.plainhead import plain_answer, plain_request, upstream_head
from frankenstein.workload.wire import READ_BUFFER, read_message_head, request_head
from helpers_upstream import ScriptedUpstreamTestDouble, exchange

LIMIT = 1 << 20
NAMES = [
    *("Host", "Content-Type", "content-length", "Connection", "Keep-Alive", "Expect", "Transfer-Encoding"),
    *("X-Trace", "Accept-Encoding", "TE", "Authorization", "Upgrade", "Proxy-Authorization", "x-api-key"),
    *("Trailer", "Content-Encoding", "Accept", "User-Agent"),
]
SEPARATORS = [": "] * 8 + [":", ":  ", ": \t"]
VALUES = [
    "application/json",
    "Bearer k",
    "keep-alive",
    "close",
    "chunked",
    "100-continue",
    "12",
    "abc",
    "",
    " padded ",
    "v\tx",
    "caf\xe9",
    "*/*",
]


def _case(rng: random.Random, name: str) -> str:
    return "".join(c.upper() if rng.random() < 0.3 else c for c in name)


def _head(rng: random.Random) -> tuple[bytes, bytes]:
    """A random request (head, body): mostly plain, often not (each field drawn from names the general path acts on
    and values it trims)."""
    method = rng.choice(["POST", "POST", "POST", "GET", "HEAD", "post"])
    target = rng.choice(
        ["/v1/chat/completions", "/v1/chat/completions", "/x?y=1", "/", "//a", "/a%20b", "http://h/x", "/\xe9"]
    )
    version = rng.choice(["HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0"])
    body = b'{"a": 1}' * rng.randint(0, 3)
    lines = [f"{method} {target} {version}"]
    for _ in range(rng.randint(0, 4)):
        name = _case(rng, rng.choice(NAMES))
        if name.lower() == "content-length":
            lines.append(f"{name}{rng.choice(SEPARATORS)}{rng.choice([str(len(body)), str(len(body)), 'x1', '-1'])}")
        else:
            lines.append(f"{name}{rng.choice(SEPARATORS)}{rng.choice(VALUES)}")
    if body and not any(line.lower().startswith("content-length") for line in lines[1:]):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), body


def _general_request(head: bytes, body: bytes, host: str) -> tuple[bytes, bool] | None:
    """What the general path sends upstream for this head (and whether it keeps the connection); None where it
    answers the request itself (a bad head, Expect, a chunked body) or would read another length."""
    rfile = io.BufferedReader(io.BytesIO(head[head.index(b"\r\n") + 2 :] + body))  # type: ignore[arg-type]
    first = head[: head.index(b"\r\n") + 2]
    parsed = read_message_head(rfile, first)
    assert parsed is not None
    line, headers = parsed
    method, target, version = line.split()
    if headers.get("expect") is not None or headers.get("transfer-encoding") is not None:
        return None
    value = (headers.get("content-length") or "").strip()
    if value != str(len(body)) if body else value not in ("", "0"):
        return None
    length = len(body) if body else (0 if method in ("POST", "PUT", "PATCH") else None)
    sent = request_head(method, target, host, headers.lines(HOP_HEADERS), length) + body
    return sent, not _wants_close(version, headers.get("connection"))


def test_a_plain_request_is_forwarded_as_the_general_path_forwards_it_on_3000_generated_heads() -> None:
    rng = random.Random(38)
    taken = 0
    for _ in range(3000):
        head, body = _head(rng)
        plain = plain_request(head + body, LIMIT)
        if plain is None:
            continue
        taken += 1
        method, target, fields, length, head_len = plain
        assert head_len == len(head) and length == len(body), head
        general = _general_request(head, body, "127.0.0.1:8080")
        assert general is not None, head  # the general path would have answered it itself
        sent, kept_alive = general
        assert upstream_head(method, target, b"127.0.0.1:8080", fields, length) + body == sent, head
        assert kept_alive, head
    assert 300 < taken < 2700, taken  # both kinds were drawn often: the comparison is not vacuous


ANSWER_FIELDS = [
    "Content-Type: application/json",
    "Content-Type: text/event-stream",
    "content-type: text/event-stream; charset=utf-8",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: gzip, chunked",
    "Connection: keep-alive",
    "Connection: close",
    "Keep-Alive: timeout=5, max=100",
    "Server: llama.cpp",
    "server: uvicorn",
    "Date: Sat, 05 Dec 2026 21:37:46 GMT",
    "date: Sat, 05 Dec 2026 21:37:46 GMT",
    "Access-Control-Allow-Origin: *",
    "Content-Encoding: gzip",
    "X-Odd:  spaced ",
    "Trailer: x",
]


def _answer(rng: random.Random) -> bytes:
    status = rng.choice([200, 200, 200, 201, 204, 304, 100, 404, 500, 503])
    version = rng.choice(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"])
    lines = [f"{version} {status} Whatever"]
    lines += rng.sample(ANSWER_FIELDS, rng.randint(0, 3))
    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        lines.append(f"{_case(rng, 'Content-Length')}: {rng.choice(['17', '17', 'x'])}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def test_a_plain_answer_is_relayed_as_the_general_path_relays_it_on_3000_generated_heads() -> None:
    rng = random.Random(39)
    taken = 0
    for _ in range(3000):
        head = _answer(rng)
        plain = plain_answer(head + b"body")
        if plain is None:
            continue
        taken += 1
        status, fields, length, sse, head_len = plain
        rfile = io.BufferedReader(io.BytesIO(head[head.index(b"\r\n") + 2 :]))  # type: ignore[arg-type]
        parsed = read_message_head(rfile, head[: head.index(b"\r\n") + 2], unfold=True)
        assert parsed is not None
        line, headers = parsed
        assert head_len == len(head) and status == int(line.split()[1]), head
        assert fields == headers.lines(ANSWER_DROP).encode("latin-1"), head
        chunked = "chunked" in (headers.get("transfer-encoding") or "").lower()
        assert (length is None) == chunked and (chunked or str(length) == headers.get("content-length")), head
        assert not _wants_close("HTTP/1.1", headers.get("connection")), head
        event_stream = (headers.get("content-type") or "").startswith("text/event-stream")
        assert sse == (chunked and event_stream), head  # what ends a chunked answer at [DONE]
    assert 300 < taken < 2700, taken


BODY = b'{"messages": []}'
NOT_PLAIN_REQUESTS = {
    "Expect (100 Continue is the general path's)": b"Expect: 100-continue\r\n",
    "a chunked body (411)": b"Transfer-Encoding: chunked\r\n",
    "Connection: close": b"Connection: close\r\n",
    "Connection: keep-alive, Upgrade": b"Connection: keep-alive, Upgrade\r\n",
    "Upgrade": b"Upgrade: websocket\r\n",
    "a second Content-Length": b"Content-Length: 16\r\n",
    "a field without a space after its colon": b"X-A:b\r\n",
    "a value with a trailing space": b"X-A: b \r\n",
    "a folded line": b"X-A: b\r\n c\r\n",
    "a bare LF": b"X-A: b\n",
    "a name with a space": b"X A: b\r\n",
    "101 fields": b"X-A: b\r\n" * 101,
}


@pytest.mark.parametrize("why", list(NOT_PLAIN_REQUESTS))
def test_a_request_the_general_path_must_see_is_not_plain(why: str) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + NOT_PLAIN_REQUESTS[why]
    assert plain_request(head + b"Content-Length: 16\r\n\r\n" + BODY, LIMIT) is None, why
    assert plain_request(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 16\r\n\r\n" + BODY, LIMIT)


@pytest.mark.parametrize(
    "request_line",
    [b"HEAD / HTTP/1.1", b"post / HTTP/1.1", b"POST / HTTP/1.0", b"POST http://h/ HTTP/1.1", b"POST //a HTTP/1.1"],
)
def test_other_methods_versions_and_targets_are_not_plain(request_line: bytes) -> None:
    assert plain_request(request_line + b"\r\nContent-Length: 0\r\n\r\n", LIMIT) is None


@pytest.mark.parametrize("length", [b"-1", b"+16", b"1e3", b"0x10", b"", b"\xb2"])
def test_a_length_the_general_path_refuses_or_reads_otherwise_is_not_plain(length: bytes) -> None:
    assert plain_request(b"POST / HTTP/1.1\r\nContent-Length: " + length + b"\r\n\r\n" + BODY, LIMIT) is None


def test_a_head_not_whole_in_the_buffer_or_a_body_above_the_limit_is_not_plain() -> None:
    whole = b"POST / HTTP/1.1\r\nContent-Length: 16\r\n\r\n"
    assert plain_request(whole[:-2], LIMIT) is None
    assert plain_request(whole, 15) is None
    assert plain_request(whole, 16) == (b"POST", b"/", b"", 16, len(whole))


NOT_PLAIN_ANSWERS = {
    "100 Continue": b"HTTP/1.1 100 Continue\r\n\r\n",
    "204": b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
    "304": b"HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.0": b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\n",
    "ended by a close": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",
    "a length and chunks": b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n",
    "gzip, chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    "Connection: close": b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\n",
    "two lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\n",
    "a folded line": b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-A: b\r\n c\r\n\r\n",
    "a status out of range": b"HTTP/1.1 600 Odd\r\nContent-Length: 4\r\n\r\n",
}


@pytest.mark.parametrize("why", list(NOT_PLAIN_ANSWERS))
def test_an_answer_the_general_path_must_read_is_not_plain(why: str) -> None:
    assert plain_answer(NOT_PLAIN_ANSWERS[why] + b"body") is None, why


# ------------------------------------------------------------------ through a real front


LONG_LENGTH = 3 * READ_BUFFER + 7
JSON_ANSWER = b'{"choices": [{"message": {"content": "hi"}}]}'
SSE = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'
ANSWERS = {
    "length": b"HTTP/1.1 200 OK\r\nServer: e\r\nKeep-Alive: timeout=5\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(JSON_ANSWER), JSON_ANSWER),
    "stream": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n" % (len(SSE), SSE)
    + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
    # an event stream with a length (not chunked), and a body longer than the read buffer: read in pieces
    "stream with a length": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
    % (len(SSE) + 14, SSE + b"data: [DONE]\n\n"),
    "long": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
    % (LONG_LENGTH, b'"' + b"x" * (LONG_LENGTH - 2) + b'"'),
}


@pytest.fixture(params=list(ANSWERS))
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Front, ScriptedUpstreamTestDouble]]:
    double = ScriptedUpstreamTestDouble([ANSWERS[request.param]] * 4)
    with start_front(double.url, RegionCache(Tokenizer.from_file(str(data_path("tiny-tokenizer.json"))))) as front:
        yield front, double
    double.close()


def test_the_engine_and_the_client_get_the_same_bytes_from_the_plain_and_the_general_path(
    served: tuple[Front, ScriptedUpstreamTestDouble],
) -> None:
    """The same chat sent plain (kept alive) and general (``Connection: close`` sends it down the general path): the
    engine is sent the same bytes, the client gets the same answer; the plain one reuses the engine's connection."""
    front, double = served
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: me\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\n"
    plain = head + b"Connection: keep-alive\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    general = head + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    assert plain_request(plain, LIMIT) is not None and plain_request(general, LIMIT) is None
    answers = exchange(front.url, [plain, plain]) + exchange(front.url, [general])
    assert answers[0] == answers[1] == answers[2], answers
    assert b"HTTP/1.1 200 OK\r\n" in answers[0] and b"Keep-Alive" not in answers[0]
    assert double.received[0] == double.received[1] == double.received[2], double.received
    sent = double.received[0]
    assert sent.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:") and sent.endswith(body)
    assert b"Connection" not in sent and b"Authorization: Bearer k\r\n" in sent
    assert double.connections == 1  # the plain requests' connection went back to the pool and carried the third


def test_a_count_is_answered_here_on_both_paths_and_never_reaches_the_engine(
    served: tuple[Front, ScriptedUpstreamTestDouble],
) -> None:
    """``/count`` and ``/tokenize`` sent plain and general get the same answer from the front's tokenizer; a bad body
    the same 400; the engine is sent nothing."""
    front, double = served
    bodies = [b'{"content": "The quick brown fox"}', b'{"content": 7}']
    for path in (b"/count", b"/tokenize"):
        for body in bodies:
            head = b"POST %s HTTP/1.1\r\nHost: me\r\nContent-Type: application/json\r\n" % path
            plain = head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            general = head + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            got = exchange(front.url, [plain]) + exchange(front.url, [general])
            assert got[0].split(b"\r\n\r\n")[1] == got[1].split(b"\r\n\r\n")[1], got
            assert got[0].startswith(b"HTTP/1.1 200" if body == bodies[0] else b"HTTP/1.1 400"), got
    assert double.received == [] and front.server.local_answers == 4


def test_frank_record_sends_the_same_bytes_and_records_the_same_turn_from_a_plain_and_a_general_request(
    tmp_path: Path,
) -> None:
    """``frank record``'s plain path: the same chat with its session in a field of odd case, sent plain and general,
    reaches the engine as the same bytes (less Accept-Encoding asked as identity by both) and is recorded as the same
    turn, in the session the field names."""
    answer = json.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    ).encode()
    canned = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(answer),
        answer,
    )
    double = ScriptedUpstreamTestDouble([canned] * 2)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: me\r\nx-FRANK-session: agent-7\r\nContent-Type: application/json\r\n"
    plain = head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    general = head + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with serve_recorder(double.url, out=tmp_path / "t.jsonl") as rec:
        got = exchange(rec.url, [plain]) + exchange(rec.url, [general])
    double.close()
    assert got[0] == got[1] and got[0].endswith(answer)
    assert double.received[0] == double.received[1] and b"Accept-Encoding: identity\r\n" in double.received[0]
    turns = load_trace(tmp_path / "t.jsonl").turns
    assert [t.session_id for t in turns] == ["agent-7", "agent-7"] and turns[0].request == turns[1].request


CHAT_STREAM = [
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
]
STREAMS = {
    "chunked": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in CHAT_STREAM)
    + b"0\r\n\r\n",
    # what an engine that buffers its stream could send: the events with a length (not chunked)
    "with a length": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
    % (len(b"".join(CHAT_STREAM)), b"".join(CHAT_STREAM)),
}


@pytest.mark.parametrize("framing", list(STREAMS))
def test_frank_record_relays_and_records_a_stream_alike_from_a_plain_and_a_general_request(
    framing: str, tmp_path: Path
) -> None:
    """A streamed chat through ``frank record``, plain and general: the client reads the same whole answer, the turn
    is recorded twice alike with the output the client got, and nothing is said as an error. Stop 38's plain path
    failed the stream with a length ("upstream died mid-stream": a plain answer had no ``iter_raw``)."""
    double = ScriptedUpstreamTestDouble([STREAMS[framing]] * 2)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: me\r\nContent-Type: application/json\r\n"
    plain = head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    general = head + b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with serve_recorder(double.url, out=tmp_path / "t.jsonl") as rec:
        got = exchange(rec.url, [plain]) + exchange(rec.url, [general])
        errors = list(rec.errors)
    double.close()
    assert errors == [] and got[0] == got[1], (errors, got)
    assert got[0].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), got[0]
    turns = load_trace(tmp_path / "t.jsonl").turns
    assert [t.output.text for t in turns] == ["hi", "hi"] and turns[0].output == turns[1].output


@pytest.mark.parametrize("answer", ["stream", "long"])
def test_a_plain_answer_read_whole_is_the_body_the_general_path_reads(answer: str) -> None:
    """``PlainPooledAnswer.read``: a chunked answer's data without its framing, a long one whole, as ``PooledAnswer``
    reads them; the connection goes back to the pool and carries the next request (read to the end)."""
    double = ScriptedUpstreamTestDouble([ANSWERS[answer]] * 2)
    pool = UpstreamPool(double.url, 10.0)
    head = upstream_head(b"GET", b"/x", pool.host_field, b"", 0)
    try:
        plain = open_plain(pool, "GET", head, b"", threading.BoundedSemaphore(1))
        assert isinstance(plain, PlainPooledAnswer)
        got = plain.read()
        plain.close()
        general = pool.open("GET", "/x", None, "", threading.BoundedSemaphore(1))
        assert not isinstance(general, PlainPooledAnswer)
        want = general.read()
        general.close()
    finally:
        pool.close()
        double.close()
    assert got == want and len(got) > 20, (got[:80], want[:80])
    assert double.connections == 1


def test_an_answer_the_general_path_cannot_read_is_a_502_counted_once(tmp_path: Path) -> None:
    """A plain request whose answer head is broken (a line with no colon: not plain, and the general path refuses
    it): the client gets a 502 naming the upstream, and the front counts one passed request (stop 38's plain path
    counted it twice: once for the failure, once after)."""
    double = ScriptedUpstreamTestDouble([b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\nhi"])
    tokenizer = Tokenizer.from_file(str(data_path("tiny-tokenizer.json")))
    with start_front(double.url, RegionCache(tokenizer)) as front:
        count = b'{"content": "hi"}'
        then = b"POST /count HTTP/1.1\r\nHost: me\r\nContent-Length: %d\r\n\r\n%s" % (len(count), count)
        # the count on the same connection is answered once the first request's handling ended (its tally made)
        got = exchange(front.url, [b"GET /v1/models HTTP/1.1\r\nHost: me\r\n\r\n", then])
        passed = front.server.passed_through
    double.close()
    assert got[0].startswith(b"HTTP/1.1 502") and double.url.encode() in got[0], got
    assert passed == 1
