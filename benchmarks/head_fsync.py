"""What making a commit durable costs: ``--starts`` ok starts (each one chain record with ``--turns`` turns)
inserted through the store into a real campaign on disk (``--dir``, default the system's temp folder), timed
per commit. Each commit writes ``frank.head.pending``, COMMITs (SQLite, WAL) and appends its ``frank.head``
line; since the fsyncs (docs/integrity.md) the pending file and its folder, the WAL (``synchronous=FULL``)
and the head line are each flushed to the disk before the commit returns.

Run: .venv/bin/python benchmarks/head_fsync.py [--starts 200] [--turns 10] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from pathlib import Path

from stored_design import stored_design


def turns(rng: random.Random, n: int) -> list[dict[str, object]]:
    return [
        {"idx": i, "turn_id": f"t{i}", "warmup": 0, "error": None, "decode_ms": rng.uniform(40, 60)} for i in range(n)
    ]


def one(folder: Path | None, starts: int, n_turns: int) -> float:
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        c, _, insert_s = stored_design(Path(tmp) / "c", starts, lambda rng: turns(rng, n_turns))
        c.close()
    return insert_s / starts * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=200)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    ms = [one(a.dir, a.starts, a.turns) for _ in range(a.repeat)]
    print(
        f"{a.starts} commits x {a.repeat}: per commit median {statistics.median(ms):.2f} ms "
        f"(runs {', '.join(f'{x:.2f}' for x in ms)})"
    )


if __name__ == "__main__":
    main()
