"""How much one sandboxed tool command costs: ``bash -c true`` through the sandbox (each isolation
mode this machine has) against a plain ``subprocess.run``. Prints median and p90 in milliseconds.

Run: .venv/bin/python benchmarks/agent_sandbox.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from frankenstein.agent.sandbox import Isolation, Sandbox, detect_isolation
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
        extra = [Isolation("userns")] if iso.mode == "root" else []
        for mode in dict.fromkeys([iso, *extra, Isolation("none")]):
            ws = Path(d) / mode.mode  # one workspace per mode: as root the workspace is handed to another uid
            ws.mkdir()
            box = Sandbox(ws, SandboxLimits(), isolation=mode)
            print(line(f"sandbox ({mode.mode})", timed(lambda box=box: box.run("true", timeout_s=30), n)))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
