"""`frank verify` over the evidence chain is cheap enough to run once per command: a real campaign on disk
(frank.db, SQLite) with a design of ``--starts`` ok starts × ``--turns`` stored turns inserted through the
store (each start one chain record, its digest covering its turns), then, ``--repeat`` times, alternating:

- ``frank verify -c CAMPAIGN``, the real CLI in its own process, timed around the process;
- ``frank --version`` in its own process (the fixed cost of any frank process, for the ratio);
- ``registry.verify`` in this process (the checks alone, no interpreter start).

Run: .venv/bin/python benchmarks/verify_chain.py [--starts 300] [--turns 40] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stored_design import stored_design

from frankenstein.design.registry import verify

FRANK = [sys.executable, "-m", "frankenstein"]


def turns(rng: random.Random, n: int) -> list[dict[str, object]]:
    return [
        {
            "idx": i,
            "turn_id": f"t{i}",
            "warmup": int(i == 0),
            "error": None,
            "decode_ms": rng.uniform(40.0, 60.0),
            "target_steps": 15,
            "generated_tokens": 16,
        }
        for i in range(n)
    ]


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t
    assert p.returncode == 0, (cmd, p.stdout, p.stderr)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=300)
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        c, _, insert_s = stored_design(Path(tmp) / "c", a.starts, lambda rng: turns(rng, a.turns))
        blocks = a.starts // 2
        records = c.store.verify()
        inproc = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            verify(c)
            inproc.append(time.perf_counter() - t)
        c.close()
        cli, bare = [], []
        for r in range(a.repeat):
            for which in ("verify", "version") if r % 2 == 0 else ("version", "verify"):
                if which == "verify":
                    cli.append(timed([*FRANK, "verify", "-c", str(Path(tmp) / "c")]))
                else:
                    bare.append(timed([*FRANK, "--version"]))
        db = (Path(tmp) / "c" / "frank.db").stat().st_size
    m_cli, m_bare = statistics.median(cli), statistics.median(bare)
    print(
        f"{blocks * 2} ok starts x {a.turns} turns ({blocks * 2 * a.turns} stored turns), {records} chain records, "
        f"inserted in {insert_s:.2f} s ({insert_s / (blocks * 2) * 1000:.1f} ms per start), frank.db {db / 2**20:.1f} MiB"
    )
    print(
        f"frank verify (process): median {m_cli:.3f} s (min {min(cli):.3f}, max {max(cli):.3f}) of {a.repeat}; "
        f"frank --version (process): median {m_bare:.3f} s; verify / --version {m_cli / m_bare:.2f}"
    )
    print(f"registry.verify in process: median {statistics.median(inproc):.3f} s of {a.repeat}")


if __name__ == "__main__":
    main()
