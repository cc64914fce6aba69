"""A test double of an SGLang server (SGLang cannot run here): it answers with the recorded real
responses in this folder, so the SGLang adapter's process life, readiness, version, request and
forced-decode paths run against a real subprocess and real HTTP.

Behaviour: no ``/ready`` route (404, as in versions without it); ``/health`` answers 503 for the first
``--starting`` polls (SGLang's ``ServerStatus.Starting`` during warm-up), then 200; ``/get_server_info``
names the version and the speculative algorithm; ``POST /generate`` answers the recorded EAGLE answer,
or, with ``return_logprob``, the recorded logprob answer (only for the request shape it was recorded
with: 5 input ids, ``logprob_start_len`` 1, ``top_logprobs_num`` 3; 400 otherwise).

Usage: python double_server.py --port N [--starting K]
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC = json.loads((HERE / "generate_spec_pr13425.json").read_text())
LOGPROBS = json.loads((HERE / "generate_logprobs_sglang_jax_pr13.json").read_text())
INFO = {"version": "double-of-recorded-answers", "enable_metrics": True, "speculative_algorithm": "EAGLE"}


class Handler(BaseHTTPRequestHandler):
    polls = 0
    starting = 3

    def _send(self, code: int, body: object = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/health":
            Handler.polls += 1
            self._send(503 if Handler.polls <= Handler.starting else 200)
        elif self.path == "/get_server_info":
            self._send(200, INFO)
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path != "/generate":
            self._send(404, {"detail": "Not Found"})
        elif not body.get("return_logprob"):
            self._send(200, SPEC)
        elif (
            len(body.get("input_ids", [])) == 5
            and body.get("logprob_start_len") == 1
            and body.get("top_logprobs_num") == 3
        ):
            self._send(200, LOGPROBS)
        else:
            self._send(400, {"error": {"message": "the double only knows the recorded request shape"}})

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--starting", type=int, default=3)
    args = parser.parse_args()
    Handler.starting = args.starting
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
