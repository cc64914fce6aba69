"""A stream's pieces as the recording proxy reads them: the pieces that are whole ``data: {...}`` events go
straight to json's scanner, every other piece through the SSE parser; on random streams, cut at random, the
trace holds exactly what the parser alone makes of the whole stream, and the client gets the engine's bytes.

Real ``serve_recorder`` over real HTTP on 127.0.0.1; the engine is a test double that writes the pieces it is
given, one chunk and one flush each (``TCP_NODELAY``: most reach the proxy one by one)."""

from __future__ import annotations

import json
import random
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from frankenstein.engines.response import StreamAssembler
from frankenstein.workload.record import HOLD_BYTES, RecordedTurn, _Relayed, serve_recorder
from frankenstein.workload.wire import ChunkFraming
from frankenstein.workload.trace import Turn, load_trace
from tls_relay import llama_server


class PiecesTestDouble(BaseHTTPRequestHandler):
    """TEST DOUBLE of an engine: answers every POST with ``server.pieces`` (the test sets them before each
    request) as an event stream, one chunk per piece, each flushed on its own (``server.gap`` seconds apart),
    and its final chunk once ``server.release`` is set (``server.together``: in one write with the last piece)."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for i, piece in enumerate(self.server.pieces):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            if self.server.together and i == len(self.server.pieces) - 1:
                break  # the last piece and the final chunk in one write, as a proxy reading late finds them
            self.wfile.flush()
            if self.server.gap:
                threading.Event().wait(self.server.gap)  # the engine's time per token
        assert self.server.release.wait(10)  # the final chunk: once the test lets it go
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@pytest.fixture
def engine() -> Iterator[Any]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), PiecesTestDouble)
    srv.daemon_threads = True
    srv.release = threading.Event()
    srv.gap = 0.0
    srv.together = False
    srv.release.set()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


TEXTS = ["Hello", " wor", "ld", "!", ' "quoted"', " back\\slash", " line\nbreak", " é", " 😀", " \u2028", ""]


def _events(rng: random.Random) -> list[bytes]:
    """One chat stream's events (their ``data:`` payloads), llama-server's shapes and others an engine may send."""
    out: list[Any] = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}]
    for _ in range(rng.randint(0, 8)):
        delta: dict[str, Any] = {"content": rng.choice(TEXTS)}
        if rng.random() < 0.15:
            delta = {"reasoning_content": rng.choice(TEXTS)}
        if rng.random() < 0.1:
            fn = {"name": "read", "arguments": rng.choice(['{"a":', "1}", ""])}
            delta = {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": fn}]}
        out.append({"choices": [{"index": 0, "delta": delta, "finish_reason": None}], "id": "x"})
    timings = {"prompt_n": 3, "predicted_n": 2, "predicted_ms": rng.random() * 9}
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": rng.choice(["stop", "length"])}]}
    out.append(finish | {"usage": {"prompt_tokens": 3, "completion_tokens": 2}, "timings": timings})
    if rng.random() < 0.2:
        out.append({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5}})
    payloads = [json.dumps(e, ensure_ascii=rng.random() < 0.5).encode() for e in out]
    if rng.random() < 0.1:  # what only the parser reads: not an object, not JSON
        payloads.insert(rng.randint(1, len(payloads)), rng.choice([b"[1, 2]", b'{"choices": [', b"42"]))
    return payloads + [b"[DONE]"]


def _stream(rng: random.Random) -> bytes:
    """The events as an SSE body: mostly ``data: X`` and a blank line, at times CRLF line ends, a comment, an
    ``event:`` field or no space after ``data:``."""
    parts = []
    for payload in _events(rng):
        r = rng.random()
        if r < 0.05:
            parts.append(b": keep-alive\n\n")
        elif r < 0.1:
            parts.append(b"event: message\n")
        sep = b"\r\n\r\n" if rng.random() < 0.05 else b"\n\n"
        parts.append((b"data:" if rng.random() < 0.05 else b"data: ") + payload + sep)
    return b"".join(parts)


def _pieces(rng: random.Random, body: bytes) -> list[bytes]:
    """``body`` cut into the engine's writes: mostly one event to a write, at times two, at times cut anywhere."""
    cuts = {0, len(body)}
    ends = [i + 2 for i in range(len(body) - 1) if body[i : i + 2] == b"\n\n"]
    cuts.update(e for e in ends if rng.random() < 0.8)
    cuts.update(rng.randrange(1, len(body)) for _ in range(rng.choice([0, 0, 0, 1, 3])))
    at = sorted(cuts)
    return [body[a:b] for a, b in zip(at, at[1:], strict=False)]


def test_random_streams_are_recorded_as_the_sse_parser_reads_them(engine: Any, tmp_path: Path) -> None:
    rng = random.Random(33)
    out = tmp_path / "t.jsonl"
    expected = []
    told: list[RecordedTurn] = []
    with (
        serve_recorder(engine.url, "127.0.0.1", 0, out, on_turn=told.append) as proxy,
        httpx.Client(timeout=30) as client,
    ):
        for i in range(150):
            body = _stream(rng)
            engine.pieces = _pieces(rng, body)
            reference = StreamAssembler("/v1/chat/completions")
            reference.feed(body)
            request = {"messages": [{"role": "user", "content": f"stream {i}"}], "stream": True}
            with client.stream("POST", proxy.url + "/v1/chat/completions", json=request) as r:
                try:
                    relayed = r.read()
                except httpx.HTTPError:  # a stream that does not finish: the client's read fails
                    relayed = None
            if reference.finished:
                assert relayed == body, i
                expected.append((f"stream {i}", reference.output(), reference.timings))
            else:
                assert relayed is None, i
        errors = list(proxy.errors)
    turns = load_trace(out).turns
    assert [(t.request["messages"][0]["content"], t.output, t.timings.server) for t in turns] == expected
    assert len(turns) == len(expected) > 100
    # what frank record's console line says of each turn, read without a model built: the trace's
    assert [(t.turn_id, t.completion_tokens) for t in told] == [(t.turn_id, t.output.completion_tokens) for t in turns]
    assert len(errors) == 150 - len(expected)


CHOICE = b'data: {"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}\n\n'
HAND_CUT = [
    # a field's line cut just before bytes that look like a whole event: they are the rest of that line
    [b"event: x ", CHOICE % (b"ghost", b"null"), CHOICE % (b"ok", b'"stop"'), b"data: [DONE]\n\n"],
    # an event with more after its JSON: malformed (the stream does not finish)
    [(CHOICE % (b"ok", b'"stop"'))[:-2] + b" more\n\n", b"data: [DONE]\n\n"],
    # an event cut anywhere, then whole ones
    [CHOICE[:9], CHOICE[9:] % (b"a", b"null"), CHOICE % (b"b", b'"stop"') + b"data: [DONE]\n\n"],
    # a line break inside the JSON (whitespace to JSON, the end of a line to SSE): malformed
    [CHOICE.replace(b'"choices":', b'"choices":\n') % (b"a", b'"stop"'), b"data: [DONE]\n\n"],
    # CR before the line ends, [DONE] glued to the last event
    [(CHOICE % (b"a", b'"stop"'))[:-2] + b"\r\n\n" + b"data: [DONE]\n\n"],
]


@pytest.mark.parametrize("pieces", HAND_CUT)
def test_pieces_cut_by_hand_are_recorded_as_the_sse_parser_reads_them(
    engine: Any, pieces: list[bytes], tmp_path: Path
) -> None:
    out = tmp_path / "t.jsonl"
    engine.pieces, engine.gap = pieces, 0.005  # each piece read on its own
    reference = StreamAssembler("/v1/chat/completions")
    reference.feed(b"".join(pieces))
    request = {"messages": [{"role": "user", "content": "cut"}], "stream": True}
    with serve_recorder(engine.url, "127.0.0.1", 0, out) as proxy, httpx.Client(timeout=30) as client:
        with client.stream("POST", proxy.url + "/v1/chat/completions", json=request) as r:
            try:
                relayed = r.read()
            except httpx.HTTPError:
                relayed = None
        errors = list(proxy.errors)
    if reference.finished:
        assert relayed == b"".join(pieces) and errors == []
        assert [t.output for t in load_trace(out).turns] == [reference.output()]
    else:
        assert relayed is None and len(errors) == 1
        assert not out.exists() or load_trace(out).turns == []


def _turns_within(path: Path, seconds: float) -> list[Turn]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            return load_trace(path).turns
        threading.Event().wait(0.001)
    return []


FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "timings": {"predicted_n": 1}}
LAST_EVENTS = {
    "/v1/chat/completions": [
        b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
        b"data: " + json.dumps(FINISH).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ],
    "/completion": [  # llama.cpp's: its last event is the stop chunk, no [DONE]
        b'data: {"content":"Hi","stop":false}\n\n',
        b'data: {"content":"","stop":true,"stop_type":"eos","timings":{"predicted_n":1}}\n\n',
    ],
}


@pytest.mark.parametrize("path", list(LAST_EVENTS))
def test_a_streams_turn_is_in_the_trace_at_its_last_event_before_the_engine_ends_its_answer(
    engine: Any, path: str, tmp_path: Path
) -> None:
    """The engine sends its last event (``data: [DONE]``; llama.cpp's ``stop`` chunk) in a write of its own, then
    holds its final chunk: the turn is in the trace while it holds (written at the last event), and the answer's
    end follows."""
    out = tmp_path / "t.jsonl"
    engine.pieces = LAST_EVENTS[path]
    engine.release.clear()
    engine.gap = 0.005  # each piece read on its own
    request = {"messages": [{"role": "user", "content": "hold"}], "stream": True}
    if path == "/completion":
        request = {"prompt": "hold", "stream": True}
    with serve_recorder(engine.url, "127.0.0.1", 0, out) as proxy, httpx.Client(timeout=30) as client:
        with client.stream("POST", proxy.url + path, json=request) as r:
            lines = r.iter_lines()
            assert [next(lines) for _ in range(2 * len(engine.pieces) - 1)][-1] == engine.pieces[-1][:-2].decode()
            written = _turns_within(out, 10.0)  # the engine still holds its final chunk meanwhile
            engine.release.set()
            assert list(lines) == [""]
    (turn,) = written
    assert load_trace(out).turns == written
    assert (turn.output.text, turn.output.finish_reason, turn.timings.server) == ("Hi", "stop", {"predicted_n": 1})


UNFINISHED = [b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n', b"data: [DONE]\n\n"]  # no finish
UNREADABLE = [b'data: {"choices":"Hi"}\n\n', b"data: [DONE]\n\n"]  # a shape our decoder refuses


@pytest.mark.parametrize(
    ("pieces", "said"), [(UNFINISHED, "ended without finishing"), (UNREADABLE, "not one a trace holds")]
)
def test_after_the_answer_a_stream_ends_at_done_whatever_our_decoder_makes_of_it(
    engine: Any, pieces: list[bytes], said: str, tmp_path: Path
) -> None:
    """``--turn-after-answer``: the answer waits for nothing of ours. The client gets the engine's events and the
    answer's end at ``data: [DONE]`` while the engine still holds its own final chunk, even when no turn can be made
    of them (no finish; events our decoder refuses): that is said, and nothing is written. (Before, the end waited
    for our decoder: the unfinished stream got an error event and no end, the unreadable one its end only after the
    engine's.)"""
    out = tmp_path / "t.jsonl"
    engine.pieces = pieces
    engine.release.clear()
    engine.gap = 0.005  # each piece read on its own
    request = {"messages": [{"role": "user", "content": "hold"}], "stream": True}
    with serve_recorder(engine.url, "127.0.0.1", 0, out, after_answer=True) as proxy:
        with (
            httpx.Client(timeout=5) as client,
            client.stream("POST", proxy.url + "/v1/chat/completions", json=request) as r,
        ):
            body = b"".join(r.iter_bytes())  # whole while the engine holds its end: a read that needs it times out
        engine.release.set()  # the engine's end is read after the answer's; the turn's fate is said then
        deadline = time.monotonic() + 10
        while not proxy.errors and time.monotonic() < deadline:
            threading.Event().wait(0.001)
        errors = list(proxy.errors)
    assert body == b"".join(pieces)
    assert len(errors) == 1 and "turn not recorded" in errors[0] and said in errors[0], errors
    assert not out.exists() or not out.read_bytes()


def _reads_of_a_stream(url: str, request: dict[str, Any]) -> list[bytes]:
    """One streamed request on a raw socket: each ``recv`` as it came, to the answer's final chunk."""
    body = json.dumps(request).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        reads = [sock.recv(1 << 16)]
        while reads[-1] and not b"".join(reads).endswith(b"\r\n0\r\n\r\n"):
            reads.append(sock.recv(1 << 16))
    return reads


def _done_read(reads: list[bytes]) -> bytes:
    """The read that brought ``data: [DONE]``."""
    (read,) = [r for r in reads if b"data: [DONE]" in r]
    return read


def test_after_the_answer_done_and_the_end_leave_in_one_send_when_the_engine_wrote_them_in_one(
    engine: Any, tmp_path: Path
) -> None:
    """``--turn-after-answer``, and the engine's [DONE] and final chunk read in one piece (llama-server's two writes,
    read late): the client gets the answer's end in the same read as [DONE]. Before, the framing did not see the end
    at [DONE] in such a piece, and the end left only after our decoder had read the held events (~0.1-0.3 ms later,
    a second wake-up of the client). The turn is written after."""
    out = tmp_path / "t.jsonl"
    engine.pieces = [CHOICE % (b"x" * 60, b"null")] * 40 + [CHOICE % (b"", b'"stop"'), b"data: [DONE]\n\n"]
    engine.together = True
    request = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    with serve_recorder(engine.url, "127.0.0.1", 0, out, after_answer=True) as proxy:
        reads = [_reads_of_a_stream(proxy.url, request) for _ in range(20)]
        deadline = time.monotonic() + 10
        while proxy.recorder.recorded < 20 and time.monotonic() < deadline:
            threading.Event().wait(0.001)
        errors = list(proxy.errors)
    assert [_done_read(r).endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") for r in reads] == [True] * 20, reads
    turns = load_trace(out).turns
    assert errors == [] and [t.output.text for t in turns] == ["x" * 2400] * 20


@pytest.mark.engine
@pytest.mark.parametrize("after", [False, True])
def test_against_llama_server_the_end_leaves_with_done_in_one_read_after_the_answer_or_after_the_turn(
    llama_server_bin: str, after: bool, tmp_path: Path
) -> None:
    """The real llama-server, 20 streams: every answer's end reaches the client in the read that brings [DONE],
    however the engine's last writes were read: with ``--turn-after-answer`` before the turn is made, without it
    once the turn is in the trace ([DONE] held until then); every turn is in the trace."""
    out = tmp_path / "t.jsonl"
    request = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "stream": True}
    with llama_server(llama_server_bin, tmp_path / "llama.log") as url:
        with serve_recorder(url, "127.0.0.1", 0, out, after_answer=after) as proxy:
            reads = [_reads_of_a_stream(proxy.url, request) for _ in range(20)]
            deadline = time.monotonic() + 10
            while proxy.recorder.recorded < 20 and time.monotonic() < deadline:
                threading.Event().wait(0.001)
            errors = list(proxy.errors)
    ends = [_done_read(r).endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") for r in reads]
    assert ends == [True] * 20, reads
    assert errors == [] and len(load_trace(out).turns) == 20


def test_ttft_is_when_the_first_output_came_though_pieces_are_read_later(engine: Any, tmp_path: Path) -> None:
    """The engine takes 40 ms per piece: the trace's TTFT is when the first piece with text came (after the role
    piece: ~40 ms), not when the held pieces were read (at [DONE], ~160 ms), and e2e is the stream's end."""
    out = tmp_path / "t.jsonl"
    engine.pieces = [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}\n\n',
        CHOICE % (b"Hi", b"null"),
        CHOICE % (b" there", b"null"),
        CHOICE % (b"", b'"stop"'),
        b"data: [DONE]\n\n",
    ]
    engine.gap = 0.04
    request = {"messages": [{"role": "user", "content": "pace"}], "stream": True}
    with serve_recorder(engine.url, "127.0.0.1", 0, out) as proxy:
        httpx.post(proxy.url + "/v1/chat/completions", json=request, timeout=30).raise_for_status()
    (turn,) = load_trace(out).turns
    assert turn.output.text == "Hi there"
    assert turn.timings.ttft_ms is not None and turn.timings.e2e_ms is not None
    assert 40 <= turn.timings.ttft_ms < turn.timings.e2e_ms - 80, turn.timings


def test_a_long_streams_pieces_are_read_once_a_few_kib_are_held() -> None:
    """A stream of 2,000 events, never ending: at most ``HOLD_BYTES`` of them are held unread at any time (the
    memory a stream costs stays bounded), and the first output's time is the piece's, not the reading's."""
    t0 = time.perf_counter()
    framing = ChunkFraming(decode=True)
    relayed = _Relayed("/v1/chat/completions", lambda data: None, framing, t0, lambda r: None)
    piece = CHOICE % (b"word", b"null")
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    before = time.perf_counter()
    relayed.framed(framing.feed(chunk))
    after = time.perf_counter()
    assert relayed.ttft is None and relayed.asm.fields()["text"] == ""  # held, not read yet
    most = 0
    for sent in range(2, 2002):
        relayed.framed(framing.feed(chunk))
        unread = sent - len(relayed.asm.fields()["text"]) // 4
        most = max(most, unread * len(piece))
    assert HOLD_BYTES - len(piece) < most <= HOLD_BYTES
    assert relayed.ttft is not None
    assert (before - t0) * 1e3 - 0.001 <= relayed.ttft <= (after - t0) * 1e3 + 0.001
    relayed.read_held()
    assert relayed.asm.fields()["text"] == "word" * 2001


@pytest.mark.engine
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_after_the_answer_a_turns_e2e_is_when_its_answer_ended_not_when_the_turn_was_made(
    llama_server_bin: str, stream: bool, tmp_path: Path
) -> None:
    """``--turn-after-answer`` makes each turn up to ``TURN_WAIT_MS`` after its answer's end (the client reads first:
    here it sends nothing for 5 ms, so each wait runs whole); the turn's ``e2e_ms`` is still the time to the answer's
    end: never more than the client measured on its raw socket, from before its request was sent to after the end
    came (the real llama-server, 12 turns)."""
    out = tmp_path / "t.jsonl"
    body = json.dumps({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "stream": stream})
    client_ms: dict[str, float] = {}
    with llama_server(llama_server_bin, tmp_path / "llama.log") as url:
        with serve_recorder(url, "127.0.0.1", 0, out, after_answer=True) as proxy:
            with socket.create_connection(("127.0.0.1", int(proxy.url.rsplit(":", 1)[1])), timeout=30) as sock:
                for i in range(12):
                    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nX-Frank-Session: s%d\r\n" % i
                    t = time.perf_counter()
                    sock.sendall(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body.encode()))
                    got = sock.recv(1 << 16)
                    while not _whole(got):
                        got += sock.recv(1 << 16)
                    client_ms[f"s{i}"] = (time.perf_counter() - t) * 1e3
                    assert got.startswith(b"HTTP/1.1 200 "), got
                    threading.Event().wait(0.005)  # an agent's tool call: the client sends nothing meanwhile
            deadline = time.monotonic() + 10
            while proxy.recorder.recorded < 12 and time.monotonic() < deadline:
                threading.Event().wait(0.001)
            errors = list(proxy.errors)
    turns = load_trace(out).turns
    assert errors == [] and len(turns) == 12
    over = [(t.session_id, t.timings.e2e_ms, client_ms[t.session_id]) for t in turns]
    assert all(0 < e2e <= client for _, e2e, client in over), over


def _whole(answer: bytes) -> bool:
    """Whether ``answer`` (a head and a body by length or chunked) is all there."""
    head, _, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length: *(\d+)", head)
    return len(body) >= int(length.group(1)) if length else body.endswith(b"0\r\n\r\n")
