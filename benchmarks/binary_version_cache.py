"""`llama-server --version` once per binary, not once per start: what `binary_version` (engines/llamacpp.py)
costs a start when it asks the binary (a real ``llama-server --version`` process, as every start did before the
cache) and when it answers from its cache (keyed by the resolved path and the binary's sha256, whose own cache
is keyed by device, inode, size, mtime and ctime: one ``stat`` and two dict lookups), alternating, ``--rounds``
times each, in one run. The uncached side clears the version cache (not the sha256 cache) before each call, so
it is what a start paid before; the first call of all (the sha256 computed once) is printed apart.

The saving is per start of a design after its first (the runner asks once per start, in the ready phase).
That a replaced binary is asked again is tested in tests/test_real_machine.py.

Run: .venv/bin/python benchmarks/binary_version_cache.py [--rounds 20] [--binary PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from frankenstein.engines import llamacpp
from frankenstein.engines.llamacpp import binary_version, find_llama_server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--binary", default=None, help="llama-server binary (default: the one frank finds)")
    a = ap.parse_args()
    binary = a.binary or find_llama_server()
    t = time.perf_counter()
    version = binary_version(binary)  # sha256 of the binary computed here, once
    first_ms = (time.perf_counter() - t) * 1000
    assert version != "unknown", f"{binary}: no version line"
    asked: list[float] = []
    cached: list[float] = []
    for r in range(a.rounds):
        for side in ("asked", "cached") if r % 2 == 0 else ("cached", "asked"):
            if side == "asked":
                llamacpp._VERSION_CACHE.clear()  # what every start paid before the cache
            t = time.perf_counter()
            assert binary_version(binary) == version
            (asked if side == "asked" else cached).append((time.perf_counter() - t) * 1000)
    m_asked, m_cached = statistics.median(asked), statistics.median(cached)
    print(f"{binary}: {version}")
    print(f"first call (runs --version, hashes the binary): {first_ms:.1f} ms")
    print(
        f"asked (a --version process): median {m_asked:.2f} ms (min {min(asked):.2f}, max {max(asked):.2f}); "
        f"cached: median {m_cached:.4f} ms (max {max(cached):.4f}); {a.rounds} each, alternating"
    )
    print(
        f"saved per start after a design's first: {m_asked - m_cached:.2f} ms "
        f"(asked / cached {m_asked / m_cached:.0f}x; load average {os.getloadavg()[0]:.1f} at the end)"
    )


if __name__ == "__main__":
    main()
