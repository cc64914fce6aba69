"""``frank record``'s requests that are not recorded (``/tokenize``, ``/health``, ``/v1/models``, ...) on the plain path
(``plainhead``: the head taken with one match, sent on as the bytes it came with, a plain answer taken as
``listener.PlainPooledAnswer``), as its generation requests are: the engine must get the bytes, and the client the
answer, that the general path gives. A request is sent down the general path by a ``Connection`` field other than
``keep-alive`` alone (``keep-alive, x``: still kept alive, and no field is forwarded for it).

What the engine was sent is seen through an upstream test double that keeps every byte (llama-server cannot show
it); the answers of the real llama-server are compared in the tests marked ``engine``. A ``HEAD`` (the general path)
gets its head alone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from frankenstein.workload.plainhead import plain_request
from frankenstein.workload.record import serve_recorder
from frankenstein.workload.trace import load_trace
from helpers_upstream import ScriptedUpstreamTestDouble, exchange
from tls_relay import llama_server

LIMIT = 1 << 20
REQUESTS = {  # what an agent sends beside its chats: (method, path, body)
    "POST /tokenize": (b"POST", b"/tokenize", b'{"content": "Hello world"}'),
    "GET /health": (b"GET", b"/health", b""),
    "GET /v1/models": (b"GET", b"/v1/models", b""),
    "POST /v1/models": (b"POST", b"/v1/models", b"{}"),
}
ANSWERS = {
    "length": b"HTTP/1.1 200 OK\r\nServer: e\r\nKeep-Alive: timeout=5\r\nContent-Type: application/json\r\n"
    b'Content-Length: 15\r\n\r\n{"status":"ok"}',
    "chunked": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'5\r\n{"sta\r\na\r\ntus":"ok"}\r\n0\r\n\r\n',
    "not plain (a close)": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n"
    b'Content-Length: 15\r\n\r\n{"status":"ok"}',
}


def both(method: bytes, path: bytes, body: bytes) -> tuple[bytes, bytes]:
    """The same request plain and general (its head not plain: ``Connection: keep-alive, x``)."""
    head = b"%s %s HTTP/1.1\r\nHost: me\r\nAuthorization: Bearer k\r\nX-Frank-Session: s1\r\n" % (method, path)
    length = b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body) if body else b""
    plain = head + length + b"\r\n" + body
    general = head + b"Connection: keep-alive, x\r\n" + length + b"\r\n" + body
    assert plain_request(plain, LIMIT) is not None and plain_request(general, LIMIT) is None
    return plain, general


@pytest.mark.parametrize("answer", list(ANSWERS))
@pytest.mark.parametrize("request_", list(REQUESTS))
def test_the_engine_gets_the_same_bytes_and_the_client_the_same_answer_on_both_paths(
    request_: str, answer: str, tmp_path: Path
) -> None:
    """Plain, then general, on one kept-alive client connection: the engine is sent the same bytes (the client's
    fields less the hop-by-hop ones, identity asked), the client gets the same answer, whole (a chunked one with its
    length), and nothing is recorded. A plain answer's connection carries the second request; one the engine closes
    does not."""
    double = ScriptedUpstreamTestDouble([ANSWERS[answer]] * 2)
    plain, general = both(*REQUESTS[request_])
    with serve_recorder(double.url, out=tmp_path / "t.jsonl") as rec:
        got = exchange(rec.url, [plain, general])
        errors = rec.errors
    double.close()
    assert got[0] == got[1], got
    assert got[0].startswith(b"HTTP/1.1 200 OK\r\n") and got[0].endswith(b'Content-Length: 15\r\n\r\n{"status":"ok"}')
    assert double.received[0] == double.received[1], double.received
    method, path, body = REQUESTS[request_]
    sent = double.received[0]
    assert sent.startswith(b"%s %s HTTP/1.1\r\nHost: 127.0.0.1:" % (method, path)) and sent.endswith(b"\r\n\r\n" + body)
    assert b"Authorization: Bearer k\r\n" in sent and b"Accept-Encoding: identity\r\n" in sent
    assert b"Connection" not in sent and b"Keep-Alive" not in got[0]
    assert double.connections == (2 if answer.startswith("not plain") else 1)
    assert errors == [] and not (tmp_path / "t.jsonl").exists()


CHAT = b'{"messages": [{"role": "user", "content": "hi"}]}'
CHAT_ANSWER = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}'


def _chunked(status: bytes, data: bytes) -> bytes:
    """An answer in two chunks, as an engine that does not know its length sends it."""
    head = b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" % status
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (data[:7], data[7:])) + b"0\r\n\r\n"


@pytest.mark.parametrize("status", [b"200 OK", b"500 Internal Server Error"])
def test_a_chats_chunked_json_answer_is_relayed_whole_on_the_plain_path(status: bytes, tmp_path: Path) -> None:
    """A plain chat whose answer is JSON in chunks (not an event stream): the client gets it whole with its length,
    not a 502; a 200 is recorded, an error is relayed and not recorded."""
    data = CHAT_ANSWER if status == b"200 OK" else b'{"error": {"message": "boom"}}'
    double = ScriptedUpstreamTestDouble([_chunked(status, data)])
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: me\r\nContent-Length: %d\r\n\r\n%s" % (len(CHAT), CHAT)
    assert plain_request(request, LIMIT) is not None
    with serve_recorder(double.url, out=tmp_path / "t.jsonl") as rec:
        (got,) = exchange(rec.url, [request])
        errors = rec.errors
    double.close()
    assert got.startswith(b"HTTP/1.1 " + status) and got.endswith(b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    if status == b"200 OK":
        assert [t.output.text for t in load_trace(tmp_path / "t.jsonl").turns] == ["hi"] and errors == []
    else:
        assert errors == ["upstream answered 500 on /v1/chat/completions"]


@pytest.fixture(scope="module")
def engine(llama_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(llama_server_bin, tmp_path_factory.mktemp("engine") / "llama.log") as url:
        yield url


def _same_second(answer: bytes) -> bytes:
    """An answer with ``/v1/models``' ``created`` time (seconds: it may change between two requests) left out."""
    return re.sub(rb'"created":\d+', b'"created":0', answer)


@pytest.mark.engine
@pytest.mark.parametrize("request_", list(REQUESTS))
def test_the_real_llama_servers_answers_are_the_same_on_both_paths_and_what_going_direct_gives(
    engine: str, request_: str, tmp_path: Path
) -> None:
    """The real engine's answers through frank record, plain and general, are the same and carry the body going
    direct gives (``POST /v1/models`` is llama-server's 404 with ``Connection: close``: an answer that is not plain)."""
    plain, general = both(*REQUESTS[request_])
    with serve_recorder(engine, out=tmp_path / "t.jsonl") as rec:
        got = [_same_second(a) for a in exchange(rec.url, [plain, general, plain])]
        errors = rec.errors
    direct = _same_second(exchange(engine, [plain])[0])
    assert got[0] == got[1] == got[2], got
    assert got[0].split(b"\r\n\r\n", 1)[1] == direct.split(b"\r\n\r\n", 1)[1]
    status = b"404" if request_ == "POST /v1/models" else b"200"
    assert got[0].startswith(b"HTTP/1.1 " + status) and direct.startswith(b"HTTP/1.1 " + status)
    assert errors == [] and not (tmp_path / "t.jsonl").exists()


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
