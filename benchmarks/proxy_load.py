"""Load on the proxies: N clients at once through ``frank serve`` and ``frank record`` in front of a
real llama-server, against going to llama-server directly, in the same run (loopback only, bounded).

    .venv/bin/python benchmarks/proxy_load.py                # 200 and 1000 clients, ~1-2 min on 2 cores
    .venv/bin/python benchmarks/proxy_load.py --clients 200 --rounds 1

Each round opens N connections at the same instant (asyncio, one coroutine per client, a raw
HTTP/1.1 request with ``Connection: close``), for each of three targets in turn: ``direct``
(llama-server), ``serve`` (``frank serve --upstream``, the region-cache front) and ``record``
(``frank record``, the recording proxy; its trace is written to a temporary file). Two requests:

* ``GET /health``: answered by llama-server's HTTP threads, no model work — the proxies' own cost
  under a burst;
* ``POST /v1/completions`` with ``max_tokens: 1``: one real generation each; llama-server runs them
  one at a time (``--parallel 1``), so latency is mostly the engine's queue.

Reported per target: answered (HTTP 200), resets / failures, latency p50 and p99, and the added
latency of the proxy = its p50/p99 minus direct's p50/p99 of the same round. The proxies and the
engine are real processes started by the real CLI; every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.http import TransportError, fetch_url
from frankenstein.engines.process import free_port
from frankenstein.shipped import data_path

FRANK = str(Path(sys.executable).with_name("frank"))
TIMEOUT_S = 120.0


def _request(kind: str) -> bytes:
    if kind == "health":
        return b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    body = json.dumps({"model": "m", "prompt": "def f(x):", "max_tokens": 1, "temperature": 0.0}).encode()
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )


async def _one(port: int, data: bytes, start: asyncio.Event) -> tuple[str, float]:
    await start.wait()
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT_S)
        writer.write(data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), TIMEOUT_S)
        writer.close()
    except (ConnectionResetError, BrokenPipeError):
        return "reset", time.perf_counter() - t0
    except OSError as exc:  # TimeoutError included
        return type(exc).__name__, time.perf_counter() - t0
    status = answer[9:12]
    return ("ok" if status == b"200" else f"http {status.decode(errors='replace') or 'none'}"), time.perf_counter() - t0


async def _burst(port: int, n: int, kind: str) -> list[tuple[str, float]]:
    start = asyncio.Event()
    tasks = [asyncio.create_task(_one(port, _request(kind), start)) for _ in range(n)]
    await asyncio.sleep(0.05)  # every coroutine is waiting on the same event
    start.set()
    return await asyncio.gather(*tasks)


def _q(values: list[float], p: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def _wait_up(url: str, proc: subprocess.Popen[bytes] | None = None, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{url}: the process exited with {proc.returncode}")
        try:
            if fetch_url(url + "/health", timeout_s=2).status_code == 200:
                return
        except TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([FRANK, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode(errors="replace")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[200, 1000])
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    recipe = ResolvedRecipe(
        name="tiny",
        engine="llamacpp",
        model=str(data_path("tiny-target.gguf")),
        args=["--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--threads-http", "4"],
        env={},
        start_timeout_s=120,
    )
    with tempfile.TemporaryDirectory() as tmp, start_engine(recipe, Path(tmp)) as eng:
        serve_port, record_port = free_port(), free_port()
        procs = {
            "serve": _spawn(
                [
                    "serve",
                    "--upstream",
                    eng.base_url,
                    "--listen",
                    f"127.0.0.1:{serve_port}",
                    "--tokenizer",
                    str(data_path("tiny-tokenizer.json")),
                ]
            ),
            "record": _spawn(
                [
                    "record",
                    "--upstream",
                    eng.base_url,
                    "--listen",
                    f"127.0.0.1:{record_port}",
                    "--out",
                    os.path.join(tmp, "load.jsonl"),
                ]
            ),
        }
        ports = {"direct": eng.port or 0, "serve": serve_port, "record": record_port}
        try:
            for name, proc in procs.items():
                _wait_up(f"http://127.0.0.1:{ports[name]}", proc)
            print(f"llama-server {eng.version} (tiny model, --parallel 1); loopback; {os.cpu_count()} CPUs")
            print(
                f"{'clients':>7} {'request':<11} {'target':<7} {'answered':>9} {'failed':>7} {'p50 ms':>9} "
                f"{'p99 ms':>9} {'added p50':>10} {'added p99':>10}  failures"
            )
            for port in ports.values():  # warm every path once (first connections, first generation)
                asyncio.run(_burst(port, 20, "completion"))
            for n in args.clients:
                for kind in ("health", "completion"):
                    for _ in range(args.rounds):
                        _round(n, kind, ports)
        finally:
            for name, proc in procs.items():
                err = _stop(proc)
                problems = [line for line in err.splitlines() if "upstream" in line or "not recorded" in line]
                if problems:
                    print(f"{name}: {len(problems)} upstream problem(s), e.g. {problems[0][:300]}")
                if "Traceback" in err:
                    print(f"{name}: traceback on stderr:\n{err[-2000:]}")


def _round(n: int, kind: str, ports: dict[str, int]) -> None:
    base: tuple[float, float] | None = None
    for target, port in ports.items():
        results = asyncio.run(_burst(port, n, kind))
        ok = [t * 1000 for s, t in results if s == "ok"]
        bad: dict[str, int] = {}
        for s, _ in results:
            if s != "ok":
                bad[s] = bad.get(s, 0) + 1
        p50, p99 = (_q(ok, 50), _q(ok, 99)) if ok else (float("nan"), float("nan"))
        if target == "direct":
            base = (p50, p99)
        added = "" if base is None or target == "direct" else f"{p50 - base[0]:>10.1f} {p99 - base[1]:>10.1f}"
        print(
            f"{n:>7} {kind:<11} {target:<7} {len(ok):>9} {n - len(ok):>7} {p50:>9.1f} {p99:>9.1f} "
            f"{added:>21}  {', '.join(f'{v} {k}' for k, v in bad.items()) or '-'}",
            flush=True,
        )


if __name__ == "__main__":
    main()
