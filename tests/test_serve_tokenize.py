"""``frank serve`` and an engine's ``/tokenize``: an engine whose ``/tokenize`` answers garbage is one
clear message from the real CLI (exit 1, no traceback) naming the URL and the bodies sent; a later
garbage answer is a 502 naming them; and the model's ``tokenizer.json`` is found inside a model
directory (a Hugging Face folder, what vLLM serves) or beside a model file.

The real engines' dialects are proven against the real servers: llama.cpp in test_serve.py and
test_serve_tokenizer.py, vLLM in test_serve_vllm.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from frankenstein.engines.process import free_port
from frankenstein.regioncache.engine_count import EngineCounter
from frankenstein.regioncache.proxy import start_front
from frankenstein.regioncache.service import beside_tokenizer, choose_tokenizer
from frankenstein.regioncache.tokenize_api import LLAMACPP, TokenizeApiError, find_tokenize
from frankenstein.shipped import data_path


class BrokenEngineTestDouble(ThreadingHTTPServer):
    """A test double for a broken engine (a real one cannot be made to answer garbage): ``/tokenize``
    answers ``status`` and ``body`` for every request after the first ``good`` ones (which get one
    token); every other path is a 404. ``seen`` keeps the bodies it was sent."""

    daemon_threads = True

    def __init__(self, status: int, body: bytes, good: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), _BrokenHandler)
        self.status, self.body, self.good = status, body, good
        self.seen: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _BrokenHandler(BaseHTTPRequestHandler):
    server: BrokenEngineTestDouble

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/tokenize":
            self._send(404, b'{"error": "not found"}')
            return
        self.server.seen.append(json.loads(raw))
        if len(self.server.seen) <= self.server.good:
            self._send(200, b'{"tokens": [7]}')
        else:
            self._send(self.server.status, self.server.body)


@pytest.fixture
def broken(request: pytest.FixtureRequest) -> Iterator[BrokenEngineTestDouble]:
    status, body, good = request.param
    srv = BrokenEngineTestDouble(status, body, good)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


GARBAGE = [
    (200, b"<html>oops</html>", 0),
    (200, b'{"tokens": ["He", "llo"]}', 0),
    (200, b'{"tokens": [1, 2], "count": 5}', 0),
    (200, b'{"tokens": []}', 0),
    (500, b"Internal Server Error", 0),
    (422, b'{"detail": "unprocessable"}', 0),
]


@pytest.mark.parametrize("broken", GARBAGE, indirect=True, ids=["html", "strings", "count", "empty", "500", "422"])
def test_frank_serve_refuses_an_engine_whose_tokenize_answers_garbage(
    broken: BrokenEngineTestDouble, tmp_path: Path
) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "frankenstein",
            "serve",
            "--upstream",
            broken.url,
            "--listen",
            f"127.0.0.1:{free_port()}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(
        f"frank: error: engine at {broken.url}: /tokenize speaks no dialect frank knows (llama.cpp, vLLM/SGLang): "
        f'sent {{"content": "Hello world", "add_special": false}}, answered {broken.status}'
    ), lines[0]
    assert f'sent {{"prompt": "Hello world", "add_special_tokens": false}}, answered {broken.status}' in lines[0]
    assert broken.seen == [
        {"content": "Hello world", "add_special": False},
        {"prompt": "Hello world", "add_special_tokens": False},
    ]


@pytest.mark.parametrize("broken", [(200, b'{"tokens": "x"}', 1)], indirect=True)
def test_a_garbage_answer_after_the_probe_is_a_502_naming_url_and_body(broken: BrokenEngineTestDouble) -> None:
    api = find_tokenize(broken.url)
    assert api is not None and api.dialect is LLAMACPP  # the probe was answered well
    with start_front(broken.url, EngineCounter(api, "test")) as front:
        r = httpx.post(front.url + "/count", json={"content": "abc", "add_special": True}, trust_env=False)
    assert r.status_code == 502
    assert r.json()["error"]["message"] == (
        f"engine at {broken.url}: /tokenize (llama.cpp dialect) sent "
        '{"content": "abc", "add_special": true}, answered 200 '
        "(not a token list: 'tokens' is not a list of integers; body '{\"tokens\": \"x\"}')"
    )
    assert broken.seen[-1] == {"content": "abc", "add_special": True}


@pytest.mark.parametrize("broken", [(404, b"{}", 0)], indirect=True)
def test_no_tokenize_endpoint_is_none_not_an_error(broken: BrokenEngineTestDouble) -> None:
    assert find_tokenize(broken.url) is None
    assert len(broken.seen) == 1  # a missing path is not asked again in another dialect


def test_an_engine_that_does_not_answer_is_one_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(TokenizeApiError, match=rf"^engine at {url} did not answer /tokenize \(sent .*Hello world"):
        find_tokenize(url)


# ------------------------------------------------------------------ where the tokenizer.json is
def test_tokenizer_json_inside_a_model_directory_or_beside_a_model_file(tmp_path: Path) -> None:
    hf = tmp_path / "hf-model"  # what vLLM and SGLang serve: a folder with config, weights, tokenizer
    hf.mkdir()
    shutil.copy(data_path("tiny-tokenizer.json"), hf / "tokenizer.json")
    assert beside_tokenizer(str(hf)) == hf / "tokenizer.json"
    assert beside_tokenizer(str(hf) + "/") == hf / "tokenizer.json"
    choice = choose_tokenizer(None, str(hf))
    assert (
        choice.tokenizer is not None
        and choice.path == hf / "tokenizer.json"
        and choice.source == str(hf / "tokenizer.json")
    )
    gguf = tmp_path / "ggufs" / "m.gguf"  # a model file: its folder's tokenizer.json
    gguf.parent.mkdir()
    gguf.write_bytes(b"")
    assert beside_tokenizer(str(gguf)) is None
    shutil.copy(data_path("tiny-tokenizer.json"), gguf.parent / "tokenizer.json")
    assert beside_tokenizer(str(gguf)) == gguf.parent / "tokenizer.json"
    # a model directory without one does not look in the folder above it
    bare = hf / "nested"
    bare.mkdir()
    assert beside_tokenizer(str(bare)) is None
    assert choose_tokenizer(None, str(bare)).source == f"no tokenizer.json in the model directory {bare}"


@pytest.mark.parametrize("url", ["foo", "ftp://127.0.0.1:1", "http://127.0.0.1:1/v1", "http://127.0.0.1:x"])
def test_a_bad_upstream_url_is_a_usage_error_naming_the_option(url: str, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "frankenstein", "serve", "--upstream", url, "--listen", f"127.0.0.1:{free_port()}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and "unexpected" not in r.stderr, r.stderr
    assert "Invalid value for '--upstream'" in r.stderr
    assert "http://HOST:PORT" in r.stderr or "the port is not a number" in r.stderr, r.stderr
