"""frank's own start is cheap: whole `frank` processes timed, the working tree against an older revision's
source in the same run (``--rev``: its ``src/`` taken with ``git archive`` into a temporary folder and put first
on PYTHONPATH; the repository itself is not touched), ``--runs`` times each, rotated, medians.

Timed per source: ``python -c pass`` (the interpreter alone, the floor), ``frank --help``, ``frank --version``,
``frank run`` of a design that is not there (exit 1), and in a fresh interpreter the imports of what `frank run`
loads and of ``frankenstein.progress`` alone (``time.perf_counter`` around the import statements). Each
process is run as ``python -m frankenstein`` with the source on PYTHONPATH, and the first run of each checks
which ``frankenstein`` it imported.

To find what an import costs: ``.venv/bin/python -X importtime -m frankenstein --version``.

Run: .venv/bin/python benchmarks/startup_time.py [--rev 9ea51e2^] [--runs 10]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMPORTS = {
    "imports of frank run": "import frankenstein.cli, frankenstein.cli.runs, frankenstein.design.runner",
    "import frankenstein.progress": "import frankenstein.progress",
}


def source_of(rev: str, into: Path) -> Path:
    blob = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def wall(cmd: list[str], env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    took = time.perf_counter() - t
    assert p.returncode in ok, (cmd, p.returncode, p.stderr[-2000:])
    return took


def import_s(stmt: str, env: dict[str, str]) -> float:
    code = f"import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=120)
    return float(p.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default=None, help="an older revision to compare with (e.g. 9ea51e2^)")
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"working tree": REPO / "src"}
        if a.rev:
            sources[a.rev] = source_of(a.rev, Path(tmp) / "rev")
        camp = Path(tmp) / "empty-campaign"
        camp.mkdir()
        envs = {}
        for name, src in sources.items():
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env["PYTHONPATH"] = str(src)
            where = subprocess.run(
                [sys.executable, "-c", "import frankenstein; print(frankenstein.__file__)"],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout.strip()
            assert where.startswith(str(src)), f"{name}: imported {where}, not {src}"
            envs[name] = env
        py = [sys.executable]
        frank = [sys.executable, "-m", "frankenstein"]
        cases: dict[str, list[str]] = {
            "python -c pass": [*py, "-c", "pass"],
            "frank --help": [*frank, "--help"],
            "frank --version": [*frank, "--version"],
            "frank run (missing design)": [*frank, "run", "no-such-1", "-c", str(camp)],
        }
        got: dict[tuple[str, str], list[float]] = {}
        names = list(sources)
        for r in range(a.runs):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotated: neither always first
                env = envs[name]
                for case, cmd in cases.items():
                    ok = (1,) if case.startswith("frank run") else (0,)
                    got.setdefault((name, case), []).append(wall(cmd, env, ok))
                for case, stmt in IMPORTS.items():
                    got.setdefault((name, case), []).append(import_s(stmt, env))
    print(f"{a.runs} runs per source, rotated; medians in seconds (load average {os.getloadavg()[0]:.1f} at the end)")
    width = max(len(c) for c in [*cases, *IMPORTS])
    print(f"  {'':<{width}}  " + "  ".join(f"{n:>14}" for n in names) + ("  ratio" if len(names) == 2 else ""))
    for case in [*cases, *IMPORTS]:
        meds = [statistics.median(got[(n, case)]) for n in names]
        ratio = f"  {meds[0] / meds[1]:.2f}" if len(meds) == 2 else ""
        print(f"  {case:<{width}}  " + "  ".join(f"{m:>14.3f}" for m in meds) + ratio)
    if len(names) == 2:
        print(f"ratio = {names[0]} / {names[1]}")


if __name__ == "__main__":
    main()
