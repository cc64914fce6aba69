"""Starts and wall time to a verdict, simulated under the measured GPU noise (issue 33, item 3).

    .venv/bin/python benchmarks/fewer_starts.py --designs 2000 --seed 7

The noise: an 8-block A/A design on the H200 measured a block log-ratio sd of 0.0108 for decode ms/token, so
each start's log value has sd 0.0108 / sqrt(2); the second start of every block runs 2 % faster (an order
effect); the part makes decode 2 % faster (the effect to find), or changes nothing (the null). Arm orders are
drawn independently per block (the seed's designs) or counter-balanced in pairs (``order = "balanced"``).
Every simulated design is decided by frank's own code (``rules.decide``; a curtailed run stops at the first
block after which ``rules.can_change`` says no remaining block could change the verdict, the runner's own
test, so its verdict is the fixed design's and only its length differs).

Printed per design: power at the 2 % effect, the rate of confirmations with no effect (alpha 0.05), the
expected blocks and starts to a verdict at the effect and at no effect, and the wall time at ``--start-min``
minutes a start (3: a vLLM start on the H200, engine start alone).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from frankenstein.design.rules import BlockRule, can_change, decide, parse_rule

SD_BLOCK = 0.0108
ORDER = 0.02  # the second start of a block runs this much faster
EFFECT = 0.02  # the candidate's decode is this much faster


@dataclass(frozen=True)
class Design:
    name: str
    rule: BlockRule
    blocks: int
    balanced: bool
    curtail: bool


DESIGNS = [
    Design("seed: 5 blocks, sign, fixed", parse_rule("sign"), 5, False, False),
    Design("seed: 10 blocks, sign, fixed", parse_rule("sign"), 10, False, False),
    Design("6 blocks, permutation, fixed", parse_rule("permutation"), 6, False, False),
    Design("8 blocks, permutation, fixed", parse_rule("permutation"), 8, False, False),
    Design("10 blocks, permutation, fixed", parse_rule("permutation"), 10, False, False),
    Design("10 blocks, sign, curtailed", parse_rule("sign"), 10, False, True),
    Design("10 blocks, permutation, curtailed", parse_rule("permutation"), 10, False, True),
    Design("10 blocks, sign, balanced, curtailed", parse_rule("sign"), 10, True, True),
    Design("10 blocks, order_adjusted, balanced", parse_rule("order_adjusted"), 10, True, False),
    Design("6 blocks, permutation, balanced, curtailed", parse_rule("permutation"), 6, True, True),
]


def gains(rng: np.random.Generator, d: Design, effect: float) -> list[float]:
    """Block gains log(served / candidate): positive = the candidate faster."""
    out, served_first = [], True
    sd = SD_BLOCK / math.sqrt(2)
    for b in range(d.blocks):
        served_first = (not served_first) if d.balanced and b % 2 else bool(rng.integers(2))
        second = -math.log1p(-ORDER)  # log of how much slower the first start is than the second
        s = rng.normal(0, sd) + (second if served_first else 0.0)
        c = -effect + rng.normal(0, sd) + (0.0 if served_first else second)
        out.append(s - c)
    return out


def blocks_run(d: Design, g: list[float]) -> int:
    if not d.curtail:
        return d.blocks
    return next((k for k in range(1, d.blocks) if not can_change(d.rule, g[:k], d.blocks - k)), d.blocks)


def simulate(d: Design, effect: float, designs: int, seed: int) -> tuple[float, float]:
    """(rate confirmed, mean blocks run)."""
    rng = np.random.default_rng(seed)
    hits, blocks = 0, 0
    for _ in range(designs):
        g = gains(rng, d, effect)
        hits += decide(d.rule, g, "lower").word == "confirmed"
        blocks += blocks_run(d, g)
    return hits / designs, blocks / designs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--designs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--start-min", type=float, default=3.0)
    args = ap.parse_args()
    effect = -math.log1p(-EFFECT)
    print(f"block sd {SD_BLOCK}, order effect {ORDER:.0%}, effect {EFFECT:.0%}; {args.designs} designs per row")
    print(
        f"{'design':44} {'power':>6} {'null':>6} {'starts (effect)':>15} {'starts (null)':>13} "
        f"{'min (effect)':>12} {'min (null)':>10}"
    )
    for d in DESIGNS:
        pw, at = simulate(d, effect, args.designs, args.seed)
        null, at0 = simulate(d, 0.0, args.designs, args.seed + 1)
        s1, s0 = 2 * at, 2 * at0
        print(
            f"{d.name:44} {pw:>6.3f} {null:>6.3f} {s1:>15.1f} {s0:>13.1f} "
            f"{s1 * args.start_min:>12.0f} {s0 * args.start_min:>10.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
