"""The proxies' lean HTTP/1.1 (workload/wire.py, listener.LeanHandler, UpstreamPool), attacked from both
sides over real loopback sockets: a client sending folded, colon-less, oversized, split, pipelined and
odd-case heads to the real ``frank serve`` front and ``frank record`` proxy; an upstream answering with
chunk extensions and trailers, folded headers, no length (ended by a close) and a broken chunk.

The misbehaving upstream is a test double (:class:`ScriptedUpstreamTestDouble`): llama-server cannot be
made to send those answers. Well-formed pass-through is proven against the real llama-server in
test_serve.py and test_record.py."""

from __future__ import annotations

import io
import json
import random
import re
import socket
import threading
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from frankenstein.campaign import init_campaign
from helpers_upstream import ScriptedUpstreamTestDouble
from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.regioncache import RegionCache
from frankenstein.regioncache.observe import ServedLog
from frankenstein.regioncache.proxy import Front, start_front
from frankenstein.shipped import data_path
from frankenstein.workload.listener import UpstreamPool
from frankenstein.workload.record import serve_recorder
from frankenstein.workload.wire import (
    MAX_HEAD_BYTES,
    BadHead,
    ChunkFraming,
    Headers,
    parse_headers,
    read_head,
    read_message_head,
)

TEXT = "The quick brown fox jumps over the lazy dog."


@cache
def tok() -> Tokenizer:
    return Tokenizer.from_file(str(data_path("tiny-tokenizer.json")))


def expected_count(text: str = TEXT) -> int:
    return len(tok().encode(text, add_special_tokens=False).ids)


@pytest.fixture
def front() -> Iterator[Front]:
    with start_front("http://127.0.0.1:9", RegionCache(tok())) as f:  # local answers only: no upstream
        yield f


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def raw(url: str, data: bytes, pieces: int = 1) -> bytes:
    """Send ``data`` (in ``pieces`` separate TCP segments, Nagle off) and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        step = max(1, len(data) // pieces)
        for i in range(0, len(data), step):
            s.sendall(data[i : i + step])
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def count_request(text: str = TEXT, extra: bytes = b"", close: bool = True) -> bytes:
    body = b'{"content": "%s"}' % text.encode()
    head = b"POST /count HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra
    head += b"Connection: close\r\n" if close else b""
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


# ------------------------------------------------------------------ a client's head, attacked


def test_a_folded_header_line_is_400_and_closes(front: Front) -> None:
    answer = raw(front.url, count_request(extra=b"X-Note: one\r\n  folded onto the line above\r\n", close=False))
    assert answer.startswith(b"HTTP/1.1 400 ") and b"obs-fold" in answer
    assert b'"count"' not in answer  # never counted: the connection was closed after the refusal


def test_a_header_line_without_a_colon_is_400(front: Front) -> None:
    answer = raw(front.url, count_request(extra=b"NoColonHere\r\n", close=False))
    assert answer.startswith(b"HTTP/1.1 400 ") and b"without a 'name:'" in answer


@pytest.mark.parametrize("shape", ["many lines", "one long line", "many bytes"])
def test_a_huge_head_is_431_before_any_body_is_read(front: Front, shape: str) -> None:
    extra = {
        "many lines": b"".join(b"X-H%d: v\r\n" % i for i in range(150)),
        "one long line": b"X-Long: " + b"a" * 70_000 + b"\r\n",
        "many bytes": b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 1000) for i in range(MAX_HEAD_BYTES // 1000 + 2)),
    }[shape]
    t0 = time.perf_counter()
    answer = raw(front.url, count_request(extra=extra, close=False))
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b'"count"' not in answer and time.perf_counter() - t0 < 5


def test_the_recording_proxy_refuses_a_huge_head_the_same_way(tmp_path: Path) -> None:
    with serve_recorder("http://127.0.0.1:9", out=tmp_path / "t.jsonl") as rec:
        extra = b"".join(b"X-H%d: v\r\n" % i for i in range(150))
        answer = raw(rec.url, b"GET /health HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert not (tmp_path / "t.jsonl").exists() or (tmp_path / "t.jsonl").read_text() == ""


def test_a_head_split_over_many_tcp_segments_is_read_whole(front: Front) -> None:
    request = count_request()
    answer = raw(front.url, request, pieces=len(request))  # one byte per segment
    assert answer.startswith(b"HTTP/1.1 200 ") and b'{"count": %d}' % expected_count() in answer


def test_pipelined_requests_on_one_connection_are_answered_in_order(front: Front) -> None:
    texts = ["one", "two words", TEXT]
    data = b"".join(count_request(t, close=False) for t in texts[:-1]) + count_request(texts[-1])
    answer = raw(front.url, data)
    counts = [int(n) for n in re.findall(rb'\{"count": (\d+)\}', answer)]
    assert answer.count(b"HTTP/1.1 200 ") == 3 and counts == [expected_count(t) for t in texts]


@pytest.mark.parametrize("name", [b"content-length", b"CONTENT-LENGTH", b"cOnTeNt-LeNgTh"])
def test_header_names_are_matched_in_any_case(front: Front, name: bytes) -> None:
    body = b'{"content": "%s"}' % TEXT.encode()
    request = b"POST /count HTTP/1.1\r\nhost: x\r\nCONNECTION: close\r\n%s: %d\r\n\r\n%s" % (name, len(body), body)
    answer = raw(front.url, request)  # returns only because 'CONNECTION: close' closed the connection
    assert b'{"count": %d}' % expected_count() in answer


def test_expect_100_continue_is_answered_before_the_body(front: Front) -> None:
    body = b'{"content": "%s"}' % TEXT.encode()
    head = b"POST /count HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n"
    with socket.create_connection(("127.0.0.1", port_of(front.url)), timeout=10) as s:
        s.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body))
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"  # before a byte of the body was sent
        s.sendall(body)
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 ") and b'{"count": %d}' % expected_count() in answer


def test_a_chunked_request_body_is_411_and_never_forwarded(front: Front) -> None:
    upstream = ScriptedUpstreamTestDouble([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"])
    with start_front(upstream.url, RegionCache(tok())) as f:
        request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        answer = raw(f.url, request + b"2\r\n{}\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
    upstream.close()
    assert answer.startswith(b"HTTP/1.1 411 ") and upstream.requests == []


def test_http_1_0_closes_unless_kept_alive(front: Front) -> None:
    body = b'{"content": "x"}'
    request = b"POST /count HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    answer = raw(front.url, request)  # returns: HTTP/1.0 without keep-alive closes after the answer
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.count(b"HTTP/1.1") == 1


# ------------------------------------------------------------------ an upstream's answer, attacked


def test_a_chunked_answer_with_extensions_and_trailers_is_relayed_and_the_connection_reused() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;name=value\r\nhello\r\n7 ; ext\r\n, world\r\n0\r\nX-Trailer: dropped\r\nX-Other: too\r\n\r\n"
    )
    upstream = ScriptedUpstreamTestDouble([chunked, chunked])
    with start_front(upstream.url, RegionCache(tok())) as f, httpx.Client(trust_env=False) as client:
        bodies = [client.get(f.url + "/stream").text for _ in range(2)]
        opened = f.server.pool.opened
    upstream.close()
    assert bodies == ["hello, world", "hello, world"]
    assert opened == 1 and upstream.connections == 1  # read to its end: the connection went back to the pool


def test_an_answer_without_a_length_ends_at_close_and_is_not_reused(tmp_path: Path) -> None:
    no_length = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it, until the close"
    upstream = ScriptedUpstreamTestDouble([no_length, no_length], close_after=True)
    with serve_recorder(upstream.url, out=tmp_path / "t.jsonl") as rec, httpx.Client(trust_env=False) as client:
        bodies = [client.get(rec.url + "/v1/models").text for _ in range(2)]
        opened = rec.pool.opened
    upstream.close()
    assert bodies == ["all of it, until the close"] * 2
    assert opened == 2  # an answer ended by a close cannot be followed by another on its connection


def test_a_folded_header_in_an_answer_is_unfolded() -> None:
    folded = b"HTTP/1.1 200 OK\r\nX-Folded: first\r\n\tsecond\r\nContent-Length: 2\r\n\r\nok"
    upstream = ScriptedUpstreamTestDouble([folded])
    with start_front(upstream.url, RegionCache(tok())) as f:
        r = httpx.get(f.url + "/x", trust_env=False)
    upstream.close()
    assert r.status_code == 200 and r.text == "ok" and r.headers["x-folded"] == "first second"


def test_a_broken_chunk_mid_answer_ends_the_answer_short() -> None:
    broken = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nmore\r\n"
    upstream = ScriptedUpstreamTestDouble([broken])
    with start_front(upstream.url, RegionCache(tok())) as f:
        answer = raw(f.url, b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    upstream.close()
    assert answer.startswith(b"HTTP/1.1 200 ") and b"5\r\nhello\r\n" in answer
    assert not answer.endswith(b"0\r\n\r\n")  # no final chunk: the client's read fails, as it should


def test_a_malformed_status_line_is_502() -> None:
    upstream = ScriptedUpstreamTestDouble([b"HTCPCP/1.0 418 teapot\r\n\r\n"])
    with start_front(upstream.url, RegionCache(tok())) as f:
        r = httpx.get(f.url + "/x", trust_env=False)
    upstream.close()
    assert r.status_code == 502 and "bad status line" in r.text


# ------------------------------------------------------------------ a chunked body's framing, followed raw

PLAIN = b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n"


def feed_in(pieces: list[bytes]) -> tuple[list[bytes], ChunkFraming]:
    framing = ChunkFraming()
    return [framing.feed(p) for p in pieces], framing


def split_at(data: bytes, *cuts: int) -> list[bytes]:
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]


@pytest.mark.parametrize("cut", range(1, len(PLAIN)))
def test_plain_framing_split_anywhere_is_passed_on_byte_for_byte_and_ends_at_the_last_byte(cut: int) -> None:
    out, framing = feed_in(split_at(PLAIN, cut))
    assert b"".join(out) == PLAIN and framing.done and framing.surplus == 0 and framing.broken is None


def test_a_framing_line_split_across_reads_is_held_until_whole_chunk_data_is_not() -> None:
    out, framing = feed_in([b"5\r", b"\nhel", b"lo\r\n0", b"\r\n", b"\r\n"])
    assert out == [b"", b"5\r\nhel", b"lo\r\n", b"0\r\n", b"\r\n"] and framing.done


def test_the_final_zero_chunk_split_over_two_reads_ends_only_with_the_second() -> None:
    framing = ChunkFraming()
    assert framing.feed(b"5\r\nhello\r\n0\r\n") == b"5\r\nhello\r\n0\r\n" and not framing.done
    assert framing.feed(b"\r\n") == b"\r\n" and framing.done


def test_one_byte_at_a_time_with_extensions_and_trailers_gives_the_plain_framing() -> None:
    body = b"5;name=value\r\nhello\r\n7 ; ext\r\n, world\n0\r\nX-Trailer: a\r\nX-Other: b\r\n\r\n"
    out, framing = feed_in([body[i : i + 1] for i in range(len(body))])
    assert b"".join(out) == PLAIN and framing.done  # extensions and trailers dropped, the bare LF made CRLF


def test_bytes_after_the_end_are_surplus_not_body() -> None:
    out, framing = feed_in([PLAIN + b"HTTP/1.1 200 OK\r\n"])
    assert out == [PLAIN] and framing.done and framing.surplus == len(b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize("size", [b"-5", b"+5", b"0x5", b"5_0", b"", b"g", b"5 5", b"1" * 17])
def test_a_size_that_is_not_hex_digits_breaks_the_framing(size: bytes) -> None:
    out, framing = feed_in([b"2\r\nok\r\n" + size + b"\r\nhello\r\n0\r\n\r\n"])
    assert out == [b"2\r\nok\r\n"] and framing.broken is not None and not framing.done


def test_a_lying_size_breaks_the_framing_before_its_zero_chunk() -> None:
    """A size shorter than its data: the rest of the data is read as framing and refused; what looked like a
    final chunk inside it is never given back."""
    out, framing = feed_in([b"3\r\nhello\r\n0\r\n\r\n"])
    assert out == [b"3\r\nhel"] and "CRLF" in (framing.broken or "") and not framing.done


def test_a_framing_line_without_an_end_is_refused_above_64_kib() -> None:
    framing = ChunkFraming()
    out = [framing.feed(b"5;" + b"x" * 40000) for _ in range(2)]
    assert out == [b"", b""] and "64 KiB" in (framing.broken or "")


def test_too_many_trailer_lines_break_the_framing_after_the_zero_chunk() -> None:
    out, framing = feed_in([b"0\r\n" + b"X: y\r\n" * 101 + b"\r\n"])
    assert out == [b"0\r\n"] and framing.broken == "too many trailer lines" and not framing.done


def test_held_final_chunk_and_decoded_data_for_the_recording_proxy() -> None:
    framing = ChunkFraming(hold_final=True, decode=True)
    out, data = [], []
    for piece in (b"5;x\r\nhel", b"lo\r\n7\r\n, world\r\n0", b"\r\nX: y\r\n", b"\r\n"):
        out.append(framing.feed(piece))
        data.append(framing.data)
        assert framing.between_chunks == (piece != b"5;x\r\nhel")
    assert b"".join(out) == PLAIN[: -len(b"0\r\n\r\n")] and framing.done  # the final chunk is the caller's
    assert b"".join(data) == b"hello, world"


class _BytewiseFraming(ChunkFraming):
    """The general path alone (the whole-chunk fast path never taken): the reference the fast path must equal."""

    def _whole_chunks(self, data: bytes) -> bytes | None:
        return None


def _random_framing(rng: random.Random) -> bytes:
    """Chunks as engines send them and as they may not: uppercase or zero-padded sizes, extensions, bare LF,
    trailers, a lying size, bytes after the end."""
    out = b""
    for _ in range(rng.randrange(0, 6)):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        size = rng.choice([b"%x" % len(data)] * 6 + [b"%X" % len(data), b"0%x" % len(data), b"%x;e=1" % len(data)])
        lie = rng.random() < 0.05
        out += size + rng.choice([b"\r\n"] * 8 + [b"\n"]) + data + (b"xx" if lie else b"") + b"\r\n"
    out += rng.choice([b"0\r\n\r\n"] * 6 + [b"00\r\n\r\n", b"0\r\nX: y\r\n\r\n", b"0\r\n\r\nHTTP"])
    return out


def _line_by_line(data: bytes, unfold: bool) -> object:
    """The general path alone: what read_message_head must give for any head."""
    rfile = io.BufferedReader(io.BytesIO(data))
    try:
        lines = read_head(rfile, rfile.readline(65537))
        return (lines[0], parse_headers(lines[1:], unfold).items(), rfile.read()) if lines else None
    except BadHead as exc:
        return type(exc), str(exc)


def _matched(data: bytes, unfold: bool) -> object:
    rfile = io.BufferedReader(io.BytesIO(data))
    try:
        head = read_message_head(rfile, rfile.readline(65537), unfold)
        return (head[0], head[1].items(), rfile.read()) if head else None
    except BadHead as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("unfold", [False, True])
def test_a_head_read_by_the_one_match_path_is_what_the_line_by_line_path_reads(unfold: bool) -> None:
    rng = random.Random(27)
    names = ["Host", "content-length", "X-Frank-Session", "Bad Name", "X@Y", " Lead", "Trail ", "", "ö"]
    values = ["x", "", "  padded\t ", "a:b", "tab\tin", "ünï", "bare\rcr", "bare\nlf"]
    for _ in range(3000):
        fields = [f"{rng.choice(names)}:{rng.choice(values)}" for _ in range(rng.randrange(0, 6))]
        if rng.random() < 0.1:
            fields.insert(rng.randrange(len(fields) + 1), " folded")
        ends = [rng.choice(["\r\n"] * 9 + ["\n"]) for _ in fields]
        head = "GET /x HTTP/1.1\r\n" + "".join(f + e for f, e in zip(fields, ends, strict=True)) + "\r\n"
        data = head.encode("latin-1", "replace") + b"BODY"
        assert _matched(data, unfold) == _line_by_line(data, unfold), data


@pytest.mark.parametrize("hold", [False, True])
def test_the_whole_chunk_fast_path_gives_what_the_bytewise_path_gives(hold: bool) -> None:
    rng = random.Random(33)
    for _ in range(3000):
        body = _random_framing(rng)
        cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.randrange(0, 4))))
        fast, slow = ChunkFraming(hold, decode=True), _BytewiseFraming(hold, decode=True)
        for piece in split_at(body, *cuts):
            got, want = fast.feed(piece), slow.feed(piece)
            assert (got, fast.data) == (want, slow.data), (body, cuts)
            state = ("done", "broken", "surplus", "between_chunks")
            assert [getattr(fast, a) for a in state] == [getattr(slow, a) for a in state], (body, cuts)
            if fast.done or fast.broken:
                break


def test_between_chunks_is_false_inside_a_chunk_and_after_its_data_without_the_crlf() -> None:
    framing = ChunkFraming()
    states = [(framing.feed(p), framing.between_chunks) for p in (b"5\r\nhel", b"lo", b"\r", b"\n", b"x")]
    assert states == [(b"5\r\nhel", False), (b"lo", False), (b"", False), (b"\r\n", True), (b"", True)]
    assert framing.broken is None and not framing.done  # "x" begins a size line, held until it is whole


_EVENTS = (b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', b"data: [DONE]\n\n")
_SSE = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in _EVENTS)


@pytest.mark.parametrize("hold", [False, True])
def test_an_event_streams_answer_ends_with_the_piece_that_brings_its_done_event(hold: bool) -> None:
    """The final 0-chunk goes with the [DONE] piece (held: the caller's to send); the engine's own, after it,
    is followed to the body's end and given back to nobody."""
    framing = ChunkFraming(hold_final=hold, end_at_done=True)
    assert framing.feed(_SSE) == _SSE + (b"" if hold else b"0\r\n\r\n") and framing.ended and not framing.done
    assert framing.feed(b"0\r\n") == b"" and framing.feed(b"\r\n") == b""
    assert framing.done and framing.late == 0 and framing.surplus == 0


def test_chunks_after_the_done_event_are_followed_counted_and_not_given_back() -> None:
    framing = ChunkFraming(end_at_done=True)
    framing.feed(_SSE)
    assert framing.feed(b"9\r\nlate data\r\n0\r\n\r\n") == b"" and framing.done and framing.late == 14


@pytest.mark.parametrize(
    "last",
    [b"xdata: [DONE]\n\n", b"data: [DONE]\n", b"data:[DONE]\n\n", b"data: [DONE]\n\ndata: {}\n\n", b"[DONE]\n\n"],
)
def test_only_a_piece_that_ends_with_a_whole_done_event_ends_the_answer(last: bytes) -> None:
    body = _SSE[: -len(b"e\r\ndata: [DONE]\n\n\r\n")] + b"%x\r\n%s\r\n" % (len(last), last)
    framing = ChunkFraming(end_at_done=True)
    assert framing.feed(body) == body and not framing.ended


def test_a_done_event_cut_across_pieces_or_without_end_at_done_waits_for_the_engines_final_chunk() -> None:
    cut, plain = ChunkFraming(end_at_done=True), ChunkFraming()
    assert cut.feed(_SSE[:-3]) + cut.feed(_SSE[-3:]) == _SSE and not cut.ended
    assert plain.feed(_SSE) == _SSE and not plain.ended
    assert cut.feed(b"0\r\n\r\n") == plain.feed(b"0\r\n\r\n") == b"0\r\n\r\n"


_DONE_CHUNK = b"e\r\ndata: [DONE]\n\n\r\n"


@pytest.mark.parametrize("final", [b"0\r\n\r\n", b"0\r\nX-T: y\r\n\r\n"])
@pytest.mark.parametrize("hold", [False, True])
def test_a_done_event_read_with_the_engines_final_chunk_in_one_piece_ends_the_answer_at_done(
    hold: bool, final: bytes
) -> None:
    """A proxy that reads late gets llama-server's [DONE] chunk and its final chunk in one piece (seen on these cores
    in most streams): the answer ended at [DONE] all the same (``ended``), so ``frank record --turn-after-answer``
    sends its end with that piece, not after our decoder has read the stream. Trailers take the general path."""
    framing = ChunkFraming(hold_final=hold, end_at_done=True)
    assert framing.feed(_SSE[: -len(_DONE_CHUNK)]) == _SSE[: -len(_DONE_CHUNK)] and not framing.ended
    out = framing.feed(_DONE_CHUNK + final)
    assert out == _DONE_CHUNK + (b"" if hold else b"0\r\n\r\n") and framing.done and framing.ended
    assert framing.late == 0 and framing.surplus == 0


@pytest.mark.parametrize("hold", [False, True])
def test_a_done_chunk_whose_size_line_began_in_the_piece_before_ends_the_answer_in_its_own(hold: bool) -> None:
    """The [DONE] chunk's size line cut across two pieces (held until whole, then given back with the event): the
    piece that brings the event ends the answer, as a piece of whole chunks does."""
    framing = ChunkFraming(hold_final=hold, end_at_done=True)
    assert framing.feed(_SSE[:-18]) == _SSE[:-19] and not framing.ended  # "e" held: the line is not whole
    assert framing.feed(_SSE[-18:]) == _DONE_CHUNK + (b"" if hold else b"0\r\n\r\n") and framing.ended
    assert framing.feed(b"0\r\n\r\n") == b"" and framing.done and framing.late == 0


@pytest.mark.parametrize("hold", [False, True])
def test_ending_at_done_gives_back_the_bytes_the_engines_own_end_gives_however_the_stream_is_cut(hold: bool) -> None:
    """Against an engine that keeps the protocol (nothing but its final chunk after [DONE]), ending at [DONE]
    changes when the final chunk is given back, never what is given back: 2,000 random event streams, cut at
    at random (half of them only between chunks, where engines cut), framed plainly or not, through both."""
    rng = random.Random(33)
    ended = 0
    for _ in range(2000):
        events = [b"data: " + bytes(rng.randrange(32, 127) for _ in range(rng.randrange(0, 30))) + b"\n\n"]
        events = events * rng.randrange(0, 4) + [b"data: [DONE]\n\n"]
        size = rng.choice([b"%x", b"%x", b"%x", b"%X", b"%x;e=1"])
        chunks = [size % len(e) + b"\r\n" + e + b"\r\n" for e in events]
        body = b"".join(chunks) + rng.choice([b"0\r\n\r\n", b"0\r\n\r\n", b"0\r\nX: y\r\n\r\n"])
        if rng.random() < 0.5:  # where engines cut: between chunks (one event per write)
            cuts = [sum(map(len, chunks[: i + 1])) for i in range(len(chunks)) if rng.random() < 0.7]
        else:
            cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.randrange(0, 4))))
        early, late = ChunkFraming(hold, end_at_done=True), ChunkFraming(hold)
        pieces = split_at(body, *cuts)
        assert b"".join(early.feed(p) for p in pieces) == b"".join(late.feed(p) for p in pieces), (body, cuts)
        assert early.done and late.done and early.late == 0 and not late.ended
        if hold:  # held, the end is found unless a cut falls inside the event (its own piece must show it whole)
            done_end = sum(map(len, chunks))
            assert early.ended == all(not done_end - 16 <= c < done_end for c in cuts), (body, cuts)
        ended += early.ended
    assert ended > 1200  # the early end was taken often (a piece that ends with the [DONE] chunk)


def test_record_holds_a_streams_final_chunk_until_its_turn_is_in_the_trace(tmp_path: Path) -> None:
    """Relayed raw, the stream's chunks reach the client as they come, with extensions dropped; the final
    0-chunk leaves only once the turn is in the trace (held here by an ``on_turn`` that waits)."""
    events = [b'data: {"content": "hi", "tokens": [1], "stop": false}\n\n', b'data: {"content": "", "stop": true}\n\n']
    body = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\nX-T: y\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    upstream = ScriptedUpstreamTestDouble([head + body])
    plain = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)
    _, rest = _recorded_while_held(
        upstream.url, b"/completion", b'{"prompt": "hello", "stream": true}', plain, tmp_path
    )
    upstream.close()
    assert rest == b"0\r\n\r\n"


@pytest.mark.parametrize("read_with_final", [False, True])
def test_record_holds_an_openai_streams_done_event_until_its_turn_is_in_the_trace(
    tmp_path: Path, read_with_final: bool
) -> None:
    """An OpenAI client's answer is whole at ``data: [DONE]`` (it stops reading there), and so is that of a front
    that ends the answer there (``frank serve --record``): the [DONE] event leaves only once the turn is in the trace
    (held here by an ``on_turn`` that waits), with the final chunk in the same send; the pieces before it as they
    came. Before, [DONE] left first and the turn was written after it (a ``kill -9`` in between lost a turn whose
    client had its answer). The engine's [DONE] read alone, or in one piece with the whole answer (then held whole:
    one send, one wake-up of the client)."""
    events = [
        b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    ]
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    done = b"e\r\ndata: [DONE]\n\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    upstream = ScriptedUpstreamTestDouble([head + b"".join(chunks) + done + b"0\r\n\r\n"])
    if not read_with_final:  # each chunk its own write, as llama-server's: [DONE] ends the answer as it comes
        upstream = PacedUpstreamTestDouble(head, [*chunks, done, b"0\r\n\r\n"])
    request = b'{"messages": [{"role": "user", "content": "hello"}], "stream": true}'
    events_before = b"" if read_with_final else b"".join(chunks)  # what leaves before the turn is written
    got, rest = _recorded_while_held(
        upstream.url, b"/v1/chat/completions", request, events_before or b"\r\n\r\n", tmp_path
    )
    upstream.close()
    assert rest == b"".join(chunks)[len(events_before) :] + done + b"0\r\n\r\n" and b"[DONE]" not in got


def test_serve_in_front_of_its_recorder_ends_no_answer_before_the_turn_is_in_the_trace(tmp_path: Path) -> None:
    """``frank serve --record``'s chain in process: serve's front, the recorder behind it, an engine double pacing its
    chunks. The front ends an event stream at its [DONE] event; the recorder holds that event until the turn is
    written (an ``on_turn`` that waits holds it here), so the client through the front has nothing after the events
    before [DONE] while the turn is being written. Before, the front ended the client's answer at [DONE] while the
    recorder still wrote the turn (a ``kill -9`` then lost a turn whose client had its answer)."""
    events = [
        b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    engine = PacedUpstreamTestDouble(head, [*chunks, b"0\r\n\r\n"])
    gate, turns = threading.Event(), []
    request = b'{"messages": [{"role": "user", "content": "hello"}], "stream": true}'
    out = tmp_path / "t.jsonl"
    with (
        serve_recorder(engine.url, out=out, on_turn=lambda t: (turns.append(t), gate.wait(10))) as rec,
        start_front(rec.url, RegionCache(tok())) as front,
        socket.create_connection(("127.0.0.1", port_of(front.url)), timeout=10) as s,
    ):
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(request), request)
        )
        got, rest = _held_until_the_turn(s, chunks[1], turns, gate, out)  # the events before [DONE], as they came
    engine.close()
    assert rest == chunks[2] + b"0\r\n\r\n" and b"[DONE]" not in got


def _recorded_while_held(
    upstream: str, path: bytes, request: bytes, before: bytes, tmp_path: Path
) -> tuple[bytes, bytes]:
    """``request`` POSTed to ``path`` through a recorder of ``upstream`` whose ``on_turn`` waits for a gate: what the
    client got until it ended with ``before``, and the rest once the turn is in the trace (``_held_until_the_turn``)."""
    gate, turns = threading.Event(), []
    with serve_recorder(upstream, out=tmp_path / "t.jsonl", on_turn=lambda t: (turns.append(t), gate.wait(10))) as rec:
        with socket.create_connection(("127.0.0.1", port_of(rec.url)), timeout=10) as s:
            s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % path)
            s.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(request), request))
            return _held_until_the_turn(s, before, turns, gate, tmp_path / "t.jsonl")


def _held_until_the_turn(
    s: socket.socket, before: bytes, turns: list[Any], gate: threading.Event, trace: Path
) -> tuple[bytes, bytes]:
    """What came on ``s`` until it ended with ``before``; then nothing more while the turn is being recorded (its
    ``on_turn`` waits for ``gate``), the turn in the trace (output "hi"), the gate opened, and the rest to the answer's
    final chunk: (what came before, the rest)."""
    got = b""
    while not got.endswith(before):
        piece = s.recv(65536)
        assert piece, got
        got += piece
    while not turns:
        s.settimeout(0.01)
        with pytest.raises(TimeoutError):
            s.recv(1)  # nothing more arrives while the turn is being recorded
    assert json.loads(trace.read_text())["output"]["text"] == "hi"
    gate.set()
    s.settimeout(10)
    rest = b""
    while not rest.endswith(b"0\r\n\r\n"):
        piece = s.recv(65536)
        assert piece, rest
        rest += piece
    return got, rest


class PacedUpstreamTestDouble:
    """TEST DOUBLE of an engine that writes an answer's head and then each of ``pieces`` on its own, 5 ms apart (a
    proxy reads each alone), on one connection, then closes."""

    def __init__(self, head: bytes, pieces: list[bytes]) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._head, self._pieces = head, pieces
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._sock.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b""
            while b"\r\n\r\n" not in buf or len(buf.split(b"\r\n\r\n", 1)[1]) < _length(buf):
                buf += conn.recv(65536)
            conn.sendall(self._head)
            for piece in self._pieces:
                threading.Event().wait(0.005)
                conn.sendall(piece)
            threading.Event().wait(0.05)

    def close(self) -> None:
        self._sock.close()


def _length(head: bytes) -> int:
    found = re.search(rb"(?i)content-length: *(\d+)", head)
    return int(found.group(1)) if found else 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_record_after_answer_sends_the_whole_answer_before_its_turn(tmp_path: Path, stream: bool) -> None:
    """With ``after_answer`` (``frank record --turn-after-answer``) the client gets its whole answer, final chunk
    included, while the turn is not yet in the trace (held here by an ``on_turn`` that waits); then it is."""
    events = [b'data: {"content": "hi", "tokens": [1], "stop": false}\n\n', b'data: {"content": "", "stop": true}\n\n']
    json_answer = json.dumps({"content": "hi", "stop": True, "stop_type": "eos"}).encode()
    if stream:
        body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        end = b"0\r\n\r\n"
    else:
        body, end = json_answer, json_answer
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    upstream = ScriptedUpstreamTestDouble([head + body])
    gate, turns = threading.Event(), []
    request = b'{"prompt": "hello", "stream": %s}' % (b"true" if stream else b"false")
    trace = tmp_path / "t.jsonl"
    with serve_recorder(
        upstream.url, out=trace, on_turn=lambda t: (turns.append(t), gate.wait(10)), after_answer=True
    ) as rec:
        with socket.create_connection(("127.0.0.1", port_of(rec.url)), timeout=10) as s:
            s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nConnection: close\r\n")
            s.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(request), request))
            got = b""
            while not got.endswith(end):  # the whole answer while on_turn holds: a recv timeout fails it
                chunk = s.recv(65536)
                assert chunk, got  # closed before the whole answer came
                got += chunk
            gate.set()
    upstream.close()
    assert len(turns) == 1 and json.loads(trace.read_text())["output"]["text"] == "hi"


class HeldEndUpstreamTestDouble:
    """A test double for an engine that streams a chat answer through its ``[DONE]`` event, then waits for
    ``release`` before it sends the final 0-chunk (``die``: closes instead): the gap llama-server leaves between its
    last event and its last bytes, made long enough to look into."""

    EVENTS = (
        b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    )

    def __init__(self, die: bool = False, tail: bytes = b"0\r\n\r\n") -> None:
        self.release, self.die, self.tail = threading.Event(), die, tail
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._sock.accept()
        with conn, conn.makefile("rb") as rfile:
            ScriptedUpstreamTestDouble._read_request(rfile)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            conn.sendall(head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in self.EVENTS))
            self.release.wait(30)  # longer than a client waits (10 s): a client that needs the end times out
            if not self.die:
                conn.sendall(self.tail)

    def close(self) -> None:
        self._sock.close()


def _stream_through_record(tmp_path: Path, upstream: HeldEndUpstreamTestDouble) -> tuple[bytes, list[str], bool, bytes]:
    """A streamed chat through frank record; the client reads its answer to the final chunk while the engine
    holds its own (10 s at most), then the engine sends its end. (what the client got meanwhile, the recorder's
    errors, whether the turn was in the trace then, what the client got after)."""
    chat = b'{"messages": [{"role": "user", "content": "hello"}], "stream": true}'
    trace = tmp_path / "t.jsonl"
    with serve_recorder(upstream.url, out=trace) as rec:
        with socket.create_connection(("127.0.0.1", port_of(rec.url)), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n")
            s.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(chat), chat))
            got = _read_to_the_final_chunk(s)
            written_before_the_end = trace.exists() and trace.read_bytes().endswith(b"\n")
            upstream.release.set()
            rest = b""
            while chunk := s.recv(65536):
                rest += chunk
        errors = list(rec.errors)
    upstream.close()
    return got, errors, written_before_the_end, rest


def _read_to_the_final_chunk(s: socket.socket) -> bytes:
    """What ``s`` brings up to a final 0-chunk, or up to its close or a 10 s timeout (a socket.timeout then)."""
    got = b""
    while not got.endswith(b"\r\n0\r\n\r\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_record_writes_a_streams_turn_at_its_last_event_while_the_engine_sends_its_end(tmp_path: Path) -> None:
    """The turn is whole at the stream's [DONE]: it is in the trace, and the client has its whole answer, before
    the engine's final chunk came (the recorder writes it in the gap llama-server leaves there)."""
    got, errors, written_before_the_end, rest = _stream_through_record(tmp_path, HeldEndUpstreamTestDouble())
    assert written_before_the_end and errors == [] and rest == b""
    assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    turn = json.loads((tmp_path / "t.jsonl").read_text())
    assert turn["output"]["text"] == "hi" and turn["output"]["finish_reason"] == "stop"


def test_a_stream_whose_engine_dies_after_its_done_event_gave_the_client_and_the_trace_the_whole_answer(
    tmp_path: Path,
) -> None:
    """The engine closes after [DONE] without its final chunk: the answer was whole at [DONE] and ended there
    for the client, and the turn written then stays in the trace."""
    got, errors, written_before_the_end, rest = _stream_through_record(tmp_path, HeldEndUpstreamTestDouble(die=True))
    assert written_before_the_end and got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") and rest == b""
    assert errors == []
    assert json.loads((tmp_path / "t.jsonl").read_text())["output"]["text"] == "hi"


def test_chunks_an_engine_sends_after_its_done_event_reach_no_client_and_are_said(tmp_path: Path) -> None:
    """An engine that breaks the protocol, sending an event after [DONE]: the client's answer ended at [DONE]
    and gets none of it (nothing lands after the answer's end), and the recorder says how many bytes it dropped."""
    late = b"9\r\nlate data\r\n0\r\n\r\n"
    got, errors, _, rest = _stream_through_record(tmp_path, HeldEndUpstreamTestDouble(tail=late))
    assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") and rest == b""
    assert errors == ["the engine sent 14 bytes after [DONE] on /v1/chat/completions: dropped"]


def test_serve_ends_an_event_stream_at_its_done_event_while_the_engine_holds_its_final_chunk(tmp_path: Path) -> None:
    """Through the front: the client reads its whole answer (to the final chunk) while the engine still holds its
    own; chunks the engine sends after [DONE] reach nobody (the next answer on the same connection is clean)
    and count as an engine error."""
    camp = init_campaign(tmp_path / "c")
    log = ServedLog(camp.store, step=None, flush_s=60)
    answers = []
    for upstream in (HeldEndUpstreamTestDouble(), HeldEndUpstreamTestDouble(tail=b"9\r\nlate data\r\n0\r\n\r\n")):
        with start_front(upstream.url, RegionCache(tok()), observe=log) as f:
            with socket.create_connection(("127.0.0.1", port_of(f.url)), timeout=10) as s:
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
                answers.append(_read_to_the_final_chunk(s))
                upstream.release.set()
                s.sendall(
                    b'POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 17\r\n\r\n{"content": "hi"}'
                )
                answers.append(b"".join(iter(lambda: s.recv(65536), b"")))
        upstream.close()
    log.close()
    got = [(r.route, r.engine_error) for r in camp.store.served_requests()]
    camp.close()
    assert all(a.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") for a in answers[::2])
    assert all(a.startswith(b"HTTP/1.1 200 ") and b"late" not in a for a in answers[1::2])
    assert [e for r, e in got if r == "chat"] == [False, True]


def test_a_lying_size_through_the_front_ends_without_the_final_chunk_and_drops_the_connection() -> None:
    lying = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n"
    ok = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + PLAIN
    upstream = ScriptedUpstreamTestDouble([lying, ok])
    with start_front(upstream.url, RegionCache(tok())) as f:
        answer = raw(f.url, b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
        second = httpx.get(f.url + "/y", trust_env=False).text
    upstream.close()
    assert answer.endswith(b"\r\n\r\n3\r\nhel") and second == "hello, world"
    assert upstream.connections == 2  # the broken answer's connection was not reused


def test_surplus_bytes_after_a_chunked_answer_keep_its_connection_out_of_the_pool() -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + PLAIN
    upstream = ScriptedUpstreamTestDouble([answer + b"junk nobody asked for", answer])
    with start_front(upstream.url, RegionCache(tok())) as f, httpx.Client(trust_env=False) as client:
        bodies = [client.get(f.url + "/s").text for _ in range(2)]
    upstream.close()
    assert bodies == ["hello, world"] * 2 and upstream.connections == 2


def test_an_upstream_dying_mid_stream_ends_the_stream_short_and_is_an_engine_error(tmp_path: Path) -> None:
    cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7\r\n, wo"
    upstream = ScriptedUpstreamTestDouble([cut], close_after=True)
    camp = init_campaign(tmp_path / "c")
    log = ServedLog(camp.store, step=None, flush_s=60)
    with start_front(upstream.url, RegionCache(tok()), observe=log) as f:
        answer = raw(f.url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    log.close()
    upstream.close()
    got = [(r.route, r.status, r.engine_error) for r in camp.store.served_requests()]
    camp.close()
    assert answer.endswith(b"5\r\nhello\r\n7\r\n, wo") and got == [("chat", 200, True)]


# ------------------------------------------------------------------ the headers object


def test_headers_ignore_case_keep_repeats_and_return_the_first() -> None:
    h = Headers([("Set-Cookie", "a=1"), ("set-cookie", "b=2"), ("Content-Type", "text/plain")])
    assert h.get("SET-COOKIE") == "a=1" and h.get_all("Set-Cookie") == ["a=1", "b=2"]
    assert h.items() == [("Set-Cookie", "a=1"), ("set-cookie", "b=2"), ("Content-Type", "text/plain")]
    assert list(h) == ["Set-Cookie", "set-cookie", "Content-Type"] and "content-type" in h and "x" not in h
    assert h.get("missing") is None and h.get("missing", "") == ""


def test_bare_lf_line_ends_are_read_line_by_line(front: Front) -> None:
    body = b'{"content": "%s"}' % TEXT.encode()
    request = b"POST /count HTTP/1.1\nHost: x\nConnection: close\r\nContent-Length: %d\n\n%s" % (len(body), body)
    assert b'{"count": %d}' % expected_count() in raw(front.url, request)


def test_a_request_with_no_header_lines_is_parsed(front: Front) -> None:
    answer = raw(front.url, b"POST /count HTTP/1.0\r\n\r\n")  # no body: not a JSON object, said so
    assert answer.startswith(b"HTTP/1.1 400 ") and b"body must be a JSON object" in answer


def test_record_sends_the_answer_but_its_last_byte_until_the_turn_is_in_the_trace(tmp_path: Path) -> None:
    """The client gets the head and all but the last byte of a JSON answer at once; the last byte leaves only
    after the turn is in the trace (held here by an ``on_turn`` that waits), so a client with its answer can
    read its turn."""
    answer = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "hi"}}]}).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(answer)
    upstream = ScriptedUpstreamTestDouble([head + answer])
    gate, turns = threading.Event(), []
    chat = b'{"model": "m", "messages": [{"role": "user", "content": "hello"}]}'
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(
        chat
    )
    with serve_recorder(
        upstream.url, out=tmp_path / "t.jsonl", on_turn=lambda t: (turns.append(t), gate.wait(10))
    ) as rec:
        with socket.create_connection(("127.0.0.1", port_of(rec.url)), timeout=10) as s:
            s.sendall(request + chat)
            got = b""
            while not got.endswith(answer[:-1]):
                chunk = s.recv(65536)
                assert chunk, got  # the whole answer, or a close, before the turn was recorded: the order is wrong
                got += chunk
            while not turns:  # the proxy records the turn after the client already has all but one byte
                s.settimeout(0.01)
                with pytest.raises(TimeoutError):
                    s.recv(1)  # ... and nothing more arrives meanwhile
            s.settimeout(0.05)
            with pytest.raises(TimeoutError):
                s.recv(1)  # the turn is being recorded: the last byte is still held
            assert json.loads((tmp_path / "t.jsonl").read_text())["output"]["text"] == "hi"
            gate.set()
            s.settimeout(10)
            rest = s.recv(65536)
    upstream.close()
    assert got + rest == got[: got.index(b"\r\n\r\n") + 4] + answer


def test_a_connection_the_upstream_closed_after_its_answer_is_replaced_not_reused() -> None:
    """An upstream that closes after each answer (with a length: the answer itself says nothing of it): the
    pool finds the connection closed before it sends on it, drops it, and the next request goes out once."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    upstream = ScriptedUpstreamTestDouble([answer, answer], close_after=True)
    with start_front(upstream.url, RegionCache(tok())) as f, httpx.Client(trust_env=False) as client:
        first = client.get(f.url + "/a").text
        deadline = time.monotonic() + 10
        while upstream.closed < 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # until the double closed its side (the case under test), not to make it pass
        second = client.get(f.url + "/b").text
        pool = f.server.pool
    upstream.close()
    assert [first, second] == ["ok", "ok"] and upstream.requests[1].startswith(b"GET /b ")
    assert pool.resent == 0 and pool.dropped >= 1 and len(upstream.requests) == 2  # each request went out once


STREAM = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + PLAIN


def test_an_upstream_that_closes_after_streams_has_each_streams_connection_replaced_after_its_answer() -> None:
    """The double closes each connection 50 ms after a stream, when the pool has long given it back: the first
    stream's connection is found closed by the next request (one connect on that request's path); from then on
    the pool replaces a stream's connection after its answer, and no request finds its connection closed."""
    upstream = ScriptedUpstreamTestDouble([STREAM] * 6, close_after=True, close_delay_s=0.05)
    with start_front(upstream.url, RegionCache(tok())) as f, httpx.Client(trust_env=False) as client:
        for i in range(6):
            assert client.get(f"{f.url}/s{i}").content == b"hello, world"
            deadline = time.monotonic() + 10
            while upstream.closed < i + 1 and time.monotonic() < deadline:
                time.sleep(0.01)  # until the double closed its side (the case under test), not to make it pass
        pool = f.server.pool
    upstream.close()
    assert pool.closes_after_streams and pool.stale == 1 and pool.resent == 0
    assert upstream.connections == 6 + 1  # each stream its own connection, plus the spare ready after the last


@pytest.mark.engine
def test_after_llama_servers_first_stream_no_request_finds_its_connection_closed(
    tiny_recipe: ResolvedRecipe, tmp_path: Path
) -> None:
    """llama-server closes its connection just after a stream's final chunk: after the first stream the pool
    replaces such a connection once the client has its answer, so a later request never connects on its path."""
    stream = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": True}
    with (
        start_engine(tiny_recipe, tmp_path) as eng,
        start_front(eng.base_url, RegionCache(tok())) as f,
        httpx.Client(trust_env=False, timeout=60) as client,
    ):
        for _ in range(6):
            with client.stream("POST", f.url + "/v1/chat/completions", json=stream) as r:
                assert r.status_code == 200 and r.read().rstrip().endswith(b"data: [DONE]")
            assert client.post(f.url + "/tokenize", json={"content": "x", "with_pieces": True}).status_code == 200
        pool = f.server.pool
    assert pool.closes_after_streams and pool.stale + pool.resent <= 1  # the first stream's close: found or resent


def test_meanwhile_runs_after_the_request_is_sent_and_before_its_answer_is_read() -> None:
    """``meanwhile`` (frank record's turn preparation) runs while the engine works: the upstream test double
    answers only once ``meanwhile`` has run, so running it after the answer head (or never) times out."""
    ran = threading.Event()
    sock = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def engine() -> None:
        conn, _ = sock.accept()
        with conn:
            seen.append(conn.recv(65536))  # the request arrived before meanwhile must have run
            assert ran.wait(10)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=engine, daemon=True).start()
    pool = UpstreamPool(f"http://127.0.0.1:{sock.getsockname()[1]}", timeout_s=10)
    answer = pool.open("POST", "/x", b"{}", {}, threading.BoundedSemaphore(1), meanwhile=ran.set)
    try:
        assert answer.status_code == 200 and answer.read() == b"ok" and seen[0].startswith(b"POST /x")
    finally:
        answer.close()
        pool.close()
        sock.close()


def test_a_turn_prepared_while_the_engine_works_is_recorded_as_sent_and_redacted(tmp_path: Path) -> None:
    """Through the real recording proxy, whose turn's request side is prepared while the engine works (the
    pool's contract is the test above): the line holds the request as sent, its credential redacted."""
    answer = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "hi"}}]}).encode()
    upstream = ScriptedUpstreamTestDouble(
        [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer]
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "api_key": "sk-secret"}
    with serve_recorder(upstream.url, out=tmp_path / "t.jsonl") as rec:
        reply = httpx.post(rec.url + "/v1/chat/completions", json=body, timeout=10)
    upstream.close()
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "hi"
    line = json.loads((tmp_path / "t.jsonl").read_text())
    assert line["request"] == {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    assert line["redacted"] == ["api_key"] and line["output"]["text"] == "hi"
