"""Deterministic generator of latency-report's requests.jsonl, and the reference report.

splitmix64 (not ``random``) keeps the file byte-identical on every Python version. Run as
``python tracegen.py WORKSPACE SEED`` at copy time; the grader regenerates the file to compute the
expected report, never trusting the (writable) workspace copy.
"""

import json
import math
import sys
from pathlib import Path

SEED = 7
LINES = 25000
MASK = (1 << 64) - 1
# endpoint: (base latency ms, spread, error per mille, timeout per mille)
ENDPOINTS = {"/api/search": (40, 60, 8, 3), "/api/cart": (15, 20, 4, 1), "/api/checkout": (90, 80, 20, 6),
             "/api/login": (25, 15, 2, 0), "/api/items": (12, 30, 3, 1), "/api/reports": (150, 40, 5, 12)}


class Rng:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n


def latency(rng, base, spread):
    tail = 6 if rng.below(50) == 0 else 1  # a slow tail drives p95
    tenths = base * 10 + rng.below(spread * 10) * tail
    return tenths / 10


def line(rng, i):
    names = list(ENDPOINTS)
    endpoint = names[rng.below(len(names))]
    base, spread, err, tmo = ENDPOINTS[endpoint]
    ms = None if rng.below(1000) < tmo else latency(rng, base, spread)
    status = 504 if ms is None else (500 + rng.below(4) if rng.below(1000) < err else 200)
    second, milli = divmod(i * 3456, 1000)
    h, rest = divmod(second, 3600)
    m, s = divmod(rest, 60)
    obj = {"ts": f"2024-06-01T{h:02d}:{m:02d}:{s:02d}.{milli:03d}Z", "endpoint": endpoint, "status": status,
           "latency_ms": ms, "bytes": 200 + rng.below(20000)}
    text = json.dumps(obj)
    damage = rng.below(400)
    if damage == 0:
        return text[: 10 + rng.below(len(text) - 20)]
    if damage == 1:
        return "[" + text + "]"
    return text


def generate(path, seed=SEED, lines=LINES):
    rng = Rng(seed)
    Path(path).write_text("\n".join(line(rng, i) for i in range(lines)) + "\n", encoding="utf-8")


def nearest_rank(sorted_values, p):
    return sorted_values[max(1, math.ceil(p / 100 * len(sorted_values))) - 1]


def expected(path):
    skipped, per = 0, {}
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            skipped += 1
            continue
        per.setdefault(obj["endpoint"], []).append(obj)
    endpoints = {}
    for name, rows in sorted(per.items()):
        lat = sorted(r["latency_ms"] for r in rows if r["latency_ms"] is not None)
        errors = sum(1 for r in rows if r["status"] >= 500)
        endpoints[name] = {"requests": len(rows), "error_rate": round(errors / len(rows), 4),
                           "p50_ms": nearest_rank(lat, 50), "p95_ms": nearest_rank(lat, 95)}
    slowest = max(sorted(endpoints), key=lambda e: endpoints[e]["p95_ms"])
    return {"endpoints": endpoints, "slowest_endpoint": slowest, "skipped_lines": skipped}


if __name__ == "__main__":
    workspace, seed = sys.argv[1], int(sys.argv[2])
    generate(Path(workspace) / "requests.jsonl", seed)
    if len(sys.argv) > 3 and sys.argv[3] == "--print-answer":
        print(json.dumps(expected(Path(workspace) / "requests.jsonl"), indent=2))
