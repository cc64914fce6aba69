"""TEST STAND-IN of an engine that is ready but never answers: ``GET /health`` answers 200 and
``/metrics`` an empty page; a POST is read and then left hanging (no byte is ever sent back).
Run as ``python frozen_engine.py --port PORT``; a real process, so the adapter starts and reaps it."""

from __future__ import annotations

import argparse
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Frozen(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        data = b'{"status":"ok"}' if self.path == "/health" else b""
        self.send_response(200 if self.path in ("/health", "/metrics") else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        threading.Event().wait()  # never answers


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    srv = ThreadingHTTPServer(("127.0.0.1", ap.parse_args().port), Frozen)
    srv.daemon_threads = True
    srv.serve_forever()
