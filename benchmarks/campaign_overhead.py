"""Campaign overhead: the wall time of `frank run` beyond engine starts and replays (target: ≤ 2 % of the
design's wall time), on a real llama-server speed design on the tiny shipped models.

One campaign (`frank init`), the first ``--turns`` turns of the shipped demo workload, a speed design (base vs
base + draft, ``--blocks`` blocks, sign rule) registered with the real CLI; then `frank run` in a subprocess,
timed around the process. Each start's own phases (design/phases.py, stored as ``resources["phases"]``) say
where its time went; the engine's life and the measurement are launch, ready, warm-up, replay, scrape and stop.
Everything else is frank's:

- the arm's cache folders (phase ``caches``), prepared by frank;
- within ``ready``, frank's readiness polling: at most one poll interval per start, reported as a bound
  (``ready_poll_bound_s``, ``overhead_share_with_poll_bound``);
- ``other`` inside starts (machine snapshot, NVML/load sampling around the start, bookkeeping);
- the gaps between starts: the store's ``write_s`` (a start's rows written, before its chain link) and the
  rest of the gap (the link and commit, the runner's checks, the next start's set-up);
- outside any start: interpreter start, imports, campaign open, registry verification, the run lock;
  the imports of what `frank run` loads are timed again in a fresh interpreter (``imports_s``).

overhead = (wall − the engine phases and replays of every start) / wall, for each of ``--repeat`` runs (a
fresh campaign each), in one invocation.

Run: .venv/bin/python benchmarks/campaign_overhead.py [--blocks 6] [--turns 8] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from frankenstein.campaign import open_campaign
from frankenstein.design.timespent import gaps, read
from frankenstein.engines.process import READY_POLL_S
from frankenstein.shipped import data_path
from frankenstein.workload.trace import load_trace, write_trace

# The engine's life and the measurement. Not "caches": preparing an arm's cache folders is frank's own work, so it
# counts as overhead (``cache_folders``). "ready" holds frank's readiness polling, which notices a ready engine
# within one poll interval (READY_POLL_S, at most 25 ms; median 9 ms measured in tests/test_phases_edges.py):
# ``ready_poll_bound_s`` is that largest interval times the starts, an upper bound of what it hides.
ENGINE_PHASES = ("launch", "ready", "warmup", "replay", "scrape", "stop")

DESIGN = """\
name = "overhead"
kind = "speed"
hypothesis = "the draft model changes time per verify step"
blocks = {blocks}
workload = "workloads/w.jsonl"
primary_metric = "verify_step_ms"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["draft"]

[rule]
kind = "sign"
alpha = 0.05

[replay]
warmup_turns = 1
"""


def frank(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "frankenstein", *args], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"frank {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
    return t0, r


IMPORTS = (
    "import time; t = time.perf_counter(); import frankenstein.cli, frankenstein.cli.runs, "
    "frankenstein.design.runner; print(time.perf_counter() - t)"
)


def import_time() -> float:
    """Seconds to import what `frank run` loads (the CLI, its run command, the runner), in a fresh interpreter."""
    r = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120, check=True)
    return float(r.stdout.split()[-1])


def one_run(blocks: int, turns: int) -> dict[str, object]:
    """A fresh campaign, one design of ``blocks`` blocks, registered and run by the real CLI; its numbers."""
    with tempfile.TemporaryDirectory() as d:
        camp = Path(d) / "camp"
        frank("init", str(camp))
        write_trace(camp / "workloads" / "w.jsonl", load_trace(data_path("demo-workload.jsonl")).turns[:turns])
        (camp / "d.toml").write_text(DESIGN.format(blocks=blocks))
        _, reg = frank("register", str(camp / "d.toml"), "-c", str(camp))
        design_id = reg.stdout.split()[1]
        t0, _ = frank("run", design_id, "-c", str(camp))
        t1 = time.time()
        with open_campaign(camp) as c:
            rows = c.store.starts_of(design_id)
            records = [read(s.resources.get("phases")) for s in rows]
            statuses = [s.status for s in rows]
    starts = sorted((r for r in records if r is not None), key=lambda r: r.at)
    assert len(starts) == len(records) == 2 * blocks and set(statuses) == {"ok"}, statuses
    wall = t1 - t0
    engine = sum(sum(r.phases.get(p, 0.0) for p in ENGINE_PHASES) for r in starts)
    inside_other = sum(r.total_s - sum(r.phases.get(p, 0.0) for p in ENGINE_PHASES) for r in starts)
    between = sum(g for g in gaps(starts) if g is not None)
    write = sum(r.write_s or 0.0 for r in starts[:-1])  # the last start's write falls after it, not in a gap
    before = starts[0].at - t0
    after = t1 - (starts[-1].at + starts[-1].total_s)
    overhead = wall - engine
    return {
        "design": design_id,
        "starts": len(starts),
        "wall_s": round(wall, 3),
        "engine_and_replay_s": round(engine, 3),
        "overhead_s": round(overhead, 3),
        "overhead_share": round(overhead / wall, 4),
        "overhead_parts_s": {
            "before_first_start": round(before, 3),
            "inside_starts_other": round(inside_other, 3),
            "between_starts": round(between, 3),
            "of_which_write": round(write, 3),
            "after_last_start": round(after, 3),
            "cache_folders": round(sum(r.phases.get("caches", 0.0) for r in starts), 3),
        },
        "ready_poll_bound_s": round(READY_POLL_S[2] * len(starts), 3),
        "overhead_share_with_poll_bound": round((overhead + READY_POLL_S[2] * len(starts)) / wall, 4),
        "per_start_overhead_ms": round(1000 * (inside_other + between) / len(starts), 1),
        "phases_s": {
            p: round(sum(r.phases.get(p, 0.0) for r in starts), 3)
            for p in sorted({k for r in starts for k in r.phases})
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="runs, each on a fresh campaign")
    args = ap.parse_args()
    runs = [one_run(args.blocks, args.turns) for _ in range(args.repeat)]
    out = {
        "blocks": args.blocks,
        "turns": args.turns,
        "runs": runs,
        "overhead_share": [r["overhead_share"] for r in runs],
        "imports_s": round(import_time(), 3),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
