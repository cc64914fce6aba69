"""The cost of ``frank serve``'s observations on its hot path: the front answering ``POST /count``
locally (no engine work), with and without a :class:`~frankenstein.regioncache.observe.ServedLog`
writing to a real campaign store, alternating A B B A in one run (the machine is shared and noisy).

    .venv/bin/python benchmarks/serve_observe.py                 # 6 rounds x 2000 requests per side
    .venv/bin/python benchmarks/serve_observe.py --rounds 2 --requests 500

One keep-alive client (stdlib ``http.client``) sends small /count bodies one after another; per
round and side: the median and p99 of the client's per-request latency. Reported: each side's
median over rounds and the ratio observed / plain of the medians. The upstream URL answers nothing
(counts never reach it). Every row the log was given is checked to be in the store at the end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import time
from pathlib import Path

from frankenstein.campaign import init_campaign
from frankenstein.engines.process import free_port
from frankenstein.regioncache.cache import RegionCache, load_tokenizer
from frankenstein.regioncache.observe import ServedLog
from frankenstein.regioncache.proxy import start_front
from frankenstein.shipped import data_path


def one_round(port: int, n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    for i in range(n):
        body = json.dumps({"content": f"def f{i % 50}(x):\n    return x\n"})
        t0 = time.perf_counter()
        conn.request("POST", "/count", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        out.append((time.perf_counter() - t0) * 1000.0)
        assert resp.status == 200
    conn.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        camp = init_campaign(Path(tmp) / "c")
        cache = RegionCache(load_tokenizer(data_path("tiny-tokenizer.json")))
        log = ServedLog(camp.store, step=None)
        upstream = f"http://127.0.0.1:{free_port()}"
        fronts = {"plain": start_front(upstream, cache), "observed": start_front(upstream, cache, observe=log)}
        ports = {k: int(f.url.rsplit(":", 1)[1]) for k, f in fronts.items()}
        med: dict[str, list[float]] = {"plain": [], "observed": []}
        p99: dict[str, list[float]] = {"plain": [], "observed": []}
        for r in range(args.rounds):
            for side in ("plain", "observed") if r % 2 == 0 else ("observed", "plain"):  # A B B A ...
                lat = sorted(one_round(ports[side], args.requests))
                med[side].append(statistics.median(lat))
                p99[side].append(lat[int(0.99 * (len(lat) - 1))])
        for f in fronts.values():
            f.shutdown()
        log.close()
        stored = len(camp.store.served_requests())
        camp.close()
    want = args.rounds * args.requests
    assert stored == want, f"{stored} rows stored, {want} requests observed"
    for side in ("plain", "observed"):
        print(
            f"{side:<9} median {statistics.median(med[side]):.4f} ms  p99 {statistics.median(p99[side]):.4f} ms "
            f"(medians over {args.rounds} rounds of {args.requests})"
        )
    ratio = statistics.median(med["observed"]) / statistics.median(med["plain"])
    print(f"observed / plain (median latency): {ratio:.3f}; {stored} rows stored")


if __name__ == "__main__":
    main()
