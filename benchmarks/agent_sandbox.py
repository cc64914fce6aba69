"""How much one sandboxed tool command costs: ``bash -c true`` through the sandbox (each isolation
mode and workspace quota this machine has) against a plain ``subprocess.run``; and what a tmpfs
workspace adds per episode (made, seeded with 5 MB in 200 files, copied back, freed). Prints median and
p90 in milliseconds.

Run: .venv/bin/python benchmarks/agent_sandbox.py [N]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from frankenstein.agent.sandbox import TMPFS, Isolation, Sandbox, detect_isolation
from frankenstein.agent.tasks import SandboxLimits


def timed(fn: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) * 1000)
    return out


def line(name: str, ms: list[float]) -> str:
    p90 = sorted(ms)[int(0.9 * (len(ms) - 1))]
    return f"{name:<28} median {statistics.median(ms):7.1f} ms   p90 {p90:7.1f} ms   (n={len(ms)})"


def main(n: int) -> None:
    iso = detect_isolation()
    with tempfile.TemporaryDirectory() as d:
        print(line("plain subprocess bash", timed(lambda: subprocess.run(["/bin/bash", "-c", "true"]), n)))
        extra = [Isolation("root"), Isolation("userns", quota=TMPFS), Isolation("userns")] if iso.mode == "root" else []
        for mode in dict.fromkeys([iso, *extra, Isolation("none")]):
            ws = Path(d) / f"{mode.mode}-{mode.quota}"  # one per mode: as root the workspace goes to another uid
            ws.mkdir()
            with Sandbox(ws, SandboxLimits(), isolation=mode) as box:
                ms = timed(lambda box=box: box.run("true", timeout_s=30), n)
            print(line(f"sandbox ({mode.mode}, {mode.quota})", ms))
        userns = [Isolation("userns", quota=TMPFS)] if iso.mode == "root" else []
        for mode in dict.fromkeys([iso, *userns, Isolation(iso.mode)]):
            print(
                line(
                    f"episode workspace ({mode.mode}, {mode.quota})",
                    timed(lambda mode=mode: _episode(Path(d), mode), n),
                )
            )


def _episode(d: Path, iso: Isolation) -> None:
    """A fresh seeded folder, its sandbox made and closed (a tmpfs: seeded, copied back, freed)."""
    ws = d / "episode"
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir()
    for i in range(200):
        (ws / f"f{i}.txt").write_bytes(b"x" * 25_000)
    Sandbox(ws, SandboxLimits(), isolation=iso).close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
