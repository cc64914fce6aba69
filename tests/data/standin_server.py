"""TEST STAND-IN of an OpenAI-compatible engine (stdlib only), driven by the test-only adapter of
tests/standin_engine.py: ``python standin_server.py --port PORT [--delay-ms MS]``.

- ``GET /health`` 200; ``GET /version`` ``{"version": "standin 1.0"}``;
- ``POST /v1/completions`` and ``/v1/chat/completions``: ``max_tokens`` tokens (``"tok "``), one every
  ``--delay-ms`` ms (else ``$DECODE_DELAY_MS``, an unprefixed setting variable, else 2 ms), streamed as SSE when
  ``stream`` is true; the answer (a stream: its last event) carries ``timings`` (``decode_ms``, ``steps``),
  and a plain answer the header ``X-Standin-Decode-Ms``;
- ``GET /metrics``: its own names, with labels: ``standin:requests_total{route=...}``,
  ``standin:generated_tokens_total{route=...}`` and ``standin:decode_seconds_sum`` / ``_count``.
A real process, so the adapter launches, times and reaps it like any engine.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROUTES = ("/v1/completions", "/v1/chat/completions")
LOCK = threading.Lock()
COUNTS: dict[str, dict[str, float]] = {r: {"requests": 0.0, "tokens": 0.0} for r in ROUTES}
DECODE = {"sum": 0.0, "count": 0.0}
DELAY_S = [0.002]


def metrics_text() -> str:
    with LOCK:
        lines = ["# TYPE standin:requests_total counter"]
        lines += [f'standin:requests_total{{route="{r}"}} {c["requests"]}' for r, c in COUNTS.items()]
        lines += ["# TYPE standin:generated_tokens_total counter"]
        lines += [f'standin:generated_tokens_total{{route="{r}"}} {c["tokens"]}' for r, c in COUNTS.items()]
        lines += ["# TYPE standin:decode_seconds histogram"]
        lines += [f"standin:decode_seconds_sum {DECODE['sum']}", f"standin:decode_seconds_count {DECODE['count']}"]
    return "\n".join(lines) + "\n"


def choice(route: str, text: str, finish: str | None) -> dict[str, Any]:
    if route == "/v1/chat/completions":
        return {"index": 0, "delta" if finish is None else "message": {"content": text}, "finish_reason": finish}
    return {"index": 0, "text": text, "finish_reason": finish}


class Standin(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self.answer(200, metrics_text().encode(), "text/plain; version=0.0.4")
        elif self.path in ("/health", "/version"):
            body = {"status": "ok"} if self.path == "/health" else {"version": "standin 1.0"}
            self.answer(200, json.dumps(body).encode())
        else:
            self.answer(404, b'{"error":"not found"}')

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path not in ROUTES:
            self.answer(404, b'{"error":"not found"}')
            return
        try:
            req = json.loads(raw)
            n = int(req.get("max_tokens") or 16)
        except (ValueError, TypeError, AttributeError):
            self.answer(400, b'{"error":"bad request"}')
            return
        prompt = json.dumps(req.get("prompt") or req.get("messages") or "")
        usage = {"prompt_tokens": max(1, len(prompt.split())), "completion_tokens": n}
        if req.get("stream"):
            self.stream(n, usage)
        else:
            t0 = time.perf_counter()
            for _ in range(n):
                time.sleep(DELAY_S[0])
            decode_ms = self.count(n, t0)
            body = {
                "object": "text_completion",
                "choices": [choice(self.path, "tok " * n, "length")],
                "usage": usage,
                "timings": {"decode_ms": decode_ms, "steps": n},
            }
            self.answer(200, json.dumps(body).encode(), headers={"X-Standin-Decode-Ms": f"{decode_ms:.3f}"})

    def count(self, n: int, t0: float) -> float:
        seconds = time.perf_counter() - t0
        with LOCK:
            COUNTS[self.path]["requests"] += 1
            COUNTS[self.path]["tokens"] += n
            DECODE["sum"] += seconds
            DECODE["count"] += 1
        return seconds * 1000.0

    def stream(self, n: int, usage: dict[str, int]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        t0 = time.perf_counter()
        for _ in range(n):
            time.sleep(DELAY_S[0])
            self.event({"object": "text_completion", "choices": [choice(self.path, "tok ", None)]})
        decode_ms = self.count(n, t0)
        last = {"choices": [choice(self.path, "", "length")], "usage": usage}
        self.event({**last, "timings": {"decode_ms": decode_ms, "steps": n}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def event(self, data: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(data).encode() + b"\n\n")
        self.wfile.flush()

    def answer(
        self, status: int, data: bytes, ctype: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=None)
    args = ap.parse_args()
    delay_ms = args.delay_ms if args.delay_ms is not None else float(os.environ.get("DECODE_DELAY_MS") or 2.0)
    DELAY_S[0] = delay_ms / 1000.0
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Standin)
    srv.daemon_threads = True
    srv.serve_forever()
