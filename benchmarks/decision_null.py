"""Null rejection rates of the issue-28 decisions, simulated: threshold rules at their threshold, unpaired
designs with no effect, candidate families under the complete null (with and without Holm).

Every simulated design is decided by frank's own code (rules.decide, rules.evaluate_unpaired,
rules.decide_family); each row prints the rate, its Clopper-Pearson 95 % interval, the rule's exact
size where it has one, and alpha. A valid test has a rate at or below alpha (within the interval).

    .venv/bin/python benchmarks/decision_null.py --designs 20000 --seed 7
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from scipy import stats as sps

from frankenstein.design.rules import decide, decide_family, evaluate_unpaired, parse_rule

SD = 0.02  # spread of a start's log value (2 %)


def interval(hits: int, n: int) -> tuple[float, float]:
    lo = sps.beta.ppf(0.025, hits, n - hits + 1) if hits else 0.0
    hi = sps.beta.ppf(0.975, hits + 1, n - hits) if hits < n else 1.0
    return float(lo), float(hi)


def threshold_all(rng: np.random.Generator, n: int) -> bool:
    """5 % in every block, the candidate exactly 5 % faster: each block's gain symmetric about the threshold."""
    rule = parse_rule("all_blocks_by", by=0.05)
    g = -math.log(0.95) + rng.normal(0, SD * math.sqrt(2), n)
    return decide(rule, list(g), "lower").word == "confirmed"


def threshold_mean(rng: np.random.Generator, n: int) -> bool:
    rule = parse_rule("mean_by", by=0.05)
    g = -math.log(0.95) + rng.normal(0, SD * math.sqrt(2), n)
    return decide(rule, list(g), "lower").word == "confirmed"


def unpaired(rng: np.random.Generator, n: int) -> bool:
    """n + n starts of the same engine (no effect), values lognormal around 60 s."""
    s, c = np.exp(rng.normal(math.log(60.0), SD, n)), np.exp(rng.normal(math.log(60.0), SD, n))
    return evaluate_unpaired(parse_rule("permutation"), list(s), list(c), "lower", "ratio").word == "confirmed"


def family(k: int, holm: bool) -> Callable[[np.random.Generator, int], bool]:
    """k candidates no better than served, sharing the served starts; all_blocks_better. Without Holm: any
    candidate whose own verdict is confirmed (what k separate designs would give)."""
    rule = parse_rule("all_blocks_better")

    def one(rng: np.random.Generator, n: int) -> bool:
        served = list(np.exp(rng.normal(0, SD, n)))
        cands = {f"c{j}": list(np.exp(rng.normal(0, SD, n))) for j in range(k)}
        fam = decide_family(rule, served, cands, "lower")
        if holm:
            return fam.word == "confirmed"
        return any(r.verdict.word == "confirmed" for r in fam.rows)

    return one


def with_order(rule_kind: str, balanced: bool, effect: float) -> Callable[[np.random.Generator, int], bool]:
    """n blocks, a part ``effect`` (log, negative = faster), the second start of every block 2 % slower, noise
    0.5 % per start; arm orders drawn independently per block, or counter-balanced in pairs."""
    rule = parse_rule(rule_kind)

    def one(rng: np.random.Generator, n: int) -> bool:
        gains, served_first = [], True
        for b in range(n):
            served_first = (not served_first) if balanced and b % 2 else bool(rng.integers(2))
            s = rng.normal(0, 0.005) + (0.0 if served_first else 0.02)
            c = effect + rng.normal(0, 0.005) + (0.02 if served_first else 0.0)
            gains.append(s - c)  # log(served / candidate): positive = candidate faster
        return decide(rule, gains, "lower").word == "confirmed"

    return one


def any_all_better(k: int, n: int) -> Fraction:
    """P(some candidate of k beats served in all n blocks) under the complete null, by inclusion-exclusion:
    j given candidates all below served in a block has probability 1/(j+1)."""
    return sum(
        (Fraction((-1) ** (j + 1) * math.comb(k, j)) * Fraction(1, j + 1) ** n for j in range(1, k + 1)), Fraction(0)
    )


ROWS: list[tuple[str, Callable[[np.random.Generator, int], bool], int, Fraction | None]] = [
    ("all_blocks_by 5 %, effect at the threshold", threshold_all, 5, Fraction(1, 32)),
    ("mean_by 5 %, effect at the threshold", threshold_mean, 6, Fraction(3, 64)),
    ("unpaired 4 + 4, permutation, no effect", unpaired, 4, Fraction(3, 70)),
    ("unpaired 5 + 5, permutation, no effect", unpaired, 5, Fraction(12, 252)),
    ("family of 3, all blocks better, Holm", family(3, True), 6, any_all_better(3, 6)),
    ("family of 3, all blocks better, no Holm", family(3, False), 5, any_all_better(3, 5)),
    ("family of 20, all blocks better, no Holm", family(20, False), 5, any_all_better(20, 5)),
    ("family of 20, all blocks better, Holm", family(20, True), 9, any_all_better(20, 9)),
    ("2 % order effect, no part effect: permutation", with_order("permutation", False, 0.0), 10, Fraction(51, 1024)),
    ("2 % order effect, no part effect: order_adjusted", with_order("order_adjusted", True, 0.0), 10, Fraction(1, 32)),
    ("2 % order effect, 1 % faster: permutation (power)", with_order("permutation", False, -0.01), 10, None),
    ("2 % order effect, 1 % faster: order_adjusted (power)", with_order("order_adjusted", True, -0.01), 10, None),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--only", default="", help="run the rows whose name contains this text")
    args = ap.parse_args()
    print(f"{'design':52} {'n':>3} {'rate':>7} {'95% interval':>17} {'exact':>8} {'alpha':>5}  s")
    for name, one, n, exact in ROWS:
        if args.only and args.only not in name:
            continue
        rng = np.random.default_rng(args.seed)
        t0 = time.perf_counter()
        hits = sum(one(rng, n) for _ in range(args.designs))
        lo, hi = interval(hits, args.designs)
        ex = "-" if exact is None else f"{float(exact):.4f}"
        took = time.perf_counter() - t0
        print(f"{name:52} {n:>3} {hits / args.designs:7.4f} [{lo:.4f}, {hi:.4f}] {ex:>8} {0.05:5}  {took:.0f}")


if __name__ == "__main__":
    main()
