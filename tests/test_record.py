"""The recording proxy in front of an OpenAI-shaped upstream (a test double here; the real
llama-server in the tests marked ``engine``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from frankenstein.errors import FrankError, TraceError
from frankenstein.engines.response import StreamAssembler, output_from_response
from frankenstein.workload.export import export_workload, write_export
from frankenstein.workload.listener import BadRequest
from frankenstein.workload.record import TurnRecorder, _json_object, _plain_json_object, serve_recorder
from frankenstein.workload.trace import RecordedTimings, append_turn, load_trace, parse_line

from conftest import frank
from helpers_record import Burst, kill_9_mid_burst

SECRET = "sk-test-SECRET-1234567890"


class FakeOpenAI(BaseHTTPRequestHandler):
    """TEST DOUBLE of an OpenAI-compatible server (llama-server shapes): chat and completions,
    streamed (chunked SSE) and not, llama.cpp ``/completion``, and pass-through paths.

    Magic words in the last message / prompt: ``DIE`` sends two stream chunks then drops the
    connection; ``WAIT`` sends one chunk, then waits for ``server.release`` before finishing;
    ``FAIL`` answers 500."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.received.append((self.command, self.path, dict(self.headers), b""))
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "tiny"}]})
        elif self.path == "/health":
            self._json(200, {"status": "ok"})
        elif self.path == "/metrics":
            data = b"llamacpp:n_decode_total 7\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((self.command, self.path, dict(self.headers), raw))
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # as an engine does: 400 for a body it cannot read
            return self._json(400, {"error": {"message": "invalid JSON"}})
        if self.path == "/tokenize":
            return self._json(200, {"tokens": [1, 2, 3]})
        word = _magic(body)
        if word == "FAIL":
            return self._json(500, {"error": {"message": "boom"}})
        if body.get("stream"):
            return self._stream(self.path, word)
        if word == "WAIT":
            assert self.server.release.wait(10)
        self._json(200, _answer(self.path))

    def _chunk(self, obj: Any) -> None:
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, path: str, word: str | None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunks = _stream_chunks(path)
        for i, chunk in enumerate(chunks):
            if word == "DIE" and i == 2:
                self.connection.shutdown(socket.SHUT_RDWR)  # upstream dies mid-stream
                self.close_connection = True
                return
            if word == "WAIT" and i == 1:
                assert self.server.release.wait(10)
            self._chunk(chunk)
        if path != "/completion":
            self._chunk(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")


def _magic(body: dict[str, Any]) -> str | None:
    text = body["messages"][-1]["content"] if "messages" in body else str(body.get("prompt"))
    return next((w for w in ("DIE", "WAIT", "FAIL") if w in text), None)


TIMINGS = {"prompt_n": 5, "prompt_ms": 1.5, "predicted_n": 3, "predicted_ms": 6.0}


def _answer(path: str) -> dict[str, Any]:
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    if path == "/v1/chat/completions":
        return {
            "id": "x",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hello world!"}}
            ],
            "usage": usage,
            "timings": TIMINGS,
        }
    if path == "/v1/completions":
        return {"id": "x", "choices": [{"index": 0, "text": "Hello world!", "finish_reason": "length"}], "usage": usage}
    return {
        "content": "Hello world!",
        "tokens": [10, 11, 12],
        "stop": True,
        "stop_type": "limit",
        "tokens_evaluated": 5,
        "tokens_predicted": 3,
        "timings": TIMINGS,
    }


def _stream_chunks(path: str) -> list[Any]:
    if path == "/completion":
        return [
            {"content": "Hello", "tokens": [10], "stop": False},
            {"content": " world", "tokens": [11], "stop": False},
            {"content": "!", "tokens": [12], "stop": False},
            {
                "content": "",
                "stop": True,
                "stop_type": "limit",
                "tokens_evaluated": 5,
                "tokens_predicted": 3,
                "timings": TIMINGS,
            },
        ]
    if path == "/v1/completions":
        return [{"choices": [{"index": 0, "text": t, "finish_reason": None}]} for t in ("Hello", " world", "!")] + [
            {
                "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3},
            }
        ]
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    return [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": " world"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": "!", "tool_calls": [call]}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"a.py"}'}}]}}]},
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3},
            "timings": TIMINGS,
        },
    ]


@pytest.fixture
def upstream() -> Iterator[Any]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    srv.daemon_threads = True
    srv.received = []
    srv.release = threading.Event()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def proxy(upstream: Any, tmp_path: Path) -> Iterator[Any]:
    recorded = threading.Semaphore(0)
    srv = serve_recorder(upstream.url, "127.0.0.1", 0, tmp_path / "trace.jsonl", on_turn=lambda t: recorded.release())
    srv.turn_recorded = recorded  # released once per appended turn
    yield srv
    srv.shutdown()


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": content}],
        "max_tokens": 8,
        **extra,
    }


def sse_text(raw: bytes) -> str:
    asm = StreamAssembler("/v1/chat/completions")
    asm.feed(raw)
    return asm.output().text


def test_non_streamed_chat_is_relayed_and_recorded_without_credentials(upstream: Any, proxy: Any) -> None:
    body = chat("hi", api_key=SECRET, extra_body={"openai_api_key": SECRET, "top_k": 1})
    r = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {SECRET}"})
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "Hello world!"
    # The upstream got the client's bytes and its Authorization header...
    _, path, headers, raw = upstream.received[-1]
    assert path == "/v1/chat/completions" and json.loads(raw) == body
    assert headers["Authorization"] == f"Bearer {SECRET}"
    # ...the trace keeps neither.
    text = proxy.recorder.out.read_text()
    assert SECRET not in text and "Authorization" not in text
    (turn,) = load_trace(proxy.recorder.out).turns
    assert turn.redacted == ["api_key", "extra_body.openai_api_key"]  # which paths, never the values
    assert turn.request == {k: v for k, v in body.items() if k != "api_key"} | {"extra_body": {"top_k": 1}}
    assert list(turn.request) == ["model", "messages", "max_tokens", "extra_body"]  # key order as sent
    assert turn.output.text == "Hello world!" and turn.output.finish_reason == "stop"
    assert (turn.output.prompt_tokens, turn.output.completion_tokens) == (5, 3)
    assert turn.timings.server == TIMINGS and turn.timings.e2e_ms is not None and turn.timings.ttft_ms is None
    assert turn.turn_index == 0 and turn.endpoint == "/v1/chat/completions" and not turn.client_disconnected


def test_streamed_chat_is_relayed_chunk_by_chunk_and_assembled(upstream: Any, proxy: Any) -> None:
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=chat("hi", stream=True)) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        raw = r.read()
    assert raw.endswith(b"data: [DONE]\n\n") and sse_text(raw) == "Hello world!"
    (turn,) = load_trace(proxy.recorder.out).turns
    out = turn.output
    assert out.text == "Hello world!" and out.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [("call_1", "read_file", '{"path":"a.py"}')]
    assert (out.prompt_tokens, out.completion_tokens) == (5, 3)
    assert turn.timings.server == TIMINGS
    assert 0 < turn.timings.ttft_ms <= turn.timings.e2e_ms


@pytest.mark.parametrize("stream", [False, True])
def test_llamacpp_completion_keeps_token_ids(upstream: Any, proxy: Any, stream: bool) -> None:
    r = httpx.post(proxy.url + "/completion", json={"prompt": "def f(", "n_predict": 3, "stream": stream})
    assert r.status_code == 200
    (turn,) = load_trace(proxy.recorder.out).turns
    assert turn.endpoint == "/completion"
    assert turn.output.text == "Hello world!" and turn.output.token_ids == [10, 11, 12]
    assert turn.output.finish_reason == "length" and turn.output.completion_tokens == 3


@pytest.mark.parametrize("stream", [False, True])
def test_completions_endpoint_recorded(upstream: Any, proxy: Any, stream: bool) -> None:
    r = httpx.post(proxy.url + "/v1/completions", json={"prompt": "x = ", "max_tokens": 3, "stream": stream})
    assert r.status_code == 200
    (turn,) = load_trace(proxy.recorder.out).turns
    assert turn.output.text == "Hello world!" and turn.output.finish_reason == "length"


def test_pass_through_paths_are_not_recorded(upstream: Any, proxy: Any) -> None:
    assert httpx.get(proxy.url + "/v1/models").json()["data"][0]["id"] == "tiny"
    assert httpx.get(proxy.url + "/health").json() == {"status": "ok"}
    assert httpx.get(proxy.url + "/metrics").text == "llamacpp:n_decode_total 7\n"
    assert httpx.post(proxy.url + "/tokenize", json={"content": "abc"}).json() == {"tokens": [1, 2, 3]}
    assert not proxy.recorder.out.exists()
    assert [p for _, p, _, _ in upstream.received] == ["/v1/models", "/health", "/metrics", "/tokenize"]


def test_sessions_from_header_or_first_user_message(upstream: Any, proxy: Any) -> None:
    url = proxy.url + "/v1/chat/completions"
    httpx.post(url, json=chat("task A"))
    httpx.post(
        url,
        json=chat("task A")
        | {
            "messages": chat("task A")["messages"]
            + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        },
    )
    httpx.post(url, json=chat("task B"))
    httpx.post(url, json=chat("task C"), headers={"X-Frank-Session": "agent-7"})
    turns = load_trace(proxy.recorder.out).turns
    assert [t.turn_index for t in turns] == [0, 1, 0, 0]
    assert turns[0].session_id == turns[1].session_id != turns[2].session_id
    assert turns[0].session_id.startswith("s-") and len(turns[0].session_id) == 14
    assert (turns[3].session_id, turns[3].turn_id) == ("agent-7", "agent-7-0000")


def test_appending_to_an_existing_trace_resumes_turn_indices(upstream: Any, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    for _ in range(2):
        with serve_recorder(upstream.url, "127.0.0.1", 0, out) as srv:
            httpx.post(srv.url + "/v1/chat/completions", json=chat("same"), headers={"X-Frank-Session": "s"})
    assert [t.turn_id for t in load_trace(out).turns] == ["s-0000", "s-0001"]


def test_upstream_dying_mid_stream_leaves_a_valid_trace_and_the_client_an_error(upstream: Any, proxy: Any) -> None:
    url = proxy.url + "/v1/chat/completions"
    httpx.post(url, json=chat("before"))
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", url, json=chat("DIE now", stream=True)) as r:
            got = b""
            for part in r.iter_raw():
                got += part
    assert b"event: error" in got and b"upstream died mid-stream" in got
    httpx.post(url, json=chat("after"))
    lines = proxy.recorder.out.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3  # two complete turns, nothing else
    assert [parse_line(raw + b"\n", "t", i).output.text for i, raw in enumerate(lines[:-1], 1)] == ["Hello world!"] * 2
    assert len(proxy.errors) == 1 and "upstream died mid-stream on /v1/chat/completions" in proxy.errors[0]


def test_client_disconnect_mid_stream_still_records_the_whole_turn(upstream: Any, proxy: Any) -> None:
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=chat("WAIT", stream=True)) as r:
        first = next(r.iter_raw())
        assert b"Hello" in first
    upstream.release.set()  # the client is gone; the upstream now finishes
    assert proxy.turn_recorded.acquire(timeout=10)  # the proxy finishes the turn after the client left
    proxy_turns = load_trace(proxy.recorder.out).turns
    assert proxy_turns[0].client_disconnected is True
    assert proxy_turns[0].output.text == "Hello world!" and proxy_turns[0].output.finish_reason == "tool_calls"


def test_client_gone_before_a_json_answer_still_records_the_turn(upstream: Any, proxy: Any) -> None:
    with pytest.raises(httpx.ReadTimeout):  # the client gives up while the upstream is still working
        httpx.post(proxy.url + "/v1/chat/completions", json=chat("WAIT"), timeout=httpx.Timeout(5, read=0.2))
    upstream.release.set()
    assert proxy.turn_recorded.acquire(timeout=10)
    (turn,) = load_trace(proxy.recorder.out).turns
    assert turn.client_disconnected is True and turn.output.text == "Hello world!"
    assert proxy.errors == []


def test_upstream_error_status_is_relayed_and_not_recorded(upstream: Any, proxy: Any) -> None:
    r = httpx.post(proxy.url + "/v1/chat/completions", json=chat("FAIL"))
    assert r.status_code == 500 and r.json() == {"error": {"message": "boom"}}
    assert not proxy.recorder.out.exists()
    assert proxy.errors == ["upstream answered 500 on /v1/chat/completions"]


def test_unreachable_upstream_gives_502(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with serve_recorder(f"http://127.0.0.1:{port}", "127.0.0.1", 0, tmp_path / "t.jsonl") as srv:
        r = httpx.post(srv.url + "/v1/chat/completions", json=chat("hi"))
    assert r.status_code == 502 and r.json()["error"]["message"].startswith("upstream failed: ")
    assert not (tmp_path / "t.jsonl").exists()


def test_bad_upstream_url_and_busy_port_are_refused(upstream: Any, tmp_path: Path) -> None:
    with pytest.raises(FrankError, match=r"^--upstream 'localhost:8080': expected an http:// or https:// URL$"):
        serve_recorder("localhost:8080", "127.0.0.1", 0, tmp_path / "t.jsonl")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(FrankError, match=rf"^cannot listen on 127.0.0.1:{port}: "):
            serve_recorder(upstream.url, "127.0.0.1", port, tmp_path / "t.jsonl")


def test_stream_assembler_memory_stays_bounded_on_long_streams() -> None:
    asm = StreamAssembler("/v1/chat/completions")
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    for _ in range(20_000):
        asm.feed(chunk[:17])
        asm.feed(chunk[17:])
        assert asm.buffered < len(chunk)
    asm.feed(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\ndata: [DONE]\n\n')
    assert asm.finished and asm.output().text == "x" * 20_000
    assert len(asm._text) == 20_000 and not asm.buffered  # the pieces, never the raw chunks


def test_frank_record_command_records_until_interrupted(upstream: Any, tmp_path: Path) -> None:
    out = tmp_path / "cli.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "frankenstein",
            "record",
            "--upstream",
            upstream.url,
            "--listen",
            "127.0.0.1:0",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        first = proc.stdout.readline()  # type: ignore[union-attr]
        url = first.split()[1]
        assert first == f"recording {url} -> {upstream.url}, turns appended to {out} (Ctrl-C to stop)\n"
        assert url.startswith("http://127.0.0.1:")
        httpx.post(url + "/v1/chat/completions", json=chat("hi"), headers={"X-Frank-Session": "cli"})
        assert proc.stdout.readline() == "recorded cli-0000 (/v1/chat/completions, 3 tokens)\n"  # type: ignore[union-attr]
        os.kill(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130
    assert stdout == f"recorded 1 turns to {out}; 0 upstream errors\n"
    assert stderr.endswith("frank: interrupted; engines stopped\n")
    assert [t.turn_id for t in load_trace(out).turns] == ["cli-0000"]


# ---------------------------------------------------------------- in front of the real llama-server


@pytest.mark.engine
def test_recording_in_front_of_the_real_llama_server(tiny_recipe: Any, tmp_path: Path) -> None:
    from frankenstein.engines import start_engine

    body = {
        "messages": [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Print hello."}],
        "max_tokens": 12,
        "temperature": 0.0,
        "seed": 1,
    }
    with (
        start_engine(tiny_recipe, tmp_path / "logs") as eng,
        serve_recorder(eng.base_url, "127.0.0.1", 0, tmp_path / "t.jsonl") as proxy,
    ):
        plain = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=60).json()
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body | {"stream": True}, timeout=60) as r:
            raw = r.read()
        tokens = httpx.post(proxy.url + "/tokenize", json={"content": "Print hello."}, timeout=60).json()["tokens"]
        assert tokens == eng.tokenize("Print hello.")
        assert proxy.errors == []
    t_plain, t_stream = load_trace(tmp_path / "t.jsonl").turns
    assert t_plain.request == body and t_stream.request == body | {"stream": True}
    assert t_plain.output.text == plain["choices"][0]["message"]["content"] != ""
    assert (
        t_plain.output.completion_tokens == plain["usage"]["completion_tokens"] == t_plain.timings.server["predicted_n"]
    )
    # Temperature 0: the streamed turn generated the same text, relayed to the client as recorded.
    assert t_stream.output.text == t_plain.output.text == sse_text(raw)
    assert (t_stream.output.prompt_tokens, t_stream.output.completion_tokens) == (
        t_plain.output.prompt_tokens,
        t_plain.output.completion_tokens,
    )
    assert t_stream.output.finish_reason == t_plain.output.finish_reason
    assert 0 < t_stream.timings.ttft_ms <= t_stream.timings.e2e_ms
    assert (t_plain.session_id, t_stream.turn_index) == (t_stream.session_id, 1)


# ---------------------------------------------------------------- bad input, load, credentials (issue 16)


def raw_exchange(url: str, data: bytes) -> bytes:
    """Send raw bytes, read the answer until the server closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


NESTED = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


@pytest.mark.parametrize(
    ("length", "status"), [(b"-5", 400), (b"abc", 400), (b"1.5", 400), (b"+3", 400), (b"99999999999999", 413)]
)
def test_malformed_content_length_gets_400_not_a_traceback(
    proxy: Any, capfd: pytest.CaptureFixture[str], length: bytes, status: int
) -> None:
    answer = raw_exchange(
        proxy.url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n{}"
    )
    assert answer.startswith(b"HTTP/1.1 %d" % status), answer[:200]
    assert b"Content-Length" in answer
    assert "Traceback" not in capfd.readouterr().err
    assert httpx.post(proxy.url + "/v1/chat/completions", json=chat("still up")).status_code == 200


def test_a_body_above_the_recorders_limit_is_answered_413(upstream: Any, tmp_path: Path) -> None:
    with serve_recorder(upstream.url, "127.0.0.1", 0, tmp_path / "t.jsonl", max_body_bytes=4096) as srv:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n"
        assert raw_exchange(srv.url, head).startswith(b"HTTP/1.1 413")
        r = httpx.post(srv.url + "/v1/chat/completions", json=chat("x" * 5000))
        assert r.status_code == 413 and "limit of 4096 bytes" in r.json()["error"]["message"]
        assert httpx.post(srv.url + "/v1/chat/completions", json=chat("small")).status_code == 200
    assert [p for _, p, _, _ in upstream.received] == ["/v1/chat/completions"]  # only the small one went on


def test_deeply_nested_json_gets_400_not_a_traceback(proxy: Any, capfd: pytest.CaptureFixture[str]) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(NESTED)
    answer = raw_exchange(proxy.url, head + NESTED)
    assert answer.startswith(b"HTTP/1.1 400") and b"nested too deeply" in answer, answer[:200]
    assert "Traceback" not in capfd.readouterr().err
    assert load_trace(proxy.recorder.out).turns == () if proxy.recorder.out.exists() else True


class _DeepUpstream(ThreadingHTTPServer):
    request_queue_size = 4096  # the stand-in must not be the bottleneck
    daemon_threads = True


def test_many_simultaneous_clients_are_all_answered(tmp_path: Path) -> None:
    """300 clients connect at once (a burst far above the standard library's backlog of 5): every
    one is accepted and answered, none reset, and every turn is recorded."""
    up = _DeepUpstream(("127.0.0.1", 0), FakeOpenAI)
    up.received, up.release = [], threading.Event()  # type: ignore[attr-defined]
    threading.Thread(target=up.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    n = 300
    srv = serve_recorder(f"http://127.0.0.1:{up.server_address[1]}", "127.0.0.1", 0, tmp_path / "t.jsonl")
    assert srv._httpd.request_queue_size >= 1024
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    body = json.dumps({"model": "m", "prompt": "x", "max_tokens": 3}).encode()
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )

    def client(i: int) -> None:
        barrier.wait()
        try:
            results[i] = raw_exchange(srv.url, request)[:12]
        except OSError as exc:
            results[i] = exc

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [r for r in results if r != b"HTTP/1.1 200"] == []
        assert srv.recorder.recorded == n and not srv.errors
    finally:
        srv.shutdown()
        up.shutdown()
        up.server_close()


def test_credentials_outside_what_the_model_sees_are_removed_and_listed(upstream: Any, proxy: Any) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "login",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "password": {"type": "string"},
                        "api_key": {"type": "string"},
                        "token": {"type": "string"},
                    },
                },
            },
        }
    ]
    messages = [{"role": "user", "content": "my password is hunter2", "token": "kept: part of the prompt"}]
    body = {
        "model": "m",
        "messages": messages,
        "tools": tools,
        "max_tokens": 3,
        "token": SECRET,
        "refresh_token": SECRET,
        "private_key": SECRET,
        "password": SECRET,
        "secret": SECRET,
        "metadata": {
            "user": "u1",
            "api_keys": [SECRET, SECRET],
            "github_token": SECRET,
            "db_secret": SECRET,
            "session_key": SECRET,
        },
        "prompt_cache_key": "c1",
    }
    headers = {"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET, "Cookie": f"sid={SECRET}"}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200
    _, _, up_headers, raw = upstream.received[-1]
    assert json.loads(raw) == body and up_headers["X-Api-Key"] == SECRET  # the upstream got everything
    text = proxy.recorder.out.read_text()
    assert SECRET not in text and "hunter2" in text
    (turn,) = load_trace(proxy.recorder.out).turns
    assert turn.request["messages"] == messages and turn.request["tools"] == tools  # the prompt, byte for byte
    assert turn.request["metadata"] == {"user": "u1"} and turn.request["prompt_cache_key"] == "c1"
    assert sorted(turn.redacted or []) == sorted(
        [
            "token",
            "refresh_token",
            "private_key",
            "password",
            "secret",
            "metadata.api_keys",
            "metadata.github_token",
            "metadata.db_secret",
            "metadata.session_key",
        ]
    )


def test_a_client_that_resets_mid_request_prints_no_traceback(tmp_path: Path, capfd) -> None:
    """A client gone mid-body (TCP reset) is normal under load: the proxy prints nothing, and keeps serving."""
    import socket
    import struct

    with serve_recorder("http://127.0.0.1:9", "127.0.0.1", 0, tmp_path / "t.jsonl") as srv:
        host, port = srv.url.removeprefix("http://").rsplit(":", 1)
        for _ in range(3):
            s = socket.create_connection((host, int(port)))
            s.sendall(b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"mod')
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            s.close()
        with socket.create_connection((host, int(port))) as s:  # still serving: a bad length gets its 400
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
            assert b" 400 " in s.recv(64).split(b"\r\n")[0]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err, err


def test_a_generation_body_that_is_not_utf8_json_is_forwarded_and_said_not_recorded(proxy: Any, tmp_path: Path) -> None:
    """Never a silent gap in the trace: the request goes on, and the recorder says it did not record it."""
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=b'{"model": "tiny", "x": "\xff"}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code in (200, 400, 502)  # whatever the upstream (a test double here) makes of it
    assert any("not a UTF-8 JSON object; passed through, not recorded" in e for e in proxy.errors), proxy.errors
    assert not (tmp_path / "trace.jsonl").exists() or (tmp_path / "trace.jsonl").read_text() == ""


def test_credentials_named_any_way_are_removed_and_the_export_is_private(
    upstream: Any, proxy: Any, tmp_path: Path
) -> None:
    """camelCase and dashed credential names and everything under ``extra_headers`` reached the trace and the
    AIPerf export, which was written 0644 (issue 30): names are normalised before they are matched, header
    fields go whole, and the export is 0600 like the trace."""
    body = chat(
        "hi",
        accessToken=SECRET,
        clientSecret=SECRET,
        authToken=SECRET,
        metadata={"api-key": SECRET, "X-Auth-Token": SECRET, "sessionID": "kept", "max_tokens": 3},
        extra_headers={"X-Custom": SECRET, "Authorization": f"Bearer {SECRET}"},
        user="u1",
    )
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body).status_code == 200
    text = proxy.recorder.out.read_text()
    assert SECRET not in text and "kept" in text
    (turn,) = load_trace(proxy.recorder.out).turns
    assert sorted(turn.redacted or []) == sorted(
        ["accessToken", "clientSecret", "authToken", "metadata.api-key", "metadata.X-Auth-Token", "extra_headers"]
    )
    assert turn.request["metadata"] == {"sessionID": "kept", "max_tokens": 3} and turn.request["user"] == "u1"
    assert os.stat(proxy.recorder.out).st_mode & 0o777 == 0o600
    out = tmp_path / "aiperf.jsonl"
    out.write_text("")  # an existing file keeps no looser mode either
    os.chmod(out, 0o644)
    write_export(out, export_workload(load_trace(proxy.recorder.out), "aiperf"))
    assert SECRET not in out.read_text() and os.stat(out).st_mode & 0o777 == 0o600


# ---------------------------------------------------------------- durability off the request path (issue 33)


@pytest.mark.parametrize("after_answer", [False, True], ids=["turn-before-answer", "turn-after-answer"])
def test_kill_9_of_frank_record_mid_burst_loses_no_completed_turn(
    upstream: Any, tmp_path: Path, after_answer: bool
) -> None:
    """Four clients send turns back to back through the real ``frank record``; after 40 answers it is killed
    with SIGKILL. Every turn a client received in full is in the trace (written before the end of its
    response; the fsync is the writer thread's), the trace loads (no half line), and nothing else is there.
    With ``--turn-after-answer`` at most the turns in flight are lost: one per client, whose answer was sent
    and whose line was not yet written."""
    out = tmp_path / "burst.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "frankenstein", "record", "--upstream", upstream.url, "--listen", "127.0.0.1:0"]
        + ["--out", str(out)]
        + (["--turn-after-answer"] if after_answer else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    url = proc.stdout.readline().split()[1]  # type: ignore[union-attr]
    burst = Burst(url + "/v1/chat/completions", lambda stream: chat("hi", stream=stream))
    kill_9_mid_burst(proc, burst, 40, 60, group=False)
    recorded = {t.session_id for t in load_trace(out).turns}
    assert len(burst.done) >= 40 and burst.refused == []
    assert len(set(burst.done) - recorded) <= (4 if after_answer else 0) and recorded <= set(burst.sent)


def test_group_commit_syncs_every_turn_and_closes(tmp_path: Path) -> None:
    """Turns from eight threads at once: all in the file, each line whole; the writer thread's fsyncs cover
    them (never more fsyncs than turns); after close the file holds exactly the turns recorded."""
    rec = TurnRecorder(tmp_path / "g.jsonl")
    answer = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {}}
    output = output_from_response("/v1/chat/completions", answer)

    def many(w: int) -> None:
        for i in range(25):
            rec.record("/v1/chat/completions", chat(f"w{w} {i}"), f"w{w}", output, RecordedTimings(server={}))

    threads = [threading.Thread(target=many, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    turns = load_trace(tmp_path / "g.jsonl").turns
    assert len(turns) == rec.recorded == 200
    assert sorted(t.turn_index for t in turns if t.session_id == "w3") == list(range(25))
    assert 1 <= rec.syncs <= 200


class OneShotUpstream(BaseHTTPRequestHandler):
    """TEST DOUBLE of an engine that closes each kept-alive connection right after answering, without saying
    so (no ``Connection: close``): the race llama-server can produce, on every request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        data = json.dumps(
            {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 1}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


def test_kept_alive_upstream_connections_closed_by_the_engine_are_retried(tmp_path: Path) -> None:
    """Every reused upstream connection has been closed by the engine: each request is still answered 200 and
    recorded once, none reported as an upstream error; an engine that keeps connections open gets one reused."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), OneShotUpstream)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with serve_recorder(f"http://127.0.0.1:{srv.server_address[1]}", out=tmp_path / "t.jsonl") as proxy:
            with httpx.Client(timeout=10) as http:
                codes = [
                    http.post(proxy.url + "/v1/chat/completions", json=chat(f"q{i}")).status_code for i in range(20)
                ]
            assert codes == [200] * 20
            assert proxy.errors == []
            # every answer's connection was found closed: dropped (at give-back or before reuse) or, in the race,
            # its next request sent again; each of those opened one fresh connection, after the first
            pool = proxy.pool
            assert 19 <= pool.dropped + pool.resent <= 20 and pool.opened == 1 + pool.dropped + pool.resent
    finally:
        srv.shutdown()
        srv.server_close()
    assert len(load_trace(tmp_path / "t.jsonl").turns) == 20


def test_upstream_connections_are_reused(upstream: Any, proxy: Any) -> None:
    with httpx.Client(timeout=10) as http:
        for i in range(10):
            assert (
                http.post(proxy.url + "/v1/chat/completions", json=chat(f"q{i}", stream=i % 2 == 1)).status_code == 200
            )
            assert http.post(proxy.url + "/tokenize", json={"content": "x"}).status_code == 200
    assert proxy.pool.opened == 1


# ---------------------------------------------------------------- one writer per trace, one write per turn (issue 33)

OK_OUTPUT = output_from_response("/v1/chat/completions", {"choices": [{"message": {"content": "ok"}}], "usage": {}})


def test_a_trace_being_recorded_is_refused_to_a_second_writer_until_the_first_closes(
    upstream: Any, tmp_path: Path
) -> None:
    """The recorder holds its trace's lock from its first turn to its close: a second recorder, the real
    ``frank record`` and ``append_turn`` are refused with one line naming the file (never two writers
    interleaving, nor a stale turn index); once closed, the next recorder takes the file and goes on."""
    out = tmp_path / "t.jsonl"
    first = TurnRecorder(out)
    first.record("/v1/chat/completions", chat("a"), "s", OK_OUTPUT, RecordedTimings())
    with pytest.raises(TraceError) as info:
        TurnRecorder(out)
    assert str(info.value) == f"{out}: another writer (a running frank record?) is appending to it"
    with pytest.raises(TraceError, match="locked by another writer"):
        append_turn(out, load_trace(out).turns[0].model_copy(update={"turn_id": "x", "turn_index": 9}), wait_s=0.05)
    cli = frank("record", "--upstream", upstream.url, "--listen", "127.0.0.1:0", "--out", str(out), timeout=60)
    assert cli.returncode != 0 and "Traceback" not in cli.stderr
    assert f"{out}: another writer (a running frank record?) is appending to it" in cli.stderr
    first.record("/v1/chat/completions", chat("b"), "s", OK_OUTPUT, RecordedTimings())
    first.close()
    second = TurnRecorder(out)
    second.record("/v1/chat/completions", chat("c"), "s", OK_OUTPUT, RecordedTimings())
    second.close()
    assert [t.turn_id for t in load_trace(out).turns] == ["s-0000", "s-0001", "s-0002"]


def test_two_recording_proxies_started_on_one_new_trace_never_both_write_it(upstream: Any, tmp_path: Path) -> None:
    """Neither holds the file before its first turn: the first to record takes it; the other's turns are
    relayed, said and not written (the trace stays one writer's, whole)."""
    out = tmp_path / "t.jsonl"
    with serve_recorder(upstream.url, out=out) as a, serve_recorder(upstream.url, out=out) as b:
        assert httpx.post(a.url + "/v1/chat/completions", json=chat("one")).status_code == 200
        r = httpx.post(b.url + "/v1/chat/completions", json=chat("two"))
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello world!"
        assert httpx.post(a.url + "/v1/chat/completions", json=chat("three")).status_code == 200
        assert b.errors == [f"turn not recorded: {out}: another writer (a running frank record?) is appending to it"]
    assert [t.request["messages"][-1]["content"] for t in load_trace(out).turns] == ["one", "three"]


def test_a_short_write_is_removed_and_the_turn_refused(tmp_path: Path) -> None:
    """A file size limit (``RLIMIT_FSIZE``) cuts the turn's one ``write`` short in a real process: the part
    written is truncated away, the turn refused as a :class:`TraceError`, the trace as it was."""
    out = tmp_path / "t.jsonl"
    first = TurnRecorder(out)
    first.record("/v1/chat/completions", chat("a"), "s", OK_OUTPUT, RecordedTimings())
    first.close()
    before = out.read_bytes()
    script = (
        "import resource, signal, sys\n"
        "from frankenstein.engines.response import output_from_response\n"
        "from frankenstein.errors import TraceError\n"
        "from frankenstein.workload.record import TurnRecorder\n"
        "from frankenstein.workload.trace import RecordedTimings\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "rec = TurnRecorder(sys.argv[1])\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]) + 40, resource.RLIM_INFINITY))\n"
        "out = output_from_response('/v1/chat/completions', {'choices': [{'message': {'content': 'ok'}}]})\n"
        "body = {'messages': [{'role': 'user', 'content': 'b'}]}\n"
        "try:\n"
        "    rec.record('/v1/chat/completions', body, 's', out, RecordedTimings())\n"
        "except TraceError as exc:\n"
        "    print(exc)\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(out), str(len(before))], capture_output=True, text=True)
    assert run.stdout.startswith(f"{out}: short write (40 of "), run.stderr
    assert run.stdout.endswith(" bytes); the line was removed again\n")
    assert out.read_bytes() == before


def test_a_generation_request_no_turn_can_hold_is_relayed_said_and_not_recorded(upstream: Any, proxy: Any) -> None:
    """The checks a turn makes of its request run while the engine works (the recorder builds no Turn): a chat
    without messages is answered by the engine as it came, said once, and leaves the trace untouched."""
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "tiny", "prompt": "hi"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello world!"
    assert proxy.errors == ["turn not recorded: a chat completions request needs a non-empty 'messages' list"]
    assert not proxy.recorder.out.exists()


@pytest.mark.parametrize(
    "data",
    [
        b'{"choices": []}',
        b'{"choices": []}\n',
        b' \r\n{"a": 1} ',
        b'{"a": NaN, "b": -Infinity}',
        b'{"a": 1}{"b": 2}',
        b'{"a": 1} x',
        b'[1, {"a": 2}]',
        b'"text"',
        b"",
        b"   ",
        b"\xef\xbb\xbf" + b'{"bom": true}',
        '{"é": "\u2028"}'.encode("utf-16"),
        '{"é": "x"}'.encode("latin-1"),
        b'{"s": "\\ud800"}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
        b'{"a": 1',
    ],
)
def test_a_body_or_answer_is_read_as_the_json_reader_reads_it(data: bytes) -> None:
    """The recorder reads a request body and an engine's JSON answer through the decoder's scanner at once (no
    encoding detection, no whitespace skipping): whatever the bytes, it makes of them what ``json.loads`` does
    (an object, None for anything else, too deep nesting a :class:`BadRequest`)."""
    outcomes = []
    for read in (_json_object, _plain_json_object):
        try:
            outcomes.append(json.dumps(read(data)))  # NaN != NaN: compared as text
        except BadRequest as exc:
            outcomes.append(f"BadRequest: {exc}")
    assert outcomes[0] == outcomes[1]


class OddEngineTestDouble(BaseHTTPRequestHandler):
    """TEST DOUBLE of an engine that answers every POST with ``server.answer``: JSON bytes with a length, or a
    list of SSE event objects sent chunked (then ``[DONE]`` and the final chunk)."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        answer = self.server.answer
        self.send_response(200)
        if isinstance(answer, bytes):
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            return
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in [json.dumps(e).encode() for e in answer] + [b"[DONE]"]:
            data = b"data: " + event + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")


def _delta(delta: Any, finish: Any = "stop", **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


ODD_ANSWERS = [
    ({"choices": [{"message": {"content": "x"}, "finish_reason": 7}]}, "finish_reason: Input should be a valid string"),
    ({"choices": {"a": 1}}, "KeyError: 0"),
    ({"choices": ["x"]}, "AttributeError: 'str' object has no attribute 'get'"),
    ({"choices": [{"message": {"tool_calls": [5]}}]}, "AttributeError: 'int' object has no attribute 'get'"),
    ({"choices": [{"message": {"content": "x"}}], "usage": [1]}, "AttributeError: 'list' object has no attribute"),
    ({"choices": [{"message": {"content": "x"}, "token_ids": "abc"}]}, "token_ids: Input should be a valid list"),
    ([_delta({"content": "x"}, 7)], "finish_reason: Input should be a valid string"),
    ([_delta({"content": 5})], "TypeError: "),
    ([_delta({"tool_calls": [{"index": 0, "function": {"arguments": 5}}]})], "TypeError: "),
    ([_delta("x")], "AttributeError: 'str' object has no attribute 'get'"),
]


@pytest.mark.parametrize(
    ("answer", "why"), [(json.dumps(a).encode() if isinstance(a, dict) else a, w) for a, w in ODD_ANSWERS]
)
def test_an_answer_our_decoder_cannot_read_is_relayed_whole_said_and_not_recorded(
    answer: Any, why: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An engine (an untrusted part) answers in a shape our decoder refuses or cannot read: a number where
    text belongs, a string where an object does, streamed or not. The client still gets the whole answer as
    the engine sent it (the final chunk included), the turn is said as not recorded in one line, no
    traceback, nothing is written."""
    engine = ThreadingHTTPServer(("127.0.0.1", 0), OddEngineTestDouble)
    engine.answer = answer  # type: ignore[attr-defined]
    threading.Thread(target=engine.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with serve_recorder(f"http://127.0.0.1:{engine.server_address[1]}", out=tmp_path / "t.jsonl") as srv:
            r = httpx.post(srv.url + "/v1/chat/completions", json=chat("hi", stream=not isinstance(answer, bytes)))
            errors = list(srv.errors)
    finally:
        engine.shutdown()
        engine.server_close()
    assert r.status_code == 200
    if isinstance(answer, bytes):
        assert r.content == answer
    else:
        assert r.content.endswith(b"data: [DONE]\n\n") and r.content.count(b"data: ") == len(answer) + 1
    assert len(errors) == 1 and errors[0].startswith(
        "turn not recorded: the engine's answer on /v1/chat/completions is not one a trace holds ("
    )
    assert why in errors[0], errors
    assert "Traceback" not in capfd.readouterr().err
    assert not (tmp_path / "t.jsonl").exists()


def test_a_recorder_refused_at_its_start_lets_the_trace_go(upstream: Any, tmp_path: Path) -> None:
    """A recorder that takes an existing trace at its start and is then refused (an invalid trace, a busy
    port) lets it go again: the next recorder is refused for the trace's own fault, or takes it."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"frank_trace": 1}\n')
    for _ in range(2):  # the second time is the same message, not "another writer"
        with pytest.raises(TraceError, match="line 1: turn_id: missing"):
            TurnRecorder(bad)
    out = tmp_path / "t.jsonl"
    rec = TurnRecorder(out)
    rec.record("/v1/chat/completions", chat("a"), "s", OK_OUTPUT, RecordedTimings())
    rec.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(FrankError, match="cannot listen on"):
            serve_recorder(upstream.url, "127.0.0.1", s.getsockname()[1], out)
    with serve_recorder(upstream.url, out=out) as srv:
        httpx.post(srv.url + "/v1/chat/completions", json=chat("b"), headers={"X-Frank-Session": "s"})
    assert [t.turn_id for t in load_trace(out).turns] == ["s-0000", "s-0001"]


@pytest.mark.parametrize("answer", [b"1", b"{}"])
def test_a_tiny_answer_reaches_the_client_head_first(answer: bytes, tmp_path: Path) -> None:
    """The last byte goes straight to the socket: an answer of one byte (all of it the last byte) still follows
    its head, and one of two bytes (``{}``, an object with nothing to record) is whole."""
    engine = ThreadingHTTPServer(("127.0.0.1", 0), OddEngineTestDouble)
    engine.answer = answer  # type: ignore[attr-defined]
    threading.Thread(target=engine.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with serve_recorder(f"http://127.0.0.1:{engine.server_address[1]}", out=tmp_path / "t.jsonl") as srv:
            with socket.create_connection(("127.0.0.1", int(srv.url.rsplit(":", 1)[1])), timeout=10) as s:
                body = json.dumps(chat("hi")).encode()
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n")
                s.sendall(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                got = b""
                while chunk := s.recv(65536):
                    got += chunk
    finally:
        engine.shutdown()
        engine.server_close()
    assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"\r\n\r\n" + answer)
