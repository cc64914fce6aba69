"""Per-arm latency percentiles stay cheap on a large design: `arm_percentiles` (design/percentiles.py) over
``--starts`` ok starts × ``--turns`` stored turns, each turn with ``--tokens`` generated tokens and as many
chunk gaps less one (the per-chunk ITL rows that `frank replay` stores since the stream client keeps them).

A real campaign on disk (frank.db, SQLite), a design registered through the code `frank register` uses, starts
inserted through the store (with the evidence chain), then, median of ``--repeat``:

- ``arm_percentiles`` (reads every turn's JSON back from SQLite, pools and sorts),
- ``analyze`` without them (the exact design analysis),
- the stored size of frank.db.

Run: .venv/bin/python benchmarks/percentile_cost.py [--starts 40] [--turns 500] [--tokens 64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from stored_design import stored_design

from frankenstein.design.analysis import analyze
from frankenstein.design.percentiles import arm_percentiles


def turns(rng: random.Random, n: int, tokens: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for i in range(n):
        gaps = [round(rng.uniform(2.0, 6.0), 3) for _ in range(tokens - 1)]
        ttft = rng.uniform(20.0, 80.0)
        rows.append(
            {
                "idx": i,
                "turn_id": f"t{i}",
                "warmup": int(i == 0),
                "ttft_ms": ttft,
                "e2e_ms": ttft + sum(gaps),
                "generated_tokens": tokens,
                "prompt_ms": ttft - 5.0,
                "decode_ms": sum(gaps) - 0.2,
                "pre_ms": 5.0,
                "post_ms": 0.2,
                "chunk_gaps_ms": gaps,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=40)
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        c, reg, write_s = stored_design(Path(tmp) / "c", a.starts, lambda rng: turns(rng, a.turns, a.tokens))
        blocks = a.starts // 2
        per, plain = [], []
        for _ in range(a.repeat):
            t = time.perf_counter()
            table = arm_percentiles(c.store, reg.design_id)
            per.append(time.perf_counter() - t)
            t = time.perf_counter()
            analyze(c, reg.design_id)
            plain.append(time.perf_counter() - t)
        db = (c.root / "frank.db").stat().st_size
        c.close()
    turns_n = blocks * 2 * a.turns
    gaps = table["served"]["itl_ms"]["n"] + table["candidate"]["itl_ms"]["n"]
    print(
        f"{blocks * 2} ok starts x {a.turns} turns ({turns_n} stored turns, {a.tokens} tokens each; {gaps} pooled "
        f"chunk gaps), inserted in {write_s:.1f} s, frank.db {db / 2**20:.1f} MiB"
    )
    print(
        f"arm_percentiles: median {statistics.median(per) * 1000:.0f} ms (min {min(per) * 1000:.0f}, "
        f"max {max(per) * 1000:.0f}) of {a.repeat}; analyze without them: median "
        f"{statistics.median(plain) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
