"""What a client that leaves mid-answer costs the engine behind ``frank serve`` and ``frank record``: how long
the engine keeps generating for nobody, and how long the next request waits for it (loopback, bounded).

    .venv/bin/python benchmarks/serve_client_leaves.py              # 3 rounds of 1,000 tokens, ~3 min
    .venv/bin/python benchmarks/serve_client_leaves.py --rounds 1 --tokens 500

A real llama-server on the tiny model, one thread, one slot (``--parallel 1``: a request waits while the slot
generates), ``frank serve --upstream`` and ``frank record`` in front of it (the real CLI); ``direct`` is the
client at llama-server itself. Each round, per target and way of leaving:

* ``stream-fin`` / ``stream-rst``: a streamed chat asked for ``--tokens`` tokens (``ignore_eos``), five events
  read, the socket closed (FIN; RST with ``SO_LINGER`` 0);
* ``json``: the same chat not streamed, the socket closed 0.5 s after the request was sent.

Then, at once, a short chat (16 tokens) on a new connection; with one slot it is answered only once the
engine stopped working for the departed client. Reported: that next chat's seconds; for scale, the same
short chat with nobody gone before it (``nobody left``), and the long chat read to its end going direct
(``whole answer``: what a proxy that drains the answer keeps the engine busy for). Before each step the
slot is idle (``GET /slots`` polled).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.process import free_port
from frankenstein.shipped import data_path

FRANK = str(Path(sys.executable).with_name("frank"))
SHORT = {"messages": [{"role": "user", "content": "Print hello in Python."}], "max_tokens": 16, "temperature": 0.0}
WAYS = ("stream-fin", "stream-rst", "json")


def _long(tokens: int, stream: bool) -> dict[str, object]:
    return {
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": stream,
    }


def _busy(engine: str) -> bool:
    return bool(httpx.get(engine + "/slots", timeout=10, trust_env=False).json()[0]["is_processing"])


def _idle_after(engine: str, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while _busy(engine) and time.monotonic() < deadline:
        time.sleep(0.01)


def _send(url: str, body: dict[str, object]) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)), timeout=60)
    s.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
    )
    return s


def _leave(url: str, way: str, tokens: int) -> None:
    """Send the long chat and close the socket as ``way`` says; returns at the close."""
    s = _send(url, _long(tokens, stream=way != "json"))
    if way == "json":
        time.sleep(0.5)
    else:
        seen = b""
        while seen.count(b"data: ") < 5:
            data = s.recv(65536)
            if not data:
                raise RuntimeError(f"the stream ended early: {seen[-200:]!r}")
            seen += data
    if way == "stream-rst":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def _next_chat_s(url: str) -> float:
    t0 = time.monotonic()
    r = httpx.post(url + "/v1/chat/completions", json=SHORT, timeout=600, trust_env=False)
    if r.status_code != 200:
        raise RuntimeError(f"the next chat was answered {r.status_code}: {r.text[:200]}")
    return time.monotonic() - t0


def _round(targets: dict[str, str], engine: str, tokens: int) -> dict[str, float]:
    """{"target way": the next chat's seconds} for one round."""
    out: dict[str, float] = {}
    for name, url in targets.items():
        _idle_after(engine, 600)
        out[f"{name} nobody left"] = _next_chat_s(url)
        for way in WAYS:
            _idle_after(engine, 600)  # nothing left of the step before
            _leave(url, way, tokens)
            out[f"{name} {way}"] = _next_chat_s(url)  # sent at once: it waits while the engine works
    return out


def _whole_s(engine: str, tokens: int) -> float:
    t0 = time.monotonic()
    r = httpx.post(engine + "/v1/chat/completions", json=_long(tokens, False), timeout=600, trust_env=False)
    r.raise_for_status()
    return time.monotonic() - t0


def _spawn(args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [FRANK, *args, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/health", timeout=2, trust_env=False)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"frank {args[0]} did not start")


def _table(rows: list[dict[str, float]], whole: list[float]) -> list[str]:
    lines = ["| target, way the client left | next chat, s (median) | (max) |", "| --- | --- | --- |"]
    for key in rows[0]:
        took = [r[key] for r in rows]
        lines.append(f"| {key} | {statistics.median(took):.3f} | {max(took):.3f} |")
    lines.append(f"| whole long answer, direct | {statistics.median(whole):.3f} | {max(whole):.3f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=1000)
    args = ap.parse_args()
    recipe = ResolvedRecipe(
        name="tiny",
        engine="llamacpp",
        model=str(data_path("tiny-target.gguf")),
        args=["--ctx-size", "4096", "--threads", "1", "--parallel", "1", "--seed", "1", "--jinja"],
        env={},
        start_timeout_s=120,
    )
    with tempfile.TemporaryDirectory() as tmp, start_engine(recipe, Path(tmp) / "logs") as eng:
        serve, serve_url = _spawn(
            ["serve", "--upstream", eng.base_url, "--tokenizer", str(data_path("tiny-tokenizer.json"))]
        )
        record, record_url = _spawn(["record", "--upstream", eng.base_url, "--out", os.path.join(tmp, "t.jsonl")])
        try:
            targets = {"direct": eng.base_url, "serve": serve_url, "record": record_url}
            rows, whole = [], []
            for i in range(args.rounds):
                rows.append(_round(targets, eng.base_url, args.tokens))
                whole.append(_whole_s(eng.base_url, args.tokens))
                print(f"round {i + 1}: {rows[-1]} whole {whole[-1]:.3f}", file=sys.stderr)
        finally:
            for proc in (serve, record):
                proc.terminate()
                proc.wait(timeout=30)
    print(f"{args.rounds} rounds, {args.tokens} tokens asked, llama-server --parallel 1, tiny model")
    print("\n".join(_table(rows, whole)))


if __name__ == "__main__":
    main()
