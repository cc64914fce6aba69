"""Benchmark: the fidelity equivalence test (fidelity/equivalence.py) by simulation, 3 starts per arm.

Goal (issue 29): at a true excess equal to the margin the test passes (a false pass) in at most alpha of
designs, and at half the margin it passes in most. Each simulated design draws a new workload and new
starts, in the shape engines return, and goes through the real code: top-64 lists (fidelity.compare)
and the excess test over every start pair (fidelity.equivalence). The model:

* per position, logits ~ N(0, 5^2) over a 256-token vocabulary (the top 64 hold > 0.99 of the mass);
* every start adds its own run-to-run noise N(0, (noise * s_i)^2) to every logit, with a per-start
  scale s_i ~ lognormal(0, --start-sd): starts of one engine differ as a whole, not only per position;
* the candidate adds ``shift * sens_t * z`` (z ~ N(0, 1) per logit, fixed across its starts), where
  the turn's sensitivity sens_t ~ lognormal(0, --turn-sd / 2): turns differ in how much the part moves
  them (the turn's excess, ∝ sens_t², has a log sd of --turn-sd), which is why positions within a turn
  are not independent. Measured on a real part (the shipped Q8_0 target against the served tiny model,
  32 turns of the demo workload): per-turn mean KL with a log sd of 0.29 (cv 0.28, skewness 0.58); the
  default 0.3 follows it, and --turn-sd 1.0 shows a part whose effect is far more uneven across turns.

The true excess at a shift is calibrated first (the mean of the estimator over --calibrate designs of
4 x --turns turns without whole-start noise, excess ≈ a·shift²); then the pass rate is measured at the
shift whose excess is the margin (a false pass), at half of it (power) and at 0. Beside frank's bound
(turns + starts) it measures, on the same designs, the t bound over turns alone and (--boot resamples)
a percentile bootstrap over turns, which both miss starts that differ as a whole.

    .venv/bin/python benchmarks/fidelity_equivalence.py [--designs 400] [--turns 24] [--per-turn 16]
                     [--margin 0.004] [--noise 0.12] [--start-sd 0.05] [--turn-sd 0.3] [--boot 1000] [--seed 1]
                     [--only-margin]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from frankenstein.engines.forcing import ForcedResult
from frankenstein.fidelity.compare import compare
from frankenstein.fidelity.equivalence import StartPair, excess_test, turn_differences, turn_variance, upper_bound

VOCAB, K = 256, 64


def top_k(full_lp: np.ndarray, turns: int) -> ForcedResult:
    order = np.argpartition(-full_lp, K, axis=1)[:, :K]
    lp = np.take_along_axis(full_lp, order, axis=1)
    rank = np.argsort(-lp, axis=1)
    order, lp = np.take_along_axis(order, rank, axis=1), np.take_along_axis(lp, rank, axis=1)
    p = full_lp.shape[0]
    return ForcedResult(
        path="simulated",
        k_requested=K,
        k_used=K,
        turn_ids=[f"t{i}" for i in range(turns)],
        turn_sha=[f"s{i}" for i in range(turns)],
        turn=np.repeat(np.arange(turns, dtype=np.int32), p // turns),
        pos=np.tile(np.arange(p // turns, dtype=np.int32), turns),
        token=order[:, 0].astype(np.int32),
        ids=order.astype(np.int32),
        logprobs=lp.astype(np.float32),
        n=np.full(p, K, np.int32),
        error=np.zeros(p, bool),
    )


def normalise(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=1, keepdims=True))


def design(rng: np.random.Generator, shift: float, a: argparse.Namespace) -> tuple[list, list]:
    """(floor pairs, candidate pairs) of one simulated design with 3 starts per arm."""
    p = a.turns * a.per_turn
    base = rng.normal(0, 5.0, (p, VOCAB)).astype(np.float32)
    sens = np.repeat(rng.lognormal(0, a.turn_sd / 2, a.turns), a.per_turn)[:, None].astype(np.float32)
    change = shift * sens * rng.standard_normal((p, VOCAB), dtype=np.float32)

    def start(extra: np.ndarray | float) -> ForcedResult:
        scale = np.float32(a.noise * rng.lognormal(0, a.start_sd))
        return top_k(normalise(base + extra + scale * rng.standard_normal((p, VOCAB), dtype=np.float32)), a.turns)

    served = [start(0.0) for _ in range(a.starts)]
    cand = [start(change) for _ in range(a.starts)]
    floor = [
        StartPair(f"s{i}", f"s{j}", compare(x, y)) for i, x in enumerate(served) for j, y in enumerate(served) if i < j
    ]
    return floor, [StartPair(f"s{i}", f"c{j}", compare(x, y)) for i, x in enumerate(served) for j, y in enumerate(cand)]


def bootstrap_upper(
    floor: list[StartPair], cand: list[StartPair], alpha: float, b: int, rng: np.random.Generator
) -> float:
    """A percentile bootstrap over turns (for comparison): resample turns, the 1 - alpha quantile of the mean."""
    d, w = turn_differences(floor, cand)
    idx = rng.integers(0, len(d), (b, len(d)))
    est = (w[idx] * d[idx]).sum(axis=1) / w[idx].sum(axis=1)
    return float(np.quantile(est, 1 - alpha))


def turns_only_upper(floor: list[StartPair], cand: list[StartPair], alpha: float) -> float:
    """The t bound over turns alone (frank's first version): blind to starts that differ as a whole."""
    d, w = turn_differences(floor, cand)
    return upper_bound(float((w * d).sum() / w.sum()), [(turn_variance(d, w), len(d) - 1)], alpha)


def run(shift: float, n: int, a: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    boot_rng = np.random.default_rng(seed + 1)
    est, t_pass, o_pass, b_pass, floors = [], 0, 0, 0, []
    for _ in range(n):
        floor, cand = design(rng, shift, a)
        e = excess_test(floor, cand, a.margin, a.alpha)
        est.append(e.excess)
        floors.append(sum(e.floor) / 2)
        t_pass += e.passed
        o_pass += turns_only_upper(floor, cand, a.alpha) < a.margin
        if a.boot:
            b_pass += bootstrap_upper(floor, cand, a.alpha, a.boot, boot_rng) < a.margin
    return {
        "excess": float(np.mean(est)),
        "excess_se": float(np.std(est, ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
        "floor": float(np.mean(floors)),
        "t_pass": t_pass / n,
        "turns_pass": o_pass / n,
        "boot_pass": b_pass / n,
    }


def _clopper_pearson(k: int, n: int) -> tuple[float, float]:
    from scipy import stats as sps

    lo = float(sps.beta.ppf(0.025, k, n - k + 1)) if k else 0.0
    hi = float(sps.beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0
    return lo, hi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--designs", type=int, default=400)
    ap.add_argument("--calibrate", type=int, default=200)
    ap.add_argument("--turns", type=int, default=24)
    ap.add_argument("--per-turn", type=int, default=16)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--margin", type=float, default=0.004)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--noise", type=float, default=0.12)
    ap.add_argument("--start-sd", type=float, default=0.05)
    ap.add_argument("--turn-sd", type=float, default=0.3)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only-margin", action="store_true", help="measure only the false-pass rate at the margin")
    a = ap.parse_args()
    t0 = time.perf_counter()
    probe = 0.06
    # Calibrate on larger designs without whole-start noise (it moves both pair kinds alike, not the mean excess):
    # the estimator's mean over them is the true excess at the probe shift, with a quarter of the variance.
    quiet = argparse.Namespace(**{**vars(a), "boot": 0, "start_sd": 0.0, "turns": 4 * a.turns})
    cal = run(probe, a.calibrate, quiet, a.seed + 100)
    k = cal["excess"] / probe**2  # excess ≈ k · shift²
    at_margin, at_half = math.sqrt(a.margin / k), math.sqrt(a.margin / 2 / k)
    print(
        f"model: {a.turns} turns x {a.per_turn} positions, {a.starts} starts per arm, top-{K} of {VOCAB}, noise "
        f"{a.noise} (start sd {a.start_sd}, turn sd {a.turn_sd}); noise floor ~{cal['floor']:.4f} nats; "
        f"margin {a.margin}, alpha {a.alpha}"
    )
    print(
        f"calibration: shift {probe} gives excess {cal['excess']:.5f} ± {cal['excess_se']:.5f} ({a.calibrate} designs)"
    )
    print(
        "| true excess | designs | mean estimate | passes: frank (turns + starts) [95% interval] | t over turns alone "
        "| bootstrap over turns |"
    )
    print("|---|---|---|---|---|---|")
    rows = [("= margin", at_margin, a.seed), ("= margin / 2", at_half, a.seed + 1), ("0", 0.0, a.seed + 2)]
    for label, shift, seed in rows[:1] if a.only_margin else rows:
        r = run(shift, a.designs, a, seed)
        boot = f"{r['boot_pass']:.3f}" if a.boot else "-"
        k = round(r["t_pass"] * a.designs)
        lo, hi = _clopper_pearson(k, a.designs)
        print(
            f"| {label} | {a.designs} | {r['excess']:.5f} ± {r['excess_se']:.5f} | {r['t_pass']:.3f} [{lo:.3f}, {hi:.3f}] "
            f"| {r['turns_pass']:.3f} | {boot} |"
        )
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
