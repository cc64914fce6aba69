"""What ``frank record`` adds to an agent's long request (a 100 KB chat history), this checkout against an older
package (``--baseline-src``), A B A B in one run.

    .venv/bin/python benchmarks/record_long_request.py --baseline-src /tmp/base/src --rounds 300

The engine is a test double (:class:`SlowEngineTestDouble`): a real engine cannot hold a 100 KB prompt here
without its own time (seconds of prefill, hundreds of milliseconds of decode on these 2 cores) swamping the
proxy's fraction of a millisecond. The double answers every request after ``--engine-ms`` (the engine's work) with the same small JSON answer, on
one kept-alive connection, so what is measured is the proxy's own work on a long request: reading it, parsing
it, forwarding it, and recording the turn before the end of the answer. Added = median of the paired
differences (proxy minus direct, the same round).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FRANK = str(Path(sys.executable).with_name("frank"))
CODE = "def handler(request):\n    data = request.json()\n    return {'ok': True, 'items': [x * 2 for x in data['items']]}\n"
LONG = {
    "model": "m",
    "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: here is the file\n" + CODE * 8}
        for i in range(100)
    ],
    "max_tokens": 8,
}
ANSWER = json.dumps(
    {
        "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "ok then"}}],
        "usage": {"prompt_tokens": 30000, "completion_tokens": 8},
    }
).encode()


class SlowEngineTestDouble:
    """A test double for an engine: answers each request ``work_ms`` after it arrived (what an engine's prefill
    and decode would take) with :data:`ANSWER` (keep-alive)."""

    def __init__(self, work_ms: float) -> None:
        self.work_s = work_ms / 1e3
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(ANSWER)
        with conn, conn.makefile("rb") as rfile:
            while True:
                lines = b""
                while (line := rfile.readline()) not in (b"\r\n", b""):
                    lines += line
                if not lines:
                    return
                length = re.search(rb"(?i)content-length: *(\d+)", lines)
                rfile.read(int(length.group(1)) if length else 0)
                time.sleep(self.work_s)  # the engine's work: an idle wait, as a GPU's would be for the CPU
                conn.sendall(head + ANSWER)


def _spawn(args: list[str], src: str | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, "-m", "frankenstein", *args] if src else [FRANK, *args]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _up(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {port} did not come up")


def _timed(conn: http.client.HTTPConnection, body: bytes) -> float:
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    ms = (time.perf_counter() - t0) * 1e3
    if resp.status != 200 or data != ANSWER:
        raise SystemExit(f"HTTP {resp.status}: {data[:200]!r}")
    return ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--engine-ms", type=float, default=5.0, help="how long the double engine works per request")
    ap.add_argument("--baseline-src", help="a directory holding an older frankenstein package, measured too")
    args = ap.parse_args()
    engine = SlowEngineTestDouble(args.engine_ms)
    body = json.dumps(LONG).encode()
    with tempfile.TemporaryDirectory() as tmp:
        targets = {"direct": engine.port}
        procs = []
        for name, src in (("record", None), ("record@base", args.baseline_src)):
            if name.endswith("@base") and not src:
                continue
            port = _free_port()
            out = os.path.join(tmp, f"{name}.jsonl")
            upstream = f"http://127.0.0.1:{engine.port}"
            procs.append(_spawn(["record", "--upstream", upstream, "--listen", f"127.0.0.1:{port}", "--out", out], src))
            _up(port)
            targets[name] = port
        conns = {t: http.client.HTTPConnection("127.0.0.1", p, timeout=30) for t, p in targets.items()}
        times: dict[str, list[float]] = {t: [] for t in targets}
        order = list(targets)
        try:
            print(
                f"request body {len(body)} bytes; engine {args.engine_ms} ms; {args.rounds} rounds; load {os.getloadavg()[0]:.2f} at the start"
            )
            for r in range(args.rounds + 10):  # 10 warm-up rounds, dropped
                for t in order[r % len(order) :] + order[: r % len(order)]:
                    ms = _timed(conns[t], body)
                    if r >= 10:
                        times[t].append(ms)
            print(f"load {os.getloadavg()[0]:.2f} at the end")
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=10)
    direct = times["direct"]
    print(f"{'target':<12} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10}")
    for t, values in times.items():
        q = statistics.quantiles(values, n=100, method="inclusive")
        added = statistics.median(a - b for a, b in zip(values, direct, strict=True))
        print(f"{t:<12} {q[49]:8.3f} {q[98]:8.3f} {added:+10.3f}")


if __name__ == "__main__":
    main()
