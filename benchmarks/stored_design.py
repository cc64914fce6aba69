"""A real campaign holding one speed design of ok starts inserted through the store (its evidence chain
included), for benchmarks of what reads stored turns back (percentiles, verify).

    stored_design(root, starts, turns) -> (campaign, registered, insert_s)

``turns(rng)`` gives one start's turn rows; the rng is seeded, so a run is the same each time.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers_campaign import make_campaign, make_workload, write_design  # noqa: E402

from frankenstein.campaign import Campaign  # noqa: E402
from frankenstein.design.model import Registered  # noqa: E402
from frankenstein.design.registry import register  # noqa: E402

Turns = Callable[[random.Random], list[dict[str, object]]]


def stored_design(root: Path, starts: int, turns: Turns) -> tuple[Campaign, Registered, float]:
    rng = random.Random(1)
    c = make_campaign(root)
    make_workload(c.root / "workloads" / "w.jsonl")
    blocks = starts // 2
    reg = register(c, write_design(c.root / "d.toml", blocks=blocks))
    t0 = time.perf_counter()
    for b in range(blocks):
        for pos, arm in enumerate(reg.schedule[b]):
            c.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="ok",
                started_at="2026-12-04T00:00:00Z",
                metrics={"verify_step_ms": rng.uniform(3.0, 4.0)},
                turns=turns(rng),
            )
    return c, reg, time.perf_counter() - t0
