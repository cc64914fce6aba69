"""What a cold read of the real model costs against a cached one: the bound on what prefetch
(design/prefetch.py) can save a start. The file is evicted from the page cache with ``fadvise(DONTNEED)`` of
that file only, checked with ``mincore`` (``resident_share``), then read whole; then read again from the cache;
``--rounds`` times, in one run. The launch → ready times with and without prefetch come from
``pytest -s -m real tests/test_prefetch.py``.

Run: .venv/bin/python benchmarks/model_read.py [--rounds 3] [--model PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from real_model import model_path

from frankenstein.design.prefetch import resident_share


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_s(path: Path) -> float:
    t = time.perf_counter()
    with path.open("rb", buffering=0) as f:
        while f.read(1 << 22):
            pass
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", type=Path, default=None)
    a = ap.parse_args()
    model = a.model or model_path()
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(a.rounds):
        evict(model)
        share = resident_share([model])
        assert share is not None and share < 0.01, f"{model}: {share} still in the page cache after DONTNEED"
        cold.append(read_s(model))
        assert resident_share([model]) == 1.0
        warm.append(read_s(model))
    mb = model.stat().st_size / 1e6
    print(f"{model.name} ({mb:.0f} MB), {a.rounds} rounds (load average {os.getloadavg()[0]:.1f} at the end)")
    print(
        f"  evicted: {' / '.join(f'{x:.3f}' for x in cold)} s (median {statistics.median(cold):.3f}); cached: "
        f"{' / '.join(f'{x:.3f}' for x in warm)} s (median {statistics.median(warm):.3f}); "
        f"cold / cached {statistics.median(cold) / statistics.median(warm):.1f}"
    )


if __name__ == "__main__":
    main()
