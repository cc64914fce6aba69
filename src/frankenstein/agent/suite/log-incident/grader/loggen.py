"""Deterministic generator of the log-incident workspace log, and the reference answers.

A splitmix64 generator (not ``random``) keeps the log byte-identical on every Python version.
Run as ``python loggen.py WORKSPACE SEED`` at copy time; the grader imports it to regenerate the
log and compute the expected answers from that copy, never from the (writable) workspace.
"""

import json
import re
import sys
from pathlib import Path

SEED = 20240514
LINES = 40000
DAY = "2024-05-14"
MASK = (1 << 64) - 1
ROUTES = ["/v1/orders", "/v1/users", "/v1/cart", "/v1/search", "/v1/payments", "/v1/items", "/health"]
SHARDS = [f"db-shard-{i}" for i in range(1, 9)]
# (shard, open second, close second): the real incident is db-shard-7; the others are blips.
OPEN = [("db-shard-2", 4210, 4305), ("db-shard-7", 13272, 13851), ("db-shard-4", 30011, 30140),
        ("db-shard-7", 14020, 14388), ("db-shard-5", 51200, 51990)]
NOISE = ["WARN  cache    miss ratio {r}% over 60s", "DEBUG jvm      gc pause {r}ms", "INFO  auth     token refresh ok",
         "INFO  billing  batch {r} committed", "WARN  search   slow query {r}ms"]


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


def stamp(second, milli):
    h, rest = divmod(second, 3600)
    m, s = divmod(rest, 60)
    return f"{DAY}T{h:02d}:{m:02d}:{s:02d}.{milli:03d}Z"


def open_at(shard, second):
    return any(s == shard and a <= second <= b for s, a, b in OPEN)


def request_line(rng, second, milli):
    shard = SHARDS[rng.below(len(SHARDS))]
    user = f"u{1000 + rng.below(400)}"
    if open_at(shard, second) and rng.below(10) < 7:
        status, ms = 503, 2 + rng.below(5)
    elif rng.below(900) == 0:
        status, ms = 503, 30000
    else:
        status = [200, 200, 200, 200, 201, 204, 404, 400][rng.below(8)]
        ms = 5 + rng.below(200)
    route = ROUTES[rng.below(len(ROUTES))]
    req = f"{rng.next() & 0xFFFFFF:06x}"
    return (f"{stamp(second, milli)} INFO  api-gw req={req} user={user} route={route} status={status} "
            f"ms={ms} upstream={shard}")


def events():
    out = []
    for shard, a, b in OPEN:
        out.append((a, f"ERROR api-gw circuit open for {shard} after 5 consecutive failures"))
        out.append((b, f"INFO  api-gw circuit closed for {shard}"))
    return out


def generate(path, seed=SEED, lines=LINES):
    rng = Rng(seed)
    pending = sorted(events())
    out = []
    for i in range(lines):
        second = i * 86400 // lines
        milli = rng.below(1000)
        while pending and pending[0][0] <= second:
            at, text = pending.pop(0)
            out.append(f"{stamp(at, 0)} {text}")
        kind = rng.below(20)
        if kind < 16:
            out.append(request_line(rng, second, milli))
        elif kind < 19:
            out.append(f"{stamp(second, milli)} " + NOISE[rng.below(len(NOISE))].format(r=rng.below(100)))
        else:
            out.append(f"{stamp(second, milli)} ERROR worker   unhandled exception in job {rng.below(9999)}")
            out.append("Traceback (most recent call last):")
            out.append('  File "/srv/worker/jobs.py", line 88, in run')
            out.append(f"    raise TimeoutError('upstream=db-shard-{1 + rng.below(8)} status=503')")
            out.append("TimeoutError: upstream timed out")
    Path(path).write_text("\n".join(out) + "\n", encoding="utf-8")


REQ = re.compile(r"^(\S+) INFO  api-gw req=\S+ user=(\S+) route=\S+ status=(\d+) ms=\d+ upstream=(\S+)$")
CIRCUIT = re.compile(r"^(\S+) \w+\s+api-gw circuit (open|closed) for (\S+)")


def expected(path):
    """The reference answers, computed from a log file by straightforward parsing."""
    requests, opens, intervals = [], {}, {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        m = REQ.match(line)
        if m:
            requests.append(m.groups())
            continue
        c = CIRCUIT.match(line)
        if c:
            ts, what, shard = c.groups()
            if what == "open":
                opens.setdefault(shard, ts)
                intervals.setdefault(shard, []).append([ts, None])
            else:
                intervals[shard][-1][1] = ts
    length = {s: sum(seconds(b) - seconds(a) for a, b in iv) for s, iv in intervals.items()}
    shard = max(sorted(length), key=lambda s: length[s])
    failed = sum(1 for ts, _, st, up in requests if st == "503" and up == shard
                 and any(a <= ts <= b for a, b in intervals[shard]))
    per_user = {}
    for _, user, st, _ in requests:
        if st == "503":
            per_user[user] = per_user.get(user, 0) + 1
    top = sorted(per_user.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    return {"incident_shard": shard, "first_open": opens[shard], "failed_requests": failed, "top_user": top}


def seconds(ts):
    h, m, s = ts[11:13], ts[14:16], ts[17:23]
    return int(h) * 3600 + int(m) * 60 + float(s)


if __name__ == "__main__":
    workspace, seed = sys.argv[1], int(sys.argv[2])
    (Path(workspace) / "logs").mkdir(exist_ok=True)
    generate(Path(workspace) / "logs" / "service.log", seed)
    if len(sys.argv) > 3 and sys.argv[3] == "--print-answer":
        print(json.dumps(expected(Path(workspace) / "logs" / "service.log"), indent=2))
