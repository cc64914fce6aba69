"""Wall time of one design on a Ray cluster of 1 node against 3 nodes, measured in one run.

A 6-block design of command arms (each start sleeps a few seconds and prints fixed metrics, so the work
is waiting, not computing: this machine's cores do not limit how many hosts can wait at once) runs with
``frank run --ray`` on a loopback cluster of one node and on one of three (:mod:`frankenstein.cluster.local`:
every node in one network namespace holding only ``lo``). Each size runs ``--rounds`` times, alternating,
in fresh campaigns; the ratio is of the medians.

    .venv/bin/python benchmarks/cluster_blocks.py                   # 6 blocks, 2 s per start, 2 rounds
    .venv/bin/python benchmarks/cluster_blocks.py --seconds 3 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from frankenstein.cluster.local import LocalCluster

BENCH = (
    "import json, sys, time; time.sleep(float(sys.argv[2])); print(json.dumps({'verify_step_ms': float(sys.argv[1])}))"
)

DESIGN = """\
name = "blocks"
kind = "speed"
blocks = {blocks}
primary_metric = "verify_step_ms"

[arms.served]
command = {served}

[arms.candidate]
command = {candidate}

[rule]
kind = "all_blocks_better"
alpha = 0.05
"""


def frank(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "frankenstein", *args], check=True, capture_output=True, text=True)


def campaign(root: Path, blocks: int, seconds: float) -> str:
    frank("init", str(root))
    bench = root / "bench.py"
    bench.write_text(BENCH)
    arm = [sys.executable, str(bench)]
    (root / "d.toml").write_text(
        DESIGN.format(
            blocks=blocks,
            served=json.dumps([*arm, "2.0", str(seconds)]),
            candidate=json.dumps([*arm, "1.5", str(seconds)]),
        )
    )
    frank("register", str(root / "d.toml"), "-c", str(root))
    return "blocks-1"


def timed_run(lc: LocalCluster, root: Path, design_id: str) -> float:
    argv = [sys.executable, "-m", "frankenstein", "run", design_id, "-c", str(root), "--ray", lc.address]
    t0 = time.perf_counter()
    r = subprocess.run(lc.command(argv), capture_output=True, text=True)
    took = time.perf_counter() - t0
    if r.returncode != 0 or not r.stdout.strip().endswith("0 already recorded"):
        raise SystemExit(f"run failed: {r.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2.0, help="how long each start takes")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fb-", dir="/tmp"))
    clusters = {1: LocalCluster(root / "one"), 3: LocalCluster(root / "three")}
    times: dict[int, list[float]] = {1: [], 3: []}
    try:
        clusters[1].start(["solo"])
        clusters[3].start(["a", "b", "c"])
        for i in range(args.rounds):
            for n in (1, 3) if i % 2 == 0 else (3, 1):
                c = root / f"c{n}-{i}"
                times[n].append(timed_run(clusters[n], c, campaign(c, args.blocks, args.seconds)))
                print(f"round {i + 1}: {n} node(s): {times[n][-1]:.1f} s", flush=True)
    finally:
        for lc in clusters.values():
            lc.stop()
        shutil.rmtree(root, ignore_errors=True)
    one, three = statistics.median(times[1]), statistics.median(times[3])
    starts = 2 * args.blocks
    print(f"{args.blocks} blocks × 2 arms × {args.seconds:g} s per start ({starts * args.seconds:g} s of starts):")
    print(f"  1 node: median {one:.1f} s; 3 nodes: median {three:.1f} s; 1 node / 3 nodes = {one / three:.2f}")


if __name__ == "__main__":
    main()
