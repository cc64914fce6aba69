"""An answer's head through both proxies (``frank serve``'s front and ``frank record``): one ``Date`` (the proxy's)
and the engine's ``Server``, never two of either (an engine such as vLLM's uvicorn sends both fields; llama-server
sends ``Server`` only; before, the proxies added theirs beside the engine's).

An answer without a body through both proxies (``frank serve``'s front and ``frank record``): to a ``HEAD`` the
client gets the engine's head with the length a ``GET`` would have had (before, both proxies said
``Content-Length: 0``), a 204 no length at all (it must not carry one), a 304 the engine's length; never a body, so
the next request on the same connection reads its own answer.

The real llama-server answers ``HEAD`` (its HTTP library runs the ``GET`` handler and drops the body) in the tests
marked ``engine``; the 204, the 304 and a malformed length come from an upstream test double (llama-server sends
none of them)."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from frankenstein.regioncache import RegionCache
from frankenstein.regioncache.proxy import start_front
from frankenstein.shipped import data_path
from frankenstein.workload.record import serve_recorder
from helpers_upstream import ScriptedUpstreamTestDouble, exchange
from tls_relay import llama_server

GET = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
HEALTH = b'{"status":"ok"}'


@contextmanager
def _serve(upstream: str, tmp_path: Path) -> Iterator[str]:
    with start_front(upstream, RegionCache(Tokenizer.from_file(str(data_path("tiny-tokenizer.json"))))) as front:
        yield front.url


@contextmanager
def _record(upstream: str, tmp_path: Path) -> Iterator[str]:
    with serve_recorder(upstream, out=tmp_path / "t.jsonl") as rec:
        yield rec.url


PROXIES: dict[str, Callable[[str, Path], AbstractContextManager[str]]] = {"serve": _serve, "record": _record}


def _length(head: bytes) -> list[bytes]:
    return re.findall(rb"(?im)^content-length: *([^\r\n]*)\r\n", head)


@pytest.fixture(scope="module")
def llama(llama_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(llama_server_bin, tmp_path_factory.mktemp("engine") / "llama.log") as url:
        yield url


@pytest.mark.engine
@pytest.mark.parametrize("proxy", list(PROXIES))
@pytest.mark.parametrize("path", [b"/health", b"/v1/models", b"/no-such-route"])
def test_a_head_gets_the_engines_length_and_no_body_from_the_real_llama_server(
    llama: str, proxy: str, path: bytes, tmp_path: Path
) -> None:
    """``HEAD`` then ``GET /health`` on one client connection, through the proxy and straight to llama-server: the
    same status and ``Content-Length`` (the body's length, not 0), no body, and the ``GET`` answered whole after it.
    llama-server closes after its 404, so that route's ``GET`` goes on a connection of its own."""
    head = b"HEAD %s HTTP/1.1\r\nHost: t\r\n\r\n" % path
    direct = exchange(llama, [head])[0]
    with PROXIES[proxy](llama, tmp_path) as url:
        got = exchange(url, [head, GET] if path != b"/no-such-route" else [head])
        if path == b"/no-such-route":
            got += exchange(url, [GET])
    assert got[0].split(b"\r\n", 1)[0] == direct.split(b"\r\n", 1)[0], (got[0], direct)
    assert _length(got[0]) == _length(direct) and _length(direct) != [b"0"], (got[0], direct)
    assert got[0].endswith(b"\r\n\r\n") and direct.endswith(b"\r\n\r\n")  # a head alone
    assert got[1].startswith(b"HTTP/1.1 200 ") and got[1].endswith(b"\r\n\r\n" + HEALTH), got[1]


@pytest.mark.parametrize("proxy", list(PROXIES))
@pytest.mark.parametrize(
    ("method", "answer", "length"),
    [
        (b"HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n", [b"15"]),
        (b"HEAD", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", []),  # a GET would stream: no length
        (b"HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n", []),  # a length that is no number: dropped
        (b"GET", b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", []),  # a 204 must carry no length
        (b"GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 42\r\n\r\n", [b"42"]),
        (b"HEAD", b"HTTP/1.1 204 No Content\r\n\r\n", []),
    ],
)
def test_an_answer_without_a_body_keeps_the_engines_length_and_the_connection_reads_on(
    proxy: str, method: bytes, answer: bytes, length: list[bytes], tmp_path: Path
) -> None:
    """Answers llama-server does not send (a test double sends them): each relayed as a head alone with the length the
    rules allow, and the ``GET`` after it on the same client connection gets its own answer, not leftover bytes."""
    double = ScriptedUpstreamTestDouble([answer, b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + HEALTH])
    with PROXIES[proxy](double.url, tmp_path) as url:
        first, second = exchange(url, [b"%s /health HTTP/1.1\r\nHost: t\r\n\r\n" % method, GET])
    double.close()
    assert first.split(b"\r\n", 1)[0] == answer.split(b"\r\n", 1)[0] and first.endswith(b"\r\n\r\n"), first
    assert _length(first) == length, first
    assert second.startswith(b"HTTP/1.1 200 OK\r\n") and second.endswith(b"Content-Length: 15\r\n\r\n" + HEALTH), second


def _raw_head(url: str, request: bytes) -> bytes:
    """The head of the answer to ``request``, as the proxy sent it (nothing dropped)."""
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(request)
        got = b""
        while b"\r\n\r\n" not in got:
            piece = sock.recv(65536)
            assert piece, got
            got += piece
    return got.split(b"\r\n\r\n", 1)[0] + b"\r\n"


def _fields(head: bytes, name: bytes) -> list[bytes]:
    return re.findall(rb"(?im)^" + name + rb": *([^\r\n]*)\r\n", head)


@pytest.mark.engine
@pytest.mark.parametrize("proxy", list(PROXIES))
@pytest.mark.parametrize("path", [b"/health", b"/v1/models"])
def test_a_relayed_answer_has_one_date_and_the_real_llama_servers_server(
    llama: str, proxy: str, path: bytes, tmp_path: Path
) -> None:
    request = b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path
    direct = _raw_head(llama, request)
    with PROXIES[proxy](llama, tmp_path) as url:
        head = _raw_head(url, request)
    assert _fields(direct, b"server") == [b"llama.cpp"] and _fields(head, b"server") == [b"llama.cpp"], head
    assert len(_fields(head, b"date")) == 1, head


@pytest.mark.parametrize("proxy", list(PROXIES))
@pytest.mark.parametrize(
    "framing",
    [b"Content-Length: 15\r\n", b"Connection: close\r\n"],  # the plain path; the general one (ended by a close)
    ids=["plain", "general"],
)
def test_an_engines_date_and_server_are_not_doubled(proxy: str, framing: bytes, tmp_path: Path) -> None:
    """An answer with uvicorn's lowercase ``date`` and ``server`` (a test double sends it as vLLM would): the client gets
    one ``Date`` and ``server: uvicorn`` once."""
    answer = (
        b"HTTP/1.1 200 OK\r\ndate: Mon, 01 Jan 2001 00:00:00 GMT\r\nserver: uvicorn\r\n" + framing + b"\r\n" + HEALTH
    )
    double = ScriptedUpstreamTestDouble([answer], close_after=b"close" in framing)
    with PROXIES[proxy](double.url, tmp_path) as url:
        head = _raw_head(url, GET)
    double.close()
    assert _fields(head, b"server") == [b"uvicorn"] and len(_fields(head, b"date")) == 1, head
    assert b"Mon, 01 Jan 2001" not in head  # the proxy's Date: the time it answered
