"""What ``frank record`` does between the answer's second-to-last byte and its last: the turn written into the
trace. Warm (back to back) and cold (after ``time.sleep(0.005)``, as a proxy thread is when the engine answers),
this checkout against an older package (``--baseline-src``), alternating in one run.

    .venv/bin/python benchmarks/record_turn_write.py --baseline-src /tmp/recwrite-base/src

The real ``_relay_json`` / ``_relay_stream`` of the recording proxy run in process: a real :class:`TurnRecorder`
appending to a trace in a temporary folder, a real socket pair as the client's connection (``_peer_closed`` reads
it), the engine's answer a test double (:class:`AnswerTestDouble`: the bytes llama-server sends for an 8-token chat,
whole or as an SSE stream), the client's end a writer that notes the time of every write
(:class:`TimedClientTestDouble`). Measured: the time from the write of all but the last byte (the stream's last
data chunk) to the write of the last byte (the final 0-chunk); that is what recording adds to the answer's end.
For a stream also: from the write of its finish event to that of its ``data: [DONE]`` (what reading the finish
event holds ``[DONE]`` back), and from the finish event to the end. The stream double sends llama-server's writes
(one event each, ``[DONE]`` alone, the final chunk in two), a cold stream's token events 0.25 ms apart.
On these cores code run after a thread slept is ~10x slower than warm (caches evicted while it waits for the
engine), so the cold column is the one the proxy sees. Also measured, apart: the turn's request side
(``_read_turn``: the body read as JSON, redacted, its session found, serialized), which runs while the engine
works: off the answer's path, but CPU that an engine on the same cores loses.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Say hello to the recorder, please."}], "max_tokens": 8}
TIMINGS = {
    "prompt_n": 32,
    "prompt_ms": 3.114,
    "prompt_per_token_ms": 0.0973,
    "prompt_per_second": 10276.2,
    "predicted_n": 8,
    "predicted_ms": 4.218,
    "predicted_per_token_ms": 0.527,
    "predicted_per_second": 1896.6,
}
REQUEST = json.dumps(dict(CHAT, temperature=0.0, stream=False)).encode()
WORDS = ["Hello", "!", " How", " can", " I", " help", " you", " today"]
ANSWER = json.dumps(
    {
        "choices": [
            {
                "finish_reason": "length",
                "index": 0,
                "message": {"role": "assistant", "content": "".join(WORDS)},
            }
        ],
        "created": 1764921600,
        "model": "m",
        "system_fingerprint": "b6000-0123abcd",
        "object": "chat.completion",
        "usage": {"completion_tokens": 8, "prompt_tokens": 32, "total_tokens": 40},
        "id": "chatcmpl-0123456789abcdef",
        "timings": TIMINGS,
    }
).encode()


def _event(delta: dict[str, object], finish: str | None = None, **extra: object) -> bytes:
    chunk = {"choices": [{"finish_reason": finish, "index": 0, "delta": delta}], "created": 1764921600}
    chunk.update({"id": "chatcmpl-0123456789abcdef", "model": "m", "object": "chat.completion.chunk", **extra})
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


EVENTS = (
    [_event({"role": "assistant", "content": None})]
    + [_event({"content": w}) for w in WORDS]
    + [_event({}, "length", usage={"completion_tokens": 8, "prompt_tokens": 32, "total_tokens": 40}, timings=TIMINGS)]
)
DONE = b"data: [DONE]\n\n"
# As llama-server writes it: one event per chunk per write, [DONE] in a write of its own, then the final chunk in two.
STREAM = [b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS] + [b"%x\r\n%s\r\n" % (len(DONE), DONE), b"0\r\n", b"\r\n"]


class AnswerTestDouble:
    """A test double of the pool's answer (``PooledAnswer``): status 200, a JSON body with its length, or an SSE
    stream chunk-framed as llama-server sends it (the final chunk in the last read), read through the relay's
    own ``ChunkFraming``."""

    def __init__(self, parts: list[bytes], headers: object, chunked: bool, gap: float = 0.0) -> None:
        self.status_code, self.headers, self._parts = 200, headers, parts
        self.chunked, self.length = chunked, None if chunked else len(b"".join(parts))
        self._gap = gap  # seconds the engine takes per token: a sleep before each content event

    def framing(self, hold_final: bool = False, decode: bool = False):  # noqa: ANN201 - either package's
        from frankenstein.workload.wire import ChunkFraming

        return ChunkFraming(hold_final=hold_final, decode=decode, end_at_done=True)

    def read(self) -> bytes:
        return b"".join(self._parts)

    def iter_framed(self, size: int = 0, framing=None) -> Iterator[bytes]:  # noqa: ANN001 - either package's
        for i, part in enumerate(self._parts):
            if self._gap and 0 < i < len(EVENTS) - 1:
                time.sleep(self._gap)
            if out := framing.feed(part):
                yield out

    def pump_framed(self, send, framing) -> None:  # noqa: ANN001 - either package's
        for out in self.iter_framed(0, framing):
            send(out)

    def close(self) -> None:
        pass


class TimedClientTestDouble:
    """The client's end of the connection, as the handler's ``wfile`` and as its socket's ``sendall``: notes
    when each write came and keeps no bytes (no send either way); ``fileno``/``recv`` are the real socket's
    (the relay asks whether the client closed)."""

    def __init__(self, sock: socket.socket) -> None:
        self.times: list[float] = []
        self._sock = sock

    def write(self, data: bytes) -> int:
        self.times.append(time.perf_counter())
        return len(data)

    def sendall(self, data: bytes) -> None:
        self.times.append(time.perf_counter())

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self._sock.fileno()

    def recv(self, n: int, flags: int = 0) -> bytes:
        return self._sock.recv(n, flags)


def _handler(folder: Path):  # noqa: ANN202 - the package measured is chosen at run time
    from frankenstein.workload import record, trace, wire

    server = record._ProxyServer(
        ("127.0.0.1", 0), "http://127.0.0.1:9", record.TurnRecorder(folder / "t.jsonl"), 5, None
    )
    h = record._Handler.__new__(record._Handler)
    h.server, h.command, h.request_version, h.path = server, "POST", "HTTP/1.1", "/v1/chat/completions"
    h.sock, h._peer = socket.socketpair()
    h.headers = wire.parse_headers(["Host: x", "Content-Type: application/json"])
    h.close_connection, h.client_gone = False, False
    h._readable = select.poll()  # what the handler's setup() makes per connection (unused by older code)
    h._readable.register(h.sock, select.POLLIN)
    h.prepare = lambda: trace.prepare_request("/v1/chat/completions", CHAT, None)
    h.takes_body = "body" in inspect.signature(h._relay_json).parameters
    return h, wire


def _request_side(h, wait: float = 0.0) -> float:  # noqa: ANN001
    """The turn's request side, made while the engine works (the body read as JSON, redacted, its session
    found, serialized): seconds. Not between the last two bytes, but CPU an engine on the same cores loses."""
    if wait:
        time.sleep(wait)
    t0 = time.perf_counter()
    h._read_turn("/v1/chat/completions", REQUEST)
    return time.perf_counter() - t0


def _one(h, wire, stream: bool, wait: float = 0.0) -> tuple[float, float]:  # noqa: ANN001
    """One answer relayed; the seconds between its last two writes to the client, and between the two before
    (a stream: its finish event's write and its ``[DONE]``'s: what decoding the finish event holds ``[DONE]``
    back). ``wait``: the engine's work, after the request side was prepared (an idle wait: the thread sleeps and
    the caches go cold), and 0.25 ms before each token's event of a stream (llama-server's pace, tiny model)."""
    h.wfile, h._body = TimedClientTestDouble(h.sock), dict(CHAT)
    h.connection = h.wfile
    h._prepared = h.prepare()
    if wait:
        time.sleep(wait)
    kind = "text/event-stream" if stream else "application/json"
    head = wire.parse_headers([f"Content-Type: {kind}"])
    resp = AnswerTestDouble(STREAM if stream else [ANSWER], head, stream, 0.00025 if wait else 0.0)
    relay = h._relay_stream if stream else h._relay_json
    if h.takes_body:  # the code of a4c45ae passes the body along too
        relay("/v1/chat/completions", h._body, resp, time.perf_counter())
    else:
        relay("/v1/chat/completions", resp, time.perf_counter())
    t = h.wfile.times
    return t[-1] - t[-2], (t[-2] - t[-3]) if stream else 0.0


def measure(warm: int, cold: int) -> dict[str, float]:
    """Median µs between the last two bytes, warm and cold, for a JSON answer and a stream."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        h, wire = _handler(Path(tmp))
        for stream in (False, True):
            name = "stream" if stream else "chat"
            for _ in range(200):
                _one(h, wire, stream)
            warms = [_one(h, wire, stream) for _ in range(warm)]
            colds = [_one(h, wire, stream, 0.005) for _ in range(cold)]
            out[f"{name} warm"] = statistics.median(w[0] for w in warms) * 1e6
            out[f"{name} cold"] = statistics.median(c[0] for c in colds) * 1e6
            if stream:
                out["finish to [DONE] cold"] = statistics.median(c[1] for c in colds) * 1e6
                out["finish to end cold"] = statistics.median(c[0] + c[1] for c in colds) * 1e6
        for _ in range(200):
            _request_side(h)
        out["request side warm"] = statistics.median(_request_side(h) for _ in range(warm)) * 1e6
        out["request side cold"] = statistics.median(_request_side(h, 0.005) for _ in range(cold)) * 1e6
        h.server.server_close()
        h.server.recorder.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-src", help="a directory holding an older frankenstein package, measured too")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of this checkout and the baseline")
    ap.add_argument("--warm", type=int, default=2000)
    ap.add_argument("--cold", type=int, default=300)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(measure(args.warm, args.cold)))
        return
    here = str(Path(__file__).resolve().parents[1] / "src")
    targets = {"this": here} | ({"base": os.path.abspath(args.baseline_src)} if args.baseline_src else {})
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in targets}
    for _ in range(args.rounds):
        for name, src in targets.items():
            runs[name].append(_worker(src, args.warm, args.cold))
    _print(runs)


def _worker(src: str, warm: int, cold: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [sys.executable, __file__, "--worker", "--warm", str(warm), "--cold", str(cold)]
    return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)


def _print(runs: dict[str, list[dict[str, float]]]) -> None:
    cols = list(next(iter(runs.values()))[0])
    n = len(next(iter(runs.values())))
    print(f"µs between the last two bytes (request side: apart), median of the runs' medians (range), {n} runs")
    print("| package | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, rs in runs.items():
        cells = [
            f"{statistics.median(r[c] for r in rs):.1f} ({min(r[c] for r in rs):.1f}-{max(r[c] for r in rs):.1f})"
            for c in cols
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
