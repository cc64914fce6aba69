"""What ``frank serve`` and ``frank record`` add to one request at a time, against going to the same
llama-server directly, measured A B A B in one run (the machine is shared: only ratios and paired
differences from one run are compared).

    .venv/bin/python benchmarks/proxy_overhead.py              # 150 rounds, ~1 min on 2 cores
    .venv/bin/python benchmarks/proxy_overhead.py --rounds 300
    git archive HEAD~3 src | tar -x -C /tmp/base    # older code, measured in the same run:
    .venv/bin/python benchmarks/proxy_overhead.py --baseline-src /tmp/base/src

One client, one keep-alive connection per target (``http.client``), one request at a time. Each
round sends each request kind to each target back to back, in an order drawn anew each round (seeded: no
target always follows the same one, so the work a recorder does after an answer, its fsync, falls on every
target alike), so a pair of measurements is a few milliseconds apart. Request kinds:

* ``chat``: ``POST /v1/chat/completions``, 8 tokens, not streamed: time to the last byte;
* ``chat-stream TTFT``, ``chat-stream [DONE]`` and ``chat-stream e2e``: the same, ``stream: true``: time to
  the first SSE ``data:`` line with a token, to the ``data: [DONE]`` line (where an OpenAI client stops
  reading), and to the end of the stream (its final 0-chunk: where a client reading to the end is done);
* ``/tokenize``: llama.cpp's ``{"content": ...}``; ``frank serve`` answers it from its own tokenizer,
  ``frank record`` passes it through;
* ``/count``: ``frank serve``'s count, against the engine's ``/tokenize`` of the same text (the question
  a client would otherwise ask the engine); ``frank record`` has no ``/count``: not measured.

Targets: ``direct``; ``serve``, ``record`` and ``record-after`` (``frank record --turn-after-answer``: each turn
written after its answer's end) of this checkout; ``relay``, the floor of a Python hop: a
bare relay that forwards bytes both ways and parses nothing (a thread per direction, ``TCP_NODELAY``);
with ``--baseline-src DIR`` also ``serve@base`` and ``record@base`` (and ``record-after@base`` with
``--after-base``), the same commands run from the ``frankenstein`` package in ``DIR`` (old code against new,
A B A B in one run); with ``--scoped`` also ``scoped`` (and ``scoped@base``): serve's front as a campaign runs it, every request observed into the campaign's store, held
to an adopted concurrency of 1 and each chat's prompt counted against an adopted context scope of 4,096 tokens.

Reported per kind and proxy: the proxy's p50 and p99, direct's p50 and p99, and added = the median of
the paired differences (proxy minus direct of the same round) and p99 minus direct's p99. Goals (issue
33): added ≤ 0.3 ms at the median and ≤ 1 ms at p99.
"""

from __future__ import annotations

import argparse
import ctypes
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import threading
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from frankenstein.campaign import init_campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.http import TransportError, fetch_url
from frankenstein.engines.process import free_port
from frankenstein.regioncache import RegionCache
from frankenstein.regioncache.admission import Admission
from frankenstein.regioncache.observe import ServedLog
from frankenstein.regioncache.proxy import start_front
from frankenstein.regioncache.render import Renderer, engine_template
from frankenstein.shipped import data_path

FRANK = str(Path(sys.executable).with_name("frank"))
TEXT = "The quick brown fox jumps over the lazy dog. " * 8
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0.0}
KINDS = ("chat", "chat-stream", "/tokenize", "/count")
# An agent's long request (``--kinds chat-long``, on ``--model``, e.g. SmolLM2 with its 8,192-token context: the
# tiny model's is 4,096): 16 turns of code, ~16 KB of JSON; the engine keeps it cached between rounds (run the kind
# alone, so that its slot holds only this prompt).
_CODE = "def handler(request):\n    data = request.json()\n    return {'ok': True, 'items': [x * 2 for x in data['items']]}\n"
LONG_CHAT = {
    "model": "m",
    "messages": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: here is the file\n" + _CODE * 8}
        for i in range(16)
    ],
    "max_tokens": 8,
    "temperature": 0.0,
}
PROXIES = ("relay", "serve", "serve@base", "scoped", "scoped@base", "record", "record@base", "record-after")
PROXIES += ("record-after@base",)


def _post(conn: http.client.HTTPConnection, path: str, body: dict[str, object]) -> http.client.HTTPResponse:
    conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return conn.getresponse()


def _timed_json(conn: http.client.HTTPConnection, path: str, body: dict[str, object]) -> tuple[float, ...]:
    t0 = time.perf_counter()
    resp = _post(conn, path, body)
    data = resp.read()
    ms = (time.perf_counter() - t0) * 1e3
    if resp.status != 200:
        raise SystemExit(f"{path}: HTTP {resp.status}: {data[:200]!r}")
    return (ms,)


def _timed_stream(conn: http.client.HTTPConnection) -> tuple[float, ...]:
    """(TTFT, e2e, [DONE]) in ms: the first ``data:`` line carrying content, the end of the stream (its final
    0-chunk, where a client reading the answer to its end, as ``http.client`` does, is done), and the
    ``data: [DONE]`` line (where an OpenAI client stops reading)."""
    t0 = time.perf_counter()
    resp = _post(conn, "/v1/chat/completions", {**CHAT, "stream": True})
    ttft = done = None
    while line := resp.readline():
        if ttft is None and line.startswith(b"data:") and b'"content":"' in line:
            ttft = (time.perf_counter() - t0) * 1e3
        elif line.startswith(b"data: [DONE]"):
            done = (time.perf_counter() - t0) * 1e3
    e2e = (time.perf_counter() - t0) * 1e3
    if resp.status != 200 or ttft is None or done is None:
        raise SystemExit(f"stream: HTTP {resp.status}, no token or no [DONE] seen")
    return (ttft, e2e, done)


def _request(kind: str, target: str) -> Callable[[http.client.HTTPConnection], tuple[float, ...]]:
    if kind == "chat":
        return lambda c: _timed_json(c, "/v1/chat/completions", CHAT)
    if kind == "chat-long":
        return lambda c: _timed_json(c, "/v1/chat/completions", LONG_CHAT)
    if kind == "chat-stream":
        return _timed_stream
    if kind == "/count" and target.startswith(("serve", "scoped")):
        return lambda c: _timed_json(c, "/count", {"content": TEXT})
    return lambda c: _timed_json(c, "/tokenize", {"content": TEXT})


def _once(
    send: Callable[[http.client.HTTPConnection], tuple[float, ...]], conn: http.client.HTTPConnection
) -> tuple[float, ...]:
    """One timed request; a kept-alive connection the server closed meanwhile is reopened and the request
    sent again (timed again from its start: a client library would do the same)."""
    try:
        return send(conn)
    except (http.client.RemoteDisconnected, ConnectionError):
        conn.close()
        return send(conn)


def _measure(
    ports: dict[str, int], rounds: int, kinds: tuple[str, ...] = KINDS, seed: int = 33, gap_s: float = 0.0
) -> dict[tuple[str, str], list[tuple[float, ...]]]:
    conns = {t: http.client.HTTPConnection("127.0.0.1", p, timeout=900) for t, p in ports.items()}
    out: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    order = list(ports)
    rng = random.Random(seed)
    for r in range(rounds + 5):  # the first 5 rounds warm every path and are dropped
        for kind in kinds:
            rng.shuffle(order)  # a new order each round: no target always follows the same one (a recorder's
            for target in order:  # fsync after its answer lands on whichever request comes next)
                if kind == "/count" and target.startswith(("record", "relay")):
                    continue
                if gap_s:
                    time.sleep(
                        gap_s
                    )  # what the last request left (a recorder's fsync) is over, as after an agent's tool call
                value = _once(_request(kind, target), conns[target])
                if r >= 5:
                    out.setdefault((kind, target), []).append(value)
    for c in conns.values():
        c.close()
    return out


def _q(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Bytes from ``src`` to ``dst`` until either side ends; then both sockets are shut down, which wakes the
    other direction's ``recv`` (a ``close`` alone would leave it blocked and the client waiting)."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def _relay(listen_port: int, upstream_port: int) -> None:
    """The floor: accept, connect upstream, forward bytes both ways until either side closes."""
    srv = socket.create_server(("127.0.0.1", listen_port), backlog=64)
    while True:
        client, _ = srv.accept()
        upstream = socket.create_connection(("127.0.0.1", upstream_port))
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()


def _scoped_front(listen_port: int, upstream: str, store_dir: str) -> None:
    """``frank serve``'s front as it runs for a campaign whose recipe was adopted with a scope (concurrency 1, context
    4,096): every request observed into the campaign's store, each generation request let through one at a time, each
    chat's prompt counted (the tiny tokenizer, the engine's own chat template from ``/props``) to say whether it is
    outside the scope. Run from ``--baseline-src`` too (old code)."""
    cache = RegionCache(Tokenizer.from_file(str(data_path("tiny-tokenizer.json"))))
    renderer = Renderer(engine_template(fetch_url(upstream + "/props", timeout_s=10).json()))
    observe = ServedLog(init_campaign(store_dir).store, None)
    admission = Admission(1, "queue", "adopted for concurrency 1 (ledger step 1)")
    front = start_front(
        upstream, cache, renderer=renderer, port=listen_port, observe=observe, admission=admission, context_scope=4096
    )
    with front:
        threading.Event().wait()


def _report(results: dict[tuple[str, str], list[tuple[float, ...]]]) -> None:
    print(
        f"{'request':<18} {'proxy':<11} {'p50 ms':>8} {'p99 ms':>8} {'direct p50':>11} {'direct p99':>11} "
        f"{'added p50':>10} {'added p99':>10}"
    )
    rows = [("chat", 0, "chat"), ("chat-stream", 0, "chat-stream TTFT"), ("chat-stream", 2, "chat-stream [DONE]")]
    rows += [("chat-stream", 1, "chat-stream e2e")]
    rows += [("/tokenize", 0, "/tokenize"), ("/count", 0, "/count"), ("chat-long", 0, "chat-long (16 KB)")]
    for kind, i, label in rows:
        if (kind, "direct") not in results:
            continue
        direct = [v[i] for v in results[(kind, "direct")]]
        for proxy in PROXIES:
            if (kind, proxy) not in results:
                continue
            mine = [v[i] for v in results[(kind, proxy)]]
            paired = statistics.median(a - b for a, b in zip(mine, direct, strict=True))
            print(
                f"{label:<18} {proxy:<11} {_q(mine, 50):>8.3f} {_q(mine, 99):>8.3f} {_q(direct, 50):>11.3f} "
                f"{_q(direct, 99):>11.3f} {paired:>+10.3f} {_q(mine, 99) - _q(direct, 99):>+10.3f}"
            )


def _wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            why = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise SystemExit(f"{url}: the process exited with {proc.returncode}: {why}")
        try:
            if fetch_url(url + "/health", timeout_s=2).status_code == 200:
                return
        except TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def _with_parent() -> None:
    """In a child before it runs: killed when this benchmark dies, however it dies (a timeout's SIGTERM or SIGKILL
    skips the ``finally`` that stops the proxies; left running, they polled and disturbed later runs)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _spawn(args: list[str], src: str | None = None) -> subprocess.Popen[bytes]:
    """``frank ARGS``, from ``src`` (a directory holding a ``frankenstein`` package) when given."""
    env = {**os.environ, "PYTHONPATH": src} if src else None
    cmd = [sys.executable, "-m", "frankenstein", *args] if src else [FRANK, *args]
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=env, preexec_fn=_with_parent
    )


def _proxies(
    base_url: str, tmp: str, src: str | None, suffix: str, tiny: bool = True, after: bool = False
) -> dict[str, tuple[int, subprocess.Popen[bytes]]]:
    """``serve`` and ``record`` in front of ``base_url`` (from ``src`` when given), by target name; another model
    than the tiny one is counted with the tokenizer serve finds for it (from the GGUF's metadata)."""
    serve_port, record_port = free_port(), free_port()
    listen = "127.0.0.1:{}"
    serve = ["serve", "--upstream", base_url, "--listen", listen.format(serve_port)]
    serve += ["--tokenizer", str(data_path("tiny-tokenizer.json"))] if tiny else []
    record = ["record", "--upstream", base_url, "--listen", listen.format(record_port)]
    record += ["--out", os.path.join(tmp, f"overhead{suffix}.jsonl")]
    procs = {
        "serve" + suffix: (serve_port, _spawn(serve, src)),
        "record" + suffix: (record_port, _spawn(record, src)),
    }
    if after:  # frank record --turn-after-answer: each turn written after its answer's end
        after_port = free_port()
        after_args = ["record", "--upstream", base_url, "--listen", listen.format(after_port), "--turn-after-answer"]
        after_args += ["--out", os.path.join(tmp, f"overhead-after{suffix}.jsonl")]
        procs["record-after" + suffix] = (after_port, _spawn(after_args, src))
    return procs


def _scoped(base_url: str, tmp: str, src: str | None, suffix: str) -> dict[str, tuple[int, subprocess.Popen[bytes]]]:
    """The scoped front (``_scoped_front``) in its own process, from ``src`` when given."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": src} if src else None
    store = os.path.join(tmp, f"campaign{suffix}")
    cmd = [sys.executable, __file__, "--scoped-front", str(port), base_url, store]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, env=env, preexec_fn=_with_parent
    )
    return {"scoped" + suffix: (port, proc)}


def _pin(engine_pid: int | None) -> None:
    """Every thread of the engine on the last CPU; this process (and so the proxies it starts) on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if engine_pid is None or len(cpus) < 2:
        raise SystemExit("--pin needs the engine's pid and two CPUs")
    for task in os.listdir(f"/proc/{engine_pid}/task"):
        os.sched_setaffinity(int(task), {cpus[-1]})
    os.sched_setaffinity(0, set(cpus[:-1]))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--baseline-src", help="a directory holding an older frankenstein package, measured too")
    ap.add_argument("--model", default=str(data_path("tiny-target.gguf")), help="the engine's model (GGUF)")
    ap.add_argument("--gap-ms", type=float, default=0.0, help="idle time before each request (default 0: back to back)")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=[*KINDS, "chat-long"], help="request kinds")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the engine's threads on the last CPU, this client and the proxies on the others (a workstation whose engine has cores, or a GPU, of its own)",
    )
    ap.add_argument(
        "--scoped",
        action="store_true",
        help="also `scoped`: serve's front observing into a campaign with an adopted context scope (each chat counted)",
    )
    ap.add_argument(
        "--after-base",
        action="store_true",
        help="with --baseline-src, also `record-after@base` (its --turn-after-answer)",
    )
    ap.add_argument("--relay", nargs=2, type=int, metavar=("LISTEN", "UPSTREAM"), help=argparse.SUPPRESS)
    ap.add_argument("--scoped-front", nargs=3, metavar=("LISTEN", "UPSTREAM", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.relay:
        _relay(*args.relay)
        return
    if args.scoped_front:
        _scoped_front(int(args.scoped_front[0]), args.scoped_front[1], args.scoped_front[2])
        return
    recipe = ResolvedRecipe(
        name="tiny",
        engine="llamacpp",
        model=args.model,
        args=["--ctx-size", "8192" if "chat-long" in args.kinds else "2048", "--threads", "1", "--parallel", "1"],
        env={},
        start_timeout_s=120,
    )
    tiny = Path(args.model) == data_path("tiny-target.gguf")
    with tempfile.TemporaryDirectory() as tmp, start_engine(recipe, Path(tmp)) as eng:
        if args.pin:
            _pin(eng.pid)
        relay_port = free_port()
        relay = subprocess.Popen(
            [sys.executable, __file__, "--relay", str(relay_port), str(eng.port)], preexec_fn=_with_parent
        )
        procs = {"relay": (relay_port, relay), **_proxies(eng.base_url, tmp, None, "", tiny, after=True)}
        if args.baseline_src:
            base = os.path.abspath(args.baseline_src)
            procs.update(_proxies(eng.base_url, tmp, base, "@base", tiny, after=args.after_base))
        if args.scoped and tiny:
            procs.update(_scoped(eng.base_url, tmp, None, ""))
            if args.baseline_src:
                procs.update(_scoped(eng.base_url, tmp, os.path.abspath(args.baseline_src), "@base"))
        ports = {"direct": eng.port or 0, **{name: port for name, (port, _) in procs.items()}}
        try:
            for name, (port, proc) in procs.items():
                if name != "relay":
                    _wait_up(f"http://127.0.0.1:{port}", proc)
            time.sleep(0.5)  # the relay listens within milliseconds of its start
            print(
                f"llama-server {eng.version} ({Path(args.model).name}); loopback; {os.cpu_count()} CPUs; {args.rounds} rounds; {args.gap_ms} ms idle before each request; order drawn each round"
            )
            print(f"load average {os.getloadavg()[0]:.2f} at the start")
            _report(_measure(ports, args.rounds, tuple(args.kinds), gap_s=args.gap_ms / 1000))
            print(f"load average {os.getloadavg()[0]:.2f} at the end")
        finally:
            for _, proc in procs.values():
                _stop(proc)


if __name__ == "__main__":
    main()
