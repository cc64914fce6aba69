"""False-positive rate of each decision rule over many A/A designs (the same recipe in both arms).

An A/A design has no true effect, so every firing -- "confirmed" or "harm shown" -- is a false
positive; both are counted (and shown apart). Each simulated design draws per-block log ratios from
a noise model (or resamples real A/A blocks from a CSV), runs them through ``rules.decide`` (the code
that gives verdicts), and counts how often each rule fires. The measured rate is printed with its
exact (Clopper-Pearson) 95% interval beside the exact size the rule has under the null for
continuous, symmetric noise, and whether that interval tells the exact size from alpha.

The default block counts (6, 8, 10) are where the rules differ: at 5 blocks every one-sided rule
fires only when all five blocks go one way (the same event), and a two-sided test cannot reach 0.05.

    .venv/bin/python benchmarks/aa_false_positive.py                      # normal noise, randomized order
    .venv/bin/python benchmarks/aa_false_positive.py --designs 20000 --blocks 6 8 10   # docs/statistics.md
    .venv/bin/python benchmarks/aa_false_positive.py --noise t3           # heavy tails
    .venv/bin/python benchmarks/aa_false_positive.py --order-effect 0.02 --fixed-order   # why we randomize
    .venv/bin/python benchmarks/aa_false_positive.py --aa aa_blocks.csv   # resample real A/A blocks
    .venv/bin/python benchmarks/aa_false_positive.py --aa aa_blocks.csv --center   # their noise shape only
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from scipy import stats as sps

from frankenstein.design import stats
from frankenstein.design.blockcsv import read_blocks_csv
from frankenstein.design.rules import Rule, decide, parse_rule, unreachable_reason
from frankenstein.design.table import render_table

Draw = Callable[[np.random.Generator, int], np.ndarray]


def rules_at(alpha: float) -> list[tuple[str, Rule]]:
    return [
        ("all_blocks_better", parse_rule("all_blocks_better", alpha=alpha)),
        ("sign", parse_rule("sign", alpha=alpha)),
        ("permutation", parse_rule("permutation", alpha=alpha)),
        ("permutation two-sided", parse_rule("permutation", alpha=alpha, side="two-sided")),
        ("harm (permutation)", parse_rule("harm", alpha=alpha)),
        ("harm (sign)", parse_rule("harm", alpha=alpha, test="sign")),
    ]


def exact_size(name: str, n: int, alpha: float) -> Fraction:
    """The rule's false-positive rate under the null for continuous symmetric noise."""
    a = stats.exact_fraction(alpha)
    if name == "all_blocks_better":
        return Fraction(1, 2**n)
    if name in ("sign", "harm (sign)"):
        c = stats.sign_critical_count(n, a)
        return Fraction(0) if c is None else stats.sign_test(c, n, cross_check=False).p
    if name == "permutation two-sided":
        return Fraction(2 * math.floor(a * 2**n / 2), 2**n)
    return Fraction(math.floor(a * 2**n), 2**n)


def noise_model(kind: str, sd: float, order_effect: float, fixed_order: bool) -> Draw:
    """Per-block log ratios ln(candidate/served) with no true effect.

    An order effect makes the arm started second faster by ``order_effect`` on the log scale. With
    the arm order randomized per block it adds +-order_effect at random (still symmetric); with a
    fixed order (served always first) it shifts every block toward the candidate.
    """

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        if kind == "t3":
            base = sd * rng.standard_t(3, n) / math.sqrt(3)  # unit variance t with 3 degrees of freedom
        else:
            base = sd * rng.standard_normal(n)
        second = np.ones(n) if fixed_order else rng.choice([-1.0, 1.0], n)  # +1: candidate started second
        return base - order_effect * second

    return draw


def resampler(path: str, center: bool) -> tuple[Draw, str]:
    """Blocks drawn with replacement from real A/A blocks. As they are, they keep any systematic
    difference between the arms (and, in a small file, its chance mean); ``center`` removes the
    mean so that only the shape of the noise (tails, skew) is tested."""
    data = read_blocks_csv(path)
    raw = np.asarray(stats.log_ratios(data.served, data.candidate))
    logs = raw - raw.mean() if center else raw

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(logs, n, replace=True)

    how = "centred" if center else "as recorded"
    return draw, (
        f"resampled blocks of {path}, {how} ({len(raw)} A/A blocks, mean log ratio {raw.mean():+.4f}, "
        f"sd {raw.std(ddof=1):.4f})"
    )


def run(draw: Draw, blocks: list[int], designs: int, alpha: float, seed: int) -> list[list[str]]:
    rows = []
    for n in blocks:
        rng = np.random.default_rng([seed, n])
        gains = [-draw(rng, n) for _ in range(designs)]  # lower is better: gain = -log ratio
        for name, rule in rules_at(alpha):
            if unreachable_reason(rule, n):
                rows.append([str(n), name, "-", "-", "-", "-", "unreachable", "-", "-"])
                continue
            words = [decide(rule, list(g), "lower").word for g in gains]
            confirmed, harm = words.count("confirmed"), words.count("harm shown")
            fired = confirmed + harm
            ci = sps.binomtest(fired, designs).proportion_ci(0.95, method="exact")
            size = exact_size(name, n, alpha)
            inside = "yes" if ci.low <= float(size) <= ci.high else "NO"
            apart = "yes" if not ci.low <= alpha <= ci.high else "no"
            rows.append(
                [
                    str(n),
                    name,
                    f"{fired}/{designs}",
                    f"{confirmed} + {harm}",
                    f"{fired / designs:.4f}",
                    f"[{ci.low:.4f}, {ci.high:.4f}]",
                    f"{size} = {float(size):.4f}",
                    inside,
                    apart,
                ]
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", type=int, default=20000, help="simulated A/A designs per block count")
    ap.add_argument("--blocks", type=int, nargs="+", default=[6, 8, 10])
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--sd", type=float, default=0.02, help="sd of the block log ratio")
    ap.add_argument("--noise", choices=["normal", "t3"], default="normal")
    ap.add_argument("--order-effect", type=float, default=0.0, help="log speed-up of the arm started second")
    ap.add_argument("--fixed-order", action="store_true", help="served always first (no randomization)")
    ap.add_argument("--aa", help="CSV of real A/A blocks (block,served,candidate) to resample instead")
    ap.add_argument("--center", action="store_true", help="with --aa: subtract the file's mean log ratio")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    if a.aa:
        draw, source = resampler(a.aa, a.center)
    else:
        draw = noise_model(a.noise, a.sd, a.order_effect, a.fixed_order)
        order = "fixed order (served first)" if a.fixed_order else "arm order randomized per block"
        source = f"{a.noise} noise, sd of the block log ratio {a.sd:g}, order effect {a.order_effect:g}, {order}"
    t0 = time.perf_counter()
    rows = run(draw, a.blocks, a.designs, a.alpha, a.seed)
    print(f"A/A false-positive rate: {a.designs} designs per block count, alpha = {a.alpha:g}, seed {a.seed}")
    print(f"source: {source}")
    print()
    head = [
        "blocks",
        "rule",
        "fired",
        "confirmed + harm",
        "rate",
        "95% CI (exact)",
        "exact size",
        "size in CI",
        "CI excludes alpha",
    ]
    for line in render_table(head, rows, "rlrrrrrll"):
        print(line)
    print()
    print(f"elapsed: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
