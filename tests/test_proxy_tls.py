"""``frank serve`` and ``frank record`` in front of an ``https://`` upstream: a real llama-server behind a TLS
terminator on 127.0.0.1 (:class:`tls_relay.TlsRelayTestDouble`), both commands started as real subprocesses
with ``SSL_CERT_FILE`` naming the terminator's self-signed certificate, so the default context trusts it.

Shown, for each of ``frank serve``, ``frank record`` and ``frank serve --record`` (the recorder inside serve's
process, between its front and the engine): a chat and a whole streamed chat with the content going direct gives,
and where a trace is kept, each in it as one turn with the output the client got; kept-alive TLS connections
reused (accepts counted at the terminator); the terminator closing its connections between requests
(with and without close_notify), each request still answered and reaching the engine exactly once; and an
upstream whose certificate is not trusted: a 502 to the client naming the refusal, a line from frank, no
hang and no traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from frankenstein.shipped import data_path
from frankenstein.workload.trace import Turn, load_trace

from tls_relay import TlsRelayTestDouble, llama_server, make_cert, server_context

pytestmark = pytest.mark.engine

TOKENIZER = data_path("tiny-tokenizer.json")
CHAT = {
    "messages": [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Print hello."}],
    "max_tokens": 24,
    "temperature": 0.0,
    "seed": 1,
}


@dataclass
class Proxy:
    """A running ``frank serve``, ``frank record`` or ``frank serve --record`` (its process, URL, stderr file
    and the trace it keeps, if any)."""

    kind: str
    proc: subprocess.Popen[str]
    url: str
    stderr: Path
    trace: Path | None

    def turns(self) -> list[Turn]:
        """The turns its trace holds now (none before the first)."""
        assert self.trace is not None
        return list(load_trace(self.trace).turns) if self.trace.exists() else []

    def stop(self) -> tuple[str, str]:
        """SIGINT, then (stdout, stderr) once it exited."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            out, _ = self.proc.communicate(timeout=30)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return out, self.stderr.read_text()


def start_proxy(kind: str, upstream: str, cert: Path, folder: Path) -> Proxy:
    """``frank serve``/``frank record``/``frank serve --record`` (kind ``serve-record``) as a subprocess trusting
    ``cert``; its URL from its first line."""
    command, trace = kind.split("-")[0], folder / "turns.jsonl" if kind != "serve" else None
    args = ["--upstream", upstream, "--listen", "127.0.0.1:0"]
    args += ["--tokenizer", str(TOKENIZER)] if command == "serve" else ["--out", str(trace)]
    args += ["--record", str(trace)] if kind == "serve-record" else []
    stderr = folder / f"{kind}.stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "frankenstein", command, *args],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "SSL_CERT_FILE": str(cert)},
            start_new_session=True,
        )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(("frank serve: listening on ", "recording ")):
            return Proxy(kind, proc, line.split()[1 if kind == "record" else 4], stderr, trace)
    proc.wait(timeout=30)
    raise AssertionError(f"frank {kind} did not start: {stderr.read_text()}")


@pytest.fixture(scope="module")
def engine(llama_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(llama_server_bin, tmp_path_factory.mktemp("engine") / "llama.log") as url:
        yield url


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("certs")
    return {"trusted": make_cert(folder, "trusted"), "other": make_cert(folder, "other")}


@pytest.fixture(scope="module")
def relay(engine: str, certs: dict[str, tuple[Path, Path]]) -> Iterator[TlsRelayTestDouble]:
    r = TlsRelayTestDouble(int(engine.rsplit(":", 1)[1]), server_context(*certs["trusted"]))
    yield r
    r.close()


@pytest.fixture(scope="module", params=["serve", "record", "serve-record"])
def proxy(
    request: pytest.FixtureRequest,
    relay: TlsRelayTestDouble,
    certs: dict[str, tuple[Path, Path]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Proxy]:
    p = start_proxy(request.param, relay.url, certs["trusted"][0], tmp_path_factory.mktemp(request.param))
    yield p
    _, err = p.stop()
    assert "Traceback" not in err, err


def sse_content(raw: bytes) -> tuple[str, list[str]]:
    """A streamed chat's text (its deltas joined) and its finish reasons; the stream must end with [DONE]."""
    events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", raw[-200:]
    chunks = [json.loads(e)["choices"] for e in events[:-1]]
    text = "".join(c[0]["delta"].get("content") or "" for c in chunks if c)
    return text, [c[0]["finish_reason"] for c in chunks if c and c[0].get("finish_reason")]


def chat(url: str, body: dict[str, Any] = CHAT) -> str:
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60, trust_env=False)
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def streamed(url: str) -> tuple[str, list[str]]:
    body = CHAT | {"stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60, trust_env=False) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return sse_content(r.read())


def test_a_chat_and_a_whole_stream_through_tls_are_what_going_direct_gives(
    proxy: Proxy, relay: TlsRelayTestDouble, engine: str
) -> None:
    before, turns = relay.requests, proxy.turns() if proxy.trace else []
    direct, direct_stream = chat(engine), streamed(engine)
    assert direct != "" and direct_stream == (direct, ["length"])  # temperature 0: one answer
    assert chat(proxy.url) == direct
    assert streamed(proxy.url) == direct_stream
    assert relay.requests - before == 2  # both went through the terminator, once each
    if proxy.trace:  # each answer, once its end reached the client, is one turn in the trace
        one, two = proxy.turns()[len(turns) :]
        assert (one.request, two.request) == (CHAT, CHAT | {"stream": True})
        assert {t.endpoint for t in (one, two)} == {"/v1/chat/completions"}
        assert [(t.output.text, t.output.finish_reason) for t in (one, two)] == [(direct, "length")] * 2
        assert one.session_id == two.session_id and two.turn_index == one.turn_index + 1


def test_kept_alive_tls_connections_are_reused_not_reopened_per_request(
    proxy: Proxy, relay: TlsRelayTestDouble, engine: str
) -> None:
    chat(proxy.url)  # a pooled connection exists (whatever earlier tests left)
    accepts, handshakes, requests = relay.accepts, relay.handshakes, relay.requests
    answers = {chat(proxy.url) for _ in range(6)}
    assert answers == {chat(engine)}
    assert relay.requests - requests == 6
    assert (relay.accepts - accepts, relay.handshakes - handshakes) == (0, 0)  # six requests, one TLS connection


@pytest.mark.parametrize("notify", [True, False], ids=["close_notify", "ragged-close"])
def test_the_terminator_closing_between_requests_costs_a_reconnect_never_a_second_send(
    proxy: Proxy, relay: TlsRelayTestDouble, engine: str, notify: bool
) -> None:
    """Each request finds its pooled TLS connection closed by the terminator (TLS: found by sending, as
    ``closed_by_peer`` says): answered 200 on a fresh connection, and it reached the engine once."""
    want = chat(engine)
    chat(proxy.url)
    requests, handshakes = relay.requests, relay.handshakes
    for _ in range(3):
        assert relay.close_all(notify) >= 1  # the pooled connection among them
        time.sleep(0.05)  # the close has reached frank's side before the request (else it is not "between")
        assert chat(proxy.url) == want
    assert relay.requests - requests == 3  # none sent twice
    assert relay.handshakes - handshakes == 3  # one reconnect each


def test_record_answers_502_naming_an_untrusted_certificate(
    engine: str, certs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """The terminator shows a certificate frank does not trust: the client gets a 502 saying so at once (no
    hang), nothing reaches the engine, frank record says it in one line on stderr (no traceback) and its
    summary counts the upstream error."""
    relay = TlsRelayTestDouble(int(engine.rsplit(":", 1)[1]), server_context(*certs["other"]))
    p = start_proxy("record", relay.url, certs["trusted"][0], tmp_path)
    try:
        t0 = time.monotonic()
        r = httpx.post(p.url + "/v1/chat/completions", json=CHAT, timeout=30, trust_env=False)
        took = time.monotonic() - t0
    finally:
        out, err = p.stop()
        relay.close()
    assert r.status_code == 502 and took < 10
    message = r.json()["error"]["message"]
    assert message.startswith("upstream failed: ") and "CERTIFICATE_VERIFY_FAILED" in message, message
    assert relay.refused >= 1 and relay.requests == 0
    assert out.endswith("recorded 0 turns to " + str(tmp_path / "turns.jsonl") + "; 1 upstream errors\n"), out
    said, stopped = err.splitlines()  # one line as it happened, one at the stop
    assert said.startswith("frank record: upstream https://") and ": SSLCertVerificationError: [SSL: " in said
    assert "CERTIFICATE_VERIFY_FAILED" in said and "(1, " not in said  # a sentence, not the exception's repr
    assert stopped == "frank: interrupted; engines stopped"
    assert not (tmp_path / "turns.jsonl").exists()


def test_serve_refuses_to_start_before_an_untrusted_certificate(
    engine: str, certs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """frank serve asks the engine's /tokenize before it listens: an untrusted certificate stops it there
    with one line naming the upstream and the refusal, exit 1, no traceback."""
    relay = TlsRelayTestDouble(int(engine.rsplit(":", 1)[1]), server_context(*certs["other"]))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "frankenstein", "serve", "--upstream", relay.url, "--listen", "127.0.0.1:0"]
            + ["--tokenizer", str(TOKENIZER)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SSL_CERT_FILE": str(certs["trusted"][0])},
        )
    finally:
        relay.close()
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"frank: error: engine at {relay.url} did not answer /tokenize"), line
    assert "CERTIFICATE_VERIFY_FAILED" in line and relay.requests == 0


def test_serve_answers_502_once_the_upstream_certificate_is_no_longer_trusted(
    engine: str, certs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """The terminator's certificate changes under a running frank serve (rotated to one frank does not
    trust) and it drops its connections: the next request is a 502 naming the refusal, the one after it too,
    frank serve stays up, and nothing reached the engine after the change."""
    relay = TlsRelayTestDouble(int(engine.rsplit(":", 1)[1]), server_context(*certs["trusted"]))
    p = start_proxy("serve", relay.url, certs["trusted"][0], tmp_path)
    try:
        assert chat(p.url) == chat(engine)
        relay.context = server_context(*certs["other"])
        relay.close_all(notify=True)
        requests = relay.requests
        for _ in range(2):
            r = httpx.post(p.url + "/v1/chat/completions", json=CHAT, timeout=30, trust_env=False)
            assert r.status_code == 502, r.text
            assert r.json()["error"]["type"] == "bad_gateway"
            assert "CERTIFICATE_VERIFY_FAILED" in r.json()["error"]["message"], r.text
        assert relay.requests == requests and relay.refused >= 2
        assert p.proc.poll() is None
    finally:
        _, err = p.stop()
        relay.close()
    assert "Traceback" not in err, err


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://127.0.0.1:8443", "expected http://HOST:PORT or https://HOST:PORT"),
        ("https://127.0.0.1:8443/v1", "give the server's root, without a path (https://HOST:PORT)"),
        ("https://127.0.0.1:port", "the port is not a number"),
    ],
)
def test_serve_upstream_takes_https_roots_only(url: str, said: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "frankenstein", "serve", "--upstream", url, "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "Invalid value for '--upstream'" in r.stderr and said in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
