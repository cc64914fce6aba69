"""Progress costs nothing next to a start, and its first line arrives soon after `frank run` is launched.

1. In process: ``RunProgress(N)`` (frankenstein.progress) entering and leaving ``N`` slots with one turn update
   each, writing to a StringIO: plain lines (a heartbeat thread per start) and rich bars (``tty=True``);
   per start, median of ``--repeat``.
2. Real processes, ``--runs`` times, alternating: `frank run` of a registered command design (2 blocks, each
   start a Python script printing its metric) with stdout and stderr as pipes, timed from ``Popen`` to its
   first progress line (``start 1/4 begins``) and to its exit; beside it ``frank --version`` (interpreter
   start and the CLI's imports), so the ratio first line / --version says how much of the wait is Python.

Run: .venv/bin/python benchmarks/progress_cost.py [--starts 1000] [--repeat 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers_campaign import make_campaign  # noqa: E402
from helpers_tamper import write_command_design  # noqa: E402

from frankenstein.design.registry import register  # noqa: E402
from frankenstein.progress import HEARTBEAT_ENV, RunProgress  # noqa: E402

FRANK = [sys.executable, "-m", "frankenstein"]


def per_start(n: int, tty: bool) -> float:
    out = io.StringIO()
    t = time.perf_counter()
    with RunProgress(n, stream=out, tty=tty) as rp:
        for i in range(n):
            with rp.slot(f"block {i // 2 + 1} · served") as update:
                update(1, 1)
    took = time.perf_counter() - t
    assert out.getvalue(), "progress wrote nothing"
    return took / n


def first_line(did: str, root: Path, env: dict[str, str]) -> tuple[float, float, str]:
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [*FRANK, "run", did, "-c", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert p.stderr is not None
    line = p.stderr.readline()
    first = time.perf_counter() - t0
    _, err = p.communicate(timeout=120)
    total = time.perf_counter() - t0
    assert p.returncode == 0, err
    assert " start 1/4 begins: " in line, line
    return first, total, line.rstrip()


def version_s() -> float:
    t = time.perf_counter()
    subprocess.run([*FRANK, "--version"], capture_output=True, check=True, timeout=60)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    plain = [per_start(a.starts, tty=False) for _ in range(a.repeat)]
    bars = [per_start(a.starts, tty=True) for _ in range(a.repeat)]
    print(
        f"RunProgress({a.starts}), one slot and one update per start, to a StringIO, median of {a.repeat}: "
        f"plain lines {statistics.median(plain) * 1e6:.0f} us per start, rich bars "
        f"{statistics.median(bars) * 1e6:.0f} us per start"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", HEARTBEAT_ENV)}
    firsts, totals, versions = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        line = ""
        for r in range(a.runs):
            c = make_campaign(Path(tmp) / f"c{r}")  # a fresh campaign per run: every start runs
            did = register(c, write_command_design(c.root, "kernel", blocks=2, alpha=0.5)).design_id
            c.close()
            if r % 2:
                versions.append(version_s())
            first, total, line = first_line(did, c.root, env)
            firsts.append(first)
            totals.append(total)
            if not r % 2:
                versions.append(version_s())
    m_first, m_version = statistics.median(firsts), statistics.median(versions)
    print(f"frank run in pipes (4 command-arm starts), first stderr line: {line!r}")
    print(
        f"  first line after {', '.join(f'{x:.2f}' for x in firsts)} s (median {m_first:.2f}); whole run "
        f"{', '.join(f'{x:.2f}' for x in totals)} s; frank --version {', '.join(f'{x:.2f}' for x in versions)} s "
        f"(median {m_version:.2f}); first line / --version {m_first / m_version:.2f}"
    )


if __name__ == "__main__":
    main()
