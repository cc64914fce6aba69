"""When a streamed answer's last pieces reach a client that reads as fast as bytes come: direct from
llama-server, through a bare relay, ``frank serve`` and ``frank record`` (and the same commands from an older
checkout, ``--baseline-src``), one request at a time, in an order drawn anew each round.

    .venv/bin/python benchmarks/stream_end.py                     # 300 rounds, ~20 s on 2 cores
    git archive d39a62b src | tar -x -C /tmp/base
    .venv/bin/python benchmarks/stream_end.py --baseline-src /tmp/base/src

The client is a raw socket on one kept-alive connection per target (a connection the server closed is
replaced before the clock starts), ``recv`` in a loop, no parsing but a search of what came. Per target, the
median (ms from the request's send) of: the first token (TTFT), the final chunk with the engine's timings,
the ``data: [DONE]`` event, and the end of the answer (the final 0-chunk); then ``end - [DONE]`` (median of
each request's own gap), and each median's difference from direct's (paired by round).

``benchmarks/proxy_overhead.py`` times the same answers with ``http.client``, whose line reads between the
pieces blur the last ~40 µs; this one shows them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.process import free_port
from frankenstein.shipped import data_path

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0.0}
BODY = json.dumps({**CHAT, "stream": True}).encode()
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
REQUEST += b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
END = b"\r\n0\r\n\r\n"
HERE = Path(__file__).resolve().parent
FRANK = str(Path(sys.executable).with_name("frank"))


class Target:
    """One kept-alive connection to ``port``, opened again (before the clock starts) once the server closed it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None

    def ready(self) -> socket.socket:
        if self.sock is not None and select.select([self.sock], [], [], 0)[0]:
            self.sock.close()  # readable while idle: the server's close
            self.sock = None
        if self.sock is None:
            sock = socket.create_connection(("127.0.0.1", self.port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = sock
        return self.sock

    def once(self) -> tuple[float, float, float, float]:
        """(TTFT, final chunk, [DONE], end) in ms; sent again on a fresh connection when the server closed it
        as the request went out."""
        got = self._timed()
        if got is None:
            self.sock = None
            got = self._timed()
        if got is None:
            raise SystemExit(f"port {self.port}: closed twice")
        return got

    def _timed(self) -> tuple[float, float, float, float] | None:
        sock = self.ready()
        arrivals: list[tuple[float, int]] = []
        buf = b""
        t0 = time.perf_counter()
        sock.sendall(REQUEST)
        while not buf.endswith(END):
            data = sock.recv(65536)
            if not data and not buf:
                return None
            if not data:
                _fail(self.port, buf)
            buf += data
            arrivals.append((time.perf_counter(), len(buf)))

        def at(marker: bytes) -> float:
            pos = buf.find(marker)
            if pos < 0:
                _fail(self.port, buf)
            return next((t - t0) * 1e3 for t, n in arrivals if n >= pos + len(marker))

        return at(b'"content":"'), at(b'"timings"'), at(b"data: [DONE]"), (arrivals[-1][0] - t0) * 1e3


def _fail(port: int, buf: bytes) -> NoReturn:
    raise SystemExit(f"port {port}: unexpected answer ...{buf[-200:]!r}")


def _spawn(args: list[str], src: str | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": src} if src else None
    cmd = [sys.executable, "-m", "frankenstein", *args] if src else [FRANK, *args]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)


def _proxies(url: str, tmp: str, src: str | None, suffix: str) -> dict[str, tuple[int, subprocess.Popen[bytes]]]:
    sp, rp = free_port(), free_port()
    tok = str(data_path("tiny-tokenizer.json"))
    serve = ["serve", "--upstream", url, "--listen", f"127.0.0.1:{sp}", "--tokenizer", tok]
    record = ["record", "--upstream", url, "--listen", f"127.0.0.1:{rp}", "--out", f"{tmp}/t{suffix}.jsonl"]
    return {"serve" + suffix: (sp, _spawn(serve, src)), "record" + suffix: (rp, _spawn(record, src))}


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"port {port} did not come up")


def _report(results: dict[str, list[tuple[float, float, float, float]]]) -> None:
    direct = results["direct"]
    print(
        f"{'target':<14}{'TTFT':>8}{'final':>8}{'[DONE]':>8}{'end':>8}{'end-[DONE]':>12}   added: TTFT, final, [DONE], end"
    )
    for name, rows in results.items():
        med = [statistics.median(r[i] for r in rows) for i in range(4)]
        gap = statistics.median(r[3] - r[2] for r in rows)
        added = [statistics.median(a[i] - b[i] for a, b in zip(rows, direct, strict=True)) for i in range(4)]
        print(
            f"{name:<14}"
            + "".join(f"{m:>8.3f}" for m in med)
            + f"{gap:>12.3f}   "
            + ", ".join(f"{a:+.3f}" for a in added)
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--baseline-src", help="a directory holding an older frankenstein package, measured too")
    args = ap.parse_args()
    recipe = ResolvedRecipe(
        name="tiny",
        engine="llamacpp",
        model=str(data_path("tiny-target.gguf")),
        args=["--ctx-size", "2048", "--threads", "1", "--parallel", "1"],
        env={},
        start_timeout_s=120,
    )
    with tempfile.TemporaryDirectory() as tmp, start_engine(recipe, Path(tmp)) as eng:
        relay_port = free_port()
        relay = subprocess.Popen(
            [sys.executable, str(HERE / "proxy_overhead.py"), "--relay", str(relay_port), str(eng.port)]
        )
        procs = {"relay": (relay_port, relay), **_proxies(eng.base_url, tmp, None, "")}
        if args.baseline_src:
            procs.update(_proxies(eng.base_url, tmp, os.path.abspath(args.baseline_src), "@base"))
        try:
            for port, _ in procs.values():
                _wait_listening(port)
            targets = {"direct": Target(eng.port or 0), **{n: Target(p) for n, (p, _) in procs.items()}}
            print(
                f"llama-server {eng.version}; {os.cpu_count()} CPUs; {args.rounds} rounds; load {os.getloadavg()[0]:.2f}"
            )
            results: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in targets}
            order, rng = list(targets), random.Random(37)
            for r in range(args.rounds + 10):  # the first 10 rounds warm every path and are dropped
                rng.shuffle(order)
                for name in order:
                    row = targets[name].once()
                    if r >= 10:
                        results[name].append(row)
            _report(results)
            print(f"load {os.getloadavg()[0]:.2f} at the end")
        finally:
            for _, proc in procs.values():
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
