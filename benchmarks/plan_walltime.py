"""``frank plan DESIGN.toml``'s wall-time estimate against real runs of three sizes (issue 33, item 1).

    .venv/bin/python benchmarks/plan_walltime.py                   # the tiny model, ~2-4 min on 2 cores
    .venv/bin/python benchmarks/plan_walltime.py --turns 4 16 48 --blocks 2 3 4
    .venv/bin/python benchmarks/plan_walltime.py --model $FRANK_REAL_MODEL --turns 4 8 16 --blocks 2 2 3
    .venv/bin/python benchmarks/plan_walltime.py --run-pilot        # the pilot frank plan --run-pilot runs

A campaign on the shipped tiny model; a 2-block pilot of the first workload size is run; then for each size
(workload turns x blocks) the design file is planned from the pilot (``budget_plan``: the pilot's phases, its
replay scaled by the turns), registered and run (``run_design``), and the estimate is compared with the run's
wall time. Printed per size: turns, blocks, estimate, real, error, and the seconds the run's stored phases
account for (its starts and the gaps between them: the rest is run_design's own work before the first start).
With ``--run-pilot`` the pilot is the one ``frank plan DESIGN.toml --run-pilot`` builds from the first size's
design file (its served arm twice, ``--pilot-blocks`` blocks: ``design/aapilot.py``) instead of a 2-block
served-vs-candidate design.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from frankenstein.campaign import Campaign, init_campaign
from frankenstein.design.aapilot import pilot_line, prepare_pilot, run_pilot
from frankenstein.design.budget import budget_plan
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.design.timespent import summarize
from frankenstein.workload.trace import Turn, write_trace

TOML = """\
name = "bench"
served = "base"

[recipes.base]
engine = "llamacpp"
model = "{model}"
args = ["--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--seed", "1"]
start_timeout_s = 120

[parts.batch]
description = "a smaller batch"
args = ["--batch-size", "256"]
"""

DESIGN = """\
name = "{name}"
kind = "speed"
hypothesis = "the part changes time per verify step"
blocks = {blocks}
workload = "workloads/w{turns}.jsonl"
primary_metric = "verify_step_ms"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["batch"]

[rule]
kind = "sign"
alpha = 0.5

[replay]
warmup_turns = 1
"""


def workload(root: Path, turns: int) -> None:
    rows = [
        Turn(
            turn_id=f"s1-{i:04d}",
            session_id="s1",
            turn_index=i,
            endpoint="/completion",
            request={"prompt": f"def f{i}(x):\n    ", "cache_prompt": True},
            output={"text": "    return x", "completion_tokens": 64},
            source="bench",
        )
        for i in range(turns)
    ]
    write_trace(root / "workloads" / f"w{turns}.jsonl", rows)


def design(c: Campaign, name: str, turns: int, blocks: int) -> Path:
    path = c.root / f"{name}.toml"
    path.write_text(DESIGN.format(name=name, turns=turns, blocks=blocks))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, nargs=3, default=[4, 16, 48])
    ap.add_argument("--blocks", type=int, nargs=3, default=[2, 3, 4])
    ap.add_argument("--model", default="pkg:tiny-target.gguf", help="a GGUF file (e.g. $FRANK_REAL_MODEL)")
    ap.add_argument("--run-pilot", action="store_true", help="plan from the A/A pilot frank plan --run-pilot runs")
    ap.add_argument("--pilot-blocks", type=int, default=3, help="the --run-pilot pilot's blocks")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        c = init_campaign(Path(tmp) / "c", toml=TOML.replace("{model}", args.model))
        (c.root / "workloads").mkdir(exist_ok=True)
        for t in args.turns:
            workload(c.root, t)
        if args.run_pilot:
            ready = prepare_pilot(c, design(c, "size0", args.turns[0], args.blocks[0]), blocks=args.pilot_blocks)
            pilot = run_pilot(c, ready, echo=lambda s: None)
            print(f"{pilot_line(pilot)}: {args.turns[0]} turns ({args.model})")
            pilot_id = pilot.design_id
        else:
            pilot_id = register(c, design(c, "pilot", args.turns[0], 2)).design_id
            run_design(c, pilot_id, echo=lambda s: None)
            print(f"pilot {pilot_id}: 2 blocks x 2 arms of {args.turns[0]} turns ({args.model})")
        print(f"{'turns':>5} {'blocks':>6} {'estimate s':>10} {'real s':>8} {'error':>7} {'in starts and gaps s':>20}")
        for i, (turns, blocks) in enumerate(zip(args.turns, args.blocks, strict=True)):
            path = design(c, f"size{i}", turns, blocks)
            estimate = budget_plan(c, path, pilot_id, effect=0.05, sd=0.05).rows[0].seconds
            reg = register(c, path)
            t0 = time.monotonic()
            run_design(c, reg.design_id, echo=lambda s: None)
            real = time.monotonic() - t0
            phases = summarize(c.store.starts_of(reg.design_id))
            inside = phases.starts_s + phases.between_s
            error = (estimate - real) / real
            print(f"{turns:>5} {blocks:>6} {estimate:>10.2f} {real:>8.2f} {error:>+7.1%} {inside:>20.2f}", flush=True)
        c.close()


if __name__ == "__main__":
    main()
