"""Replay overhead: (1) per turn on the tiny model, client end-to-end minus server time (goal: median
≤ 1 ms); (2) driver throughput against a minimal null server in another process (goal ≥ 1,000 turns/s).

Run: .venv/bin/python benchmarks/replay_overhead.py [--turns 200]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import tempfile
import time
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.http import TransportError, fetch_url
from frankenstein.engines.llamacpp import LlamaCppEngine
from frankenstein.shipped import data_path
from frankenstein.workload.replay import ReplaySettings, replay
from frankenstein.workload.trace import Turn, workload_from_turns

NULL_BODY = json.dumps(
    {
        "content": "x",
        "stop": True,
        "timings": {"prompt_n": 4, "prompt_ms": 0.1, "predicted_n": 1, "predicted_ms": 0.1, "cache_n": 0},
    }
).encode()


def null_server(port: int) -> None:
    """A minimal HTTP/1.1 server: reads one request per connection, answers a fixed llama.cpp-shaped body."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1024)
    resp = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "
        + str(len(NULL_BODY)).encode()
        + b"\r\n\r\n"
        + NULL_BODY
    )
    health = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    while True:
        conn, _ = srv.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(health if head.startswith(b"GET") else resp)
        conn.close()


def turns(n: int, tokens: int) -> list[Turn]:
    return [
        Turn(
            turn_id=f"t{i}",
            session_id="s",
            turn_index=i,
            endpoint="/completion",
            request={"prompt": f"def f{i}(x):\n", "cache_prompt": True},
            output={"completion_tokens": tokens},
        )
        for i in range(n)
    ]


def overhead_tiny(n: int, stream: bool) -> list[float]:
    recipe = ResolvedRecipe(
        name="tiny",
        engine="llamacpp",
        model=str(data_path("tiny-target.gguf")),
        args=["--threads", "2", "--parallel", "1"],
        env={},
    )
    with tempfile.TemporaryDirectory() as d, start_engine(recipe, Path(d)) as eng:
        res = replay(eng, workload_from_turns(turns(n, 8)), ReplaySettings(warmup_turns=5, stream=stream))
    return [r["e2e_ms"] - r["prompt_ms"] - r["decode_ms"] for r in res.rows if not r["warmup"]]


def throughput_null(n: int) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = mp.Process(target=null_server, args=(port,), daemon=True)
    p.start()
    try:
        recipe = ResolvedRecipe(name="null", engine="openai", model="", args=[], env={})
        eng = LlamaCppEngine(recipe, Path(tempfile.gettempdir()), port=port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                fetch_url(f"http://127.0.0.1:{port}/health", timeout_s=1)
                break
            except TransportError:
                time.sleep(0.01)
        eng.running = True  # the null server is not a process of ours: mark it up by hand
        wl = workload_from_turns(turns(n, 1))
        t0 = time.perf_counter()
        res = replay(eng, wl, ReplaySettings(warmup_turns=0, stream=False))
        dt = time.perf_counter() - t0
        assert len(res.rows) == n
        return n / dt
    finally:
        p.kill()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=200)
    args = ap.parse_args()
    for stream in (False, True):
        o = overhead_tiny(args.turns, stream)
        q = statistics.quantiles(o, n=10)
        print(
            f"tiny model, {'streamed' if stream else 'non-streamed'}: overhead per turn (client e2e − server prompt − decode): "
            f"median {statistics.median(o):.3f} ms, p10 {q[0]:.3f}, p90 {q[-1]:.3f} ms over {len(o)} turns"
        )
    rates = [throughput_null(args.turns * 10) for _ in range(3)]
    print(
        f"null server: driver throughput {statistics.median(rates):.0f} turns/s (median of 3 runs of {args.turns * 10} turns; "
        f"runs: {', '.join(f'{r:.0f}' for r in rates)})"
    )


if __name__ == "__main__":
    main()
