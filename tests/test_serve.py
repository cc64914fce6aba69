"""``frank serve``: the front answers counts from the region cache over real HTTP on 127.0.0.1,
passes everything else through (SSE relayed as it arrives), and ``frank serve`` starts the served
recipe's real llama-server, records turns, and reaps the engine on SIGTERM."""

from __future__ import annotations

import json
import socket
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import pids_of
from helpers_record import Burst, kill_9_mid_burst
from tokenizers import Tokenizer

from frankenstein.campaign import init_campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.process import free_port
from frankenstein.errors import FrankError
from frankenstein.regioncache import RegionCache
from frankenstein.regioncache.proxy import Front, start_front
from frankenstein.regioncache.render import Renderer, find_template
from frankenstein.regioncache.service import ServeOptions, serving
from frankenstein.shipped import data_path
from frankenstein.workload.listener import MAX_BODY_BYTES
from frankenstein.workload.trace import load_trace

TOKENIZER = data_path("tiny-tokenizer.json")
MODEL = data_path("tiny-target.gguf")


@cache
def tok() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZER))


def big_text(i: int) -> str:
    lines = [f"def f_{i}_{k}(x):\n    return x * {k} + {i}  # line {k}\n\n" for k in range(600)]
    return f"<|im_start|>user\nfile {i}\n" + "".join(lines) + "<|im_end|>\n"


# ------------------------------------------------------------------ a test double for the engine
class EngineTestDouble(ThreadingHTTPServer):
    """A test double standing in for an OpenAI-compatible engine where the real one is not needed:
    ``/tokenize`` with a given tokenizer, an SSE stream whose second event is held back until the
    test releases it (to prove the front relays events as they arrive), and ``/echo``."""

    daemon_threads = True

    def __init__(self, tokenizer: Tokenizer) -> None:
        super().__init__(("127.0.0.1", 0), _DoubleHandler)
        self.tokenizer = tokenizer
        self.release = threading.Event()
        self.seen: list[tuple[str, str, bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _DoubleHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EngineTestDouble

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.seen.append(("GET", self.path, b""))
        self._send(200, {"status": "ok", "path": self.path})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(("POST", self.path, raw))
        if self.path == "/tokenize":
            body = json.loads(raw)
            if body.get("with_pieces") or "content" not in body:
                self._send(200, {"tokens": [], "from": "engine"})
                return
            self._send(200, {"tokens": self.server.tokenizer.encode(body["content"], add_special_tokens=False).ids})
        elif self.path == "/v1/chat/completions":
            self._stream()
        elif self.path == "/v1/messages/count_tokens":
            self._send(200, {"input_tokens": -1, "from": "engine"})
        else:
            self._send(200, {"echo": raw.decode(), "x_test": self.headers.get("X-Test")})

    def _stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, part in enumerate(["Hel", "lo", "[DONE]"]):
            if i == 1:
                self.server.release.wait(timeout=30)
            data = (f"data: {part}\n\n" if part == "[DONE]" else f"data: {json.dumps({'delta': part})}\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def double() -> Iterator[EngineTestDouble]:
    srv = EngineTestDouble(tok())
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def front(double: EngineTestDouble) -> Iterator[Front]:
    renderer = Renderer(find_template(TOKENIZER, MODEL))
    with start_front(double.url, RegionCache(tok()), renderer=renderer) as f:
        yield f


# ------------------------------------------------------------------ answered from the cache
def test_tokenize_and_count_are_answered_locally(front: Front, double: EngineTestDouble) -> None:
    text = big_text(1)
    want = tok().encode(text, add_special_tokens=False).ids
    with httpx.Client(base_url=front.url, trust_env=False) as c:
        assert c.post("/tokenize", json={"content": text}).json() == {"tokens": want}
        assert c.post("/count", json={"content": text}).json() == {"count": len(want)}
        assert c.post("/count", json={"content": text, "add_special": True}).json() == {"count": len(want)}
        st = c.get("/frank/status").json()
    assert double.seen == []
    assert st["local_answers"] == 3 and st["enabled"] and st["chunks_hit"] > 0


def test_with_pieces_goes_to_the_engine(front: Front, double: EngineTestDouble) -> None:
    r = httpx.post(front.url + "/tokenize", json={"content": "hi", "with_pieces": True}, trust_env=False)
    assert r.json() == {"tokens": [], "from": "engine"}


def test_another_engines_tokenize_shape_goes_to_the_engine(front: Front, double: EngineTestDouble) -> None:
    """A vLLM or SGLang client behind frank serve sends ``{"prompt"}`` (or ``{"messages"}``) and reads ``count`` and
    ``max_model_len``, which only the engine knows: the front passes it through instead of refusing it."""
    for body in ({"prompt": "hi", "add_special_tokens": True}, {"messages": [{"role": "user", "content": "hi"}]}):
        r = httpx.post(front.url + "/tokenize", json=body, trust_env=False)
        assert r.status_code == 200 and r.json() == {"tokens": [], "from": "engine"}, body


def test_bad_requests_say_what_is_wrong(front: Front) -> None:
    with httpx.Client(base_url=front.url, trust_env=False) as c:
        r = c.post("/count", json={"content": 5})
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "'content' must be a string"
        r = c.post("/count", content=b"not json")
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("body is not JSON: ")
        r = c.post("/tokenize", json={"content": "x", "add_special": "yes"})
        assert r.json()["error"]["message"] == "'add_special' must be true or false"


def _raw(url: str, data: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize("path", ["/count", "/v1/chat/completions", "/anything"])
@pytest.mark.parametrize("length", [b"-1", b"twelve", b"1e3"])
def test_malformed_content_length_gets_400(
    front: Front, capfd: pytest.CaptureFixture[str], path: str, length: bytes
) -> None:
    answer = _raw(
        front.url, b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + b"\r\n\r\n{}"
    )
    assert answer.startswith(b"HTTP/1.1 400") and b"Content-Length" in answer, answer[:200]
    assert "Traceback" not in capfd.readouterr().err


def test_a_body_above_the_limit_is_answered_413_unread(double: EngineTestDouble, capfd) -> None:
    """A 100 MB /count body took 51 s of CPU with no limit (issue 30): a Content-Length above the front's limit is
    answered 413 before a byte of the body is read, in milliseconds; a body at the limit is counted as before."""
    with start_front(double.url, RegionCache(tok()), max_body_bytes=1 << 20) as f:
        t0 = time.perf_counter()
        answer = _raw(f.url, b"POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n")
        assert time.perf_counter() - t0 < 2.0
        assert answer.startswith(b"HTTP/1.1 413") and b"above this server's limit of 1048576 bytes" in answer
        text = "a" * ((1 << 20) - 20)
        r = httpx.post(f.url + "/count", json={"content": text}, trust_env=False)
        assert r.status_code == 200 and r.json()["count"] > 0
        r = httpx.post(f.url + "/v1/chat/completions", json={"content": text + "a" * 40}, trust_env=False)
        assert r.status_code == 413 and double.seen == []  # refused before anything went upstream
    assert "Traceback" not in capfd.readouterr().err


def test_serve_record_takes_the_bodies_its_front_takes(double: EngineTestDouble, tmp_path: Path) -> None:
    """``--max-body-mb`` above the default: the recorder behind the front (``--record``) was started with the
    default limit, so a body between the two reached the front and was answered 413 by the recorder. Both hops
    take it now, and the engine gets it whole."""
    body = b'{"input": "' + b"a" * MAX_BODY_BYTES + b'"}'
    opts = ServeOptions(upstream=double.url, tokenizer=TOKENIZER, listen="127.0.0.1:0", record=tmp_path / "t.jsonl")
    with serving(replace(opts, max_body_bytes=MAX_BODY_BYTES + (1 << 20)), echo=lambda s: None) as front:
        r = httpx.post(front.url + "/v1/embeddings", content=body, trust_env=False, timeout=60)
    assert r.status_code == 200, r.text[:200]
    assert double.seen[-1] == ("POST", "/v1/embeddings", body)


def test_deeply_nested_json_gets_400(front: Front, capfd: pytest.CaptureFixture[str]) -> None:
    nested = b'{"content":' * 100_000 + b'"x"' + b"}" * 100_000
    answer = _raw(
        front.url,
        b"POST /count HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(nested), nested),
    )
    assert answer.startswith(b"HTTP/1.1 400") and b"nested too deeply" in answer, answer[:200]
    assert "Traceback" not in capfd.readouterr().err
    assert front.server.request_queue_size >= 1024  # a deep accept backlog (see workload/listener.py)


def test_anthropic_count_tokens_renders_with_the_chat_template(front: Front, double: EngineTestDouble) -> None:
    body = {
        "model": "m",
        "system": [{"type": "text", "text": "Be terse."}],
        "messages": [{"role": "user", "content": "Hello there"}],
    }
    rendered = (
        "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
    )
    r = httpx.post(front.url + "/v1/messages/count_tokens", json=body, trust_env=False)
    assert r.json() == {"input_tokens": len(tok().encode(rendered, add_special_tokens=False).ids)}
    assert double.seen == []


def test_anthropic_images_go_to_the_engine(front: Front, double: EngineTestDouble) -> None:
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}],
            }
        ],
    }
    r = httpx.post(front.url + "/v1/messages/count_tokens", json=body, trust_env=False)
    assert r.json() == {"input_tokens": -1, "from": "engine"}


def test_concurrent_requests_give_exact_counts(front: Front) -> None:
    texts = [big_text(i) + "x" * i for i in range(24)]
    want = [len(tok().encode(t, add_special_tokens=False).ids) for t in texts]

    def ask(i: int) -> int:
        with httpx.Client(base_url=front.url, trust_env=False) as c:
            got = [c.post("/count", json={"content": texts[i]}).json()["count"] for _ in range(3)]
            assert len(set(got)) == 1
            return got[0]

    with ThreadPoolExecutor(max_workers=12) as pool:
        assert list(pool.map(ask, range(len(texts)))) == want


# ------------------------------------------------------------------ passed through
def test_other_paths_and_methods_pass_through_with_headers(front: Front, double: EngineTestDouble) -> None:
    with httpx.Client(base_url=front.url, trust_env=False) as c:
        r = c.post("/v1/embeddings?x=1", content=b'{"input": "abc"}', headers={"X-Test": "kept"})
        assert r.json() == {"echo": '{"input": "abc"}', "x_test": "kept"}
        assert c.get("/health").json() == {"status": "ok", "path": "/health"}
    assert [(m, p) for m, p, _ in double.seen] == [("POST", "/v1/embeddings?x=1"), ("GET", "/health")]


def test_sse_events_are_relayed_as_they_arrive(front: Front, double: EngineTestDouble) -> None:
    """The engine holds its second event until the client has read the first through the front."""
    events: list[str] = []
    with httpx.Client(trust_env=False, timeout=30) as c:
        with c.stream("POST", front.url + "/v1/chat/completions", json={"stream": True}) as r:
            assert r.headers["content-type"] == "text/event-stream"
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    double.release.set()  # only now may the engine send the rest
    assert events == ['{"delta": "Hel"}', '{"delta": "lo"}', "[DONE]"]


def test_upstream_down_is_a_502(tmp_path: Path) -> None:
    port = free_port()
    with start_front(f"http://127.0.0.1:{port}", RegionCache(tok())) as f:
        r = httpx.get(f.url + "/health", trust_env=False)
        assert r.status_code == 502
        assert r.json()["error"]["message"].startswith(f"upstream http://127.0.0.1:{port}: ")
        want = len(tok().encode("ok", add_special_tokens=False).ids)
        assert httpx.post(f.url + "/count", json={"content": "ok"}, trust_env=False).json() == {"count": want}


def test_a_tokenizer_that_does_not_match_the_engine_is_refused(double: EngineTestDouble, tmp_path: Path) -> None:
    from frankenstein.regioncache import reference as ref

    other = tmp_path / "other.json"
    ref.build("llama3", ref.synthetic_corpus(seed=2, docs=200), vocab_size=400).save(str(other))
    with pytest.raises(FrankError, match=f"--tokenizer {other} does not match the engine's tokenizer: 'Hello world"):
        with serving(ServeOptions(upstream=double.url, tokenizer=other, listen="127.0.0.1:0"), echo=lambda s: None):
            pass


# ------------------------------------------------------------------ the real engine
@pytest.mark.engine
def test_front_agrees_with_real_llama_server(tiny_recipe: ResolvedRecipe, tmp_path: Path) -> None:
    with (
        start_engine(tiny_recipe, tmp_path) as eng,
        serving(
            ServeOptions(upstream=eng.base_url, tokenizer=TOKENIZER, listen="127.0.0.1:0"), echo=lambda s: None
        ) as f,
        httpx.Client(trust_env=False, timeout=60) as c,
    ):
        odd = "a\r\n\r\n  b\u00a0\u3000c 数字 😀 e\u0301"
        for text in [big_text(3), odd, "<|im_start|>user\n\n\n  x<|im_end|>"]:
            assert (
                c.post(f.url + "/tokenize", json={"content": text}).json()
                == c.post(eng.base_url + "/tokenize", json={"content": text}).json()
            )
        for body in ANTHROPIC_BODIES:
            ours = c.post(f.url + "/v1/messages/count_tokens", json=body).json()
            theirs = c.post(eng.base_url + "/v1/messages/count_tokens", json=body).json()
            assert ours == theirs, body
        with c.stream(
            "POST",
            f.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True},
        ) as r:
            lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
        assert lines[-1] == "data: [DONE]" and len(lines) >= 3
        assert f.server.local_answers == 3 + len(ANTHROPIC_BODIES)


ANTHROPIC_BODIES: list[dict[str, Any]] = [
    {"model": "m", "messages": [{"role": "user", "content": "Hello"}]},
    {
        "model": "m",
        "system": "You are terse.",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        ],
    },
    {
        "model": "m",
        "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        "messages": [{"role": "user", "content": "x\n\n  y"}],
    },
    {
        "model": "m",
        "tools": [
            {
                "name": "read",
                "description": "Read a file",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ],
        "messages": [
            {"role": "user", "content": "read a"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "data"}]},
        ],
    },
]


# ------------------------------------------------------------------ the CLI
def start_cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "frankenstein", "serve", *args],
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def wait_listening(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """(front URL, engine URL) from the line ``frank serve: listening on URL -> ENGINE ...``."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("frank serve: listening on "):
            words = line.split()
            return words[4], words[6]
    raise AssertionError(f"frank serve did not start: {proc.stderr.read() if proc.stderr else ''}")


@pytest.mark.engine
def test_frank_serve_campaign_records_and_reaps(tmp_path: Path, llama_server_bin: str) -> None:
    """The real CLI: campaign's served recipe, counts from the cache, a generation recorded, SIGTERM
    stops front and engine (exit 130), no llama-server left."""
    from frankenstein.campaign import init_campaign

    camp, rec, port = tmp_path / "camp", tmp_path / "turns.jsonl", free_port()
    init_campaign(camp).close()
    proc = start_cli("-c", str(camp), "--listen", f"127.0.0.1:{port}", "--record", str(rec), cwd=tmp_path)
    try:
        url, engine = wait_listening(proc)
        assert url == f"http://127.0.0.1:{port}"
        engine_port = engine.rsplit(":", 1)[1]
        assert pids_of(f"--port {engine_port}")  # the engine runs (so the check below can fail)
        with httpx.Client(base_url=url, trust_env=False, timeout=120) as c:
            text = big_text(5)
            want = len(tok().encode(text, add_special_tokens=False).ids)
            assert c.post("/count", json={"content": text}).json() == {"count": want}
            chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
            r = c.post("/v1/chat/completions", json=chat)
            assert r.status_code == 200 and r.json()["choices"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().endswith("frank: interrupted; engines stopped")
    turns = [json.loads(line) for line in rec.read_text().splitlines()]
    assert len(turns) == 1 and turns[0]["request"]["messages"] == [{"role": "user", "content": "Hi"}]
    assert pids_of(f"--port {engine_port}") == []


@pytest.mark.engine
def test_kill_9_of_frank_serve_record_mid_burst_loses_no_completed_turn(tmp_path: Path, llama_server_bin: str) -> None:
    """``frank serve --record`` of a campaign (it starts the real llama-server): four clients send turns back to back
    through its front and the recorder behind it, every other one streamed; after 40 answers its process group is
    killed with SIGKILL. Every turn a client received whole is in the trace (the front's hop ends no answer before
    the recorder wrote its turn), the trace loads, nothing else is there, and neither frank serve nor the engine it
    started is left running (the engine dies with its parent: ``PR_SET_PDEATHSIG``)."""
    camp, out = tmp_path / "camp", tmp_path / "turns.jsonl"
    init_campaign(camp).close()
    proc = start_cli("-c", str(camp), "--listen", "127.0.0.1:0", "--record", str(out), cwd=tmp_path)
    try:
        url, engine = wait_listening(proc)
        engine_running = f"--port {engine.rsplit(':', 1)[1]}"
        assert pids_of(engine_running)  # so the check below can fail
        burst = Burst(url + "/v1/chat/completions", lambda stream: CHAT_HI | {"stream": stream})
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    kill_9_mid_burst(proc, burst, 40, 120, group=True)
    recorded = {t.session_id for t in load_trace(out).turns}
    assert len(burst.done) >= 40 and burst.refused == []
    assert set(burst.done) <= recorded <= set(burst.sent)
    deadline = time.monotonic() + 10  # the kernel kills the orphaned engine: asynchronously, soon
    while pids_of(engine_running) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_of(engine_running) == [] and proc.returncode == -signal.SIGKILL


CHAT_HI = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def test_frank_serve_reports_a_missing_tokenizer(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "frankenstein",
            "serve",
            "--upstream",
            "http://127.0.0.1:9",
            "--tokenizer",
            str(tmp_path / "missing.json"),
            "--listen",
            "127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.strip() == f"frank: error: {tmp_path / 'missing.json'}: file not found"


def test_a_chat_template_is_compiled_once_and_renders_the_same_from_many_threads() -> None:
    """Compiled per render, the template cost milliseconds on every counted chat (``frank serve`` of a campaign with
    a context scope counted each chat's prompt before sending it: +8 ms at TTFT, benchmarks/proxy_overhead.py
    --scoped); now once per template, and a compiled template is shared by the handler threads."""
    template = find_template(TOKENIZER, MODEL)
    assert template is not None
    chats = [
        [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": "x" * i}] for i in range(64)
    ]
    serial = [template.render(c, None) for c in chats]
    compiled = template._compiled
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda c: template.render(c, None), chats)) == serial
    assert template._compiled is compiled and all(f"question {i}" in s for i, s in enumerate(serial))
