"""How much slower a small piece of Python runs after the thread slept, on this machine: why a proxy's per-request
work costs 10 to 30 times its warm time here (docs/benchmarks.md, issue 33).

    .venv/bin/python benchmarks/cold_code.py            # ~10 s

The piece: a JSON request body read and written back and a response head's fields split with one regular
expression (about what a proxy does per request, ~8 µs warm). Each row runs it 300 times right after the named
pause and reports the median: back to back (warm), after a sleep, after spinning as long instead (the CPU never
idles), and after writing to every cache line of 8 MB (the caches evicted on purpose). If a sleep costs about
what evicting the caches costs, and spinning much less, what evicts them is what runs while this thread idles.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}).encode()
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 512\r\nServer: llama\r\nKeep-Alive: timeout=5\r\n\r\n"
FIELD = re.compile(rb"([^:\r\n]+):[ \t]*([^\r\n]*)\r\n")
EVICT = bytearray(8 * 1024 * 1024)


def piece() -> str:
    request = json.loads(BODY)
    fields = dict(FIELD.findall(HEAD))
    return json.dumps(request) + str(len(fields))


def after(pause: Callable[[], object], n: int = 300) -> float:
    """The piece's median µs, each run right after ``pause``."""
    times = []
    for _ in range(n):
        pause()
        t0 = time.perf_counter()
        piece()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def evict() -> None:
    for i in range(0, len(EVICT), 64):
        EVICT[i] = 1


def main() -> None:
    for _ in range(2000):
        piece()
    rows = [
        ("warm (back to back)", lambda: None),
        ("after a 0.2 ms sleep", lambda: time.sleep(0.0002)),
        ("after a 5 ms sleep", lambda: time.sleep(0.005)),
        ("after 0.2 ms of spinning", lambda: spin(0.0002)),
        ("after 5 ms of spinning", lambda: spin(0.005)),
        ("after writing 8 MB", evict),
    ]
    print(f"{'the piece, run':<28}{'median µs':>10}")
    for name, pause in rows:
        print(f"{name:<28}{after(pause):>10.1f}")


if __name__ == "__main__":
    main()
