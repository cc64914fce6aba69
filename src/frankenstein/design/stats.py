"""Exact statistics over blocks: small pure functions over sequences (no files, HTTP or processes).

The block is the unit. A block holds one start-level value per arm; its *log ratio* is
ln(candidate / served). Blocks are assumed independent of each other; nothing is assumed about the
shape of the noise beyond what each test names. Exact p-values are returned as ``Fraction`` so that
``p <= alpha`` is decided without rounding (``alpha`` is read as the decimal the user wrote).

Sides follow scipy: ``"greater"`` means the values tend to be positive, ``"less"`` negative.

    log_ratios(served, candidate)         ln(candidate/served) per block
    ratios_minus_one(served, candidate)   candidate/served - 1 per block
    geomean_ratio(logs)                   exp(mean log ratio): the geometric-mean ratio
    exact_fraction(x)                     a float as the decimal it prints as (0.05 -> 1/20)
    sign_test(in_favour, n)               exact one-sided sign test -> SignTest(p Fraction, p_scipy)
    sign_critical_count(n, alpha)         fewest blocks in favour for p <= alpha (None: unreachable)
    is_integral(values)                   True when every value is a whole number (pass counts)
    sign_flip_p(values, side)             exact paired sign-flip permutation test, p = count / 2**n
    sign_flip_p_scipy(values, side)       the same via scipy.stats.permutation_test (a cross-check)
    sign_ci(values, tail)                 CI for the median from order statistics (sign-test inversion)
    sign_flip_ci(values, tail)            CI for the centre of symmetry (sign-flip-test inversion)
    smallest_p(test, n, side)             the smallest p a test can give with n blocks
    sign_p_range(in_favour, done, remaining)       p values still reachable (curtailment)
    sign_flip_p_range(done_values, remaining, side) p values still reachable (curtailment)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
from scipy import stats as sps

Side = Literal["greater", "less", "two-sided"]
TestName = Literal["sign", "permutation"]

MAX_ENUMERATED_BLOCKS = 40  # 2**20 subset sums per half: exact real-valued sign-flip tests up to here
MAX_CI_BLOCKS = 20  # sign_flip_ci lists all 2**n - 1 subset means
SCIPY_CROSS_CHECK_BLOCKS = 16  # scipy.stats.permutation_test enumerates 2**n resamples
_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class SignTest:
    """An exact one-sided sign test: ``p`` exact, ``p_scipy`` from ``scipy.stats.binomtest`` (or nan)."""

    in_favour: int
    n: int
    p: Fraction
    p_scipy: float


@dataclass(frozen=True)
class Interval:
    """A confidence interval on the scale of the values given (log ratios or differences).

    ``coverage`` is the exact two-sided coverage for continuous data (at least 1 - 2*tail).
    """

    low: float
    high: float
    coverage: Fraction
    method: TestName


def log_ratios(served: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """ln(candidate / served) per block: symmetric under swapping arms (it changes sign).

    Both values must be positive; a ratio of a zero or negative metric means nothing.
    """
    _same_length(served, candidate)
    if any(v <= 0 for v in (*served, *candidate)):
        raise ValueError("log ratios need positive values")
    return [math.log(c) - math.log(s) for s, c in zip(served, candidate)]


def ratios_minus_one(served: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """candidate / served - 1 per block: the relative change people read (-0.05 = 5% lower)."""
    _same_length(served, candidate)
    return [c / s - 1.0 for s, c in zip(served, candidate)]


def geomean_ratio(logs: Sequence[float]) -> float:
    """exp(mean log ratio). Unlike the mean of ratios it inverts exactly when the arms swap."""
    if not logs:
        raise ValueError("no blocks")
    return math.exp(math.fsum(logs) / len(logs))


def exact_fraction(x: float | Fraction) -> Fraction:
    """The decimal a float prints as, exactly: 0.05 -> 1/20, so ``p <= alpha`` has no rounding."""
    return x if isinstance(x, Fraction) else Fraction(repr(float(x)))


def sign_test(in_favour: int, n: int, *, cross_check: bool = True) -> SignTest:
    """Exact one-sided sign test: P(X >= in_favour) for X ~ Binomial(n, 1/2).

    Assumes only that, with no effect, each block favours either arm with probability 1/2
    (independent blocks). Ties must be counted against (not in favour): this keeps n fixed,
    keeps the test valid, and matches what registration promised. ``p_scipy`` (nan without
    ``cross_check``) is scipy's binomtest, an independent computation.
    """
    if not 0 <= in_favour <= n:
        raise ValueError(f"in_favour must be between 0 and n={n}, got {in_favour}")
    p = Fraction(sum(math.comb(n, j) for j in range(in_favour, n + 1)), 2**n)
    p_scipy = math.nan
    if cross_check:
        p_scipy = 1.0 if n == 0 else float(sps.binomtest(in_favour, n, 0.5, alternative="greater").pvalue)
    return SignTest(in_favour, n, p, p_scipy)


def sign_critical_count(n: int, alpha: float | Fraction) -> int | None:
    """The fewest blocks in favour (of n) whose sign-test p is <= alpha; None when 1/2**n > alpha."""
    a = exact_fraction(alpha)
    tail = 0
    for c in range(n, -1, -1):
        tail += math.comb(n, c)
        if Fraction(tail, 2**n) > a:
            return c + 1 if c < n else None
    return 0


def is_integral(values: Sequence[float]) -> bool:
    """True when every value is a whole number small enough to add exactly (e.g. pass counts)."""
    return all(float(v).is_integer() and abs(v) < 2**52 for v in values)


def sign_flip_p(values: Sequence[float], side: Side = "greater") -> Fraction:
    """Exact paired sign-flip permutation test of 'centred at 0' over all 2**n sign assignments.

    The statistic is the sum (equivalently the mean). Assumes only that, with no effect, each
    block's value is as likely to have either sign (e.g. arms in random order within a block).
    p = (number of assignments at least as extreme as observed) / 2**n, as an exact Fraction.
    Integer data are counted exactly by convolution of subset sums; real data by enumerating
    subset sums (meet in the middle, up to MAX_ENUMERATED_BLOCKS) with scipy's relative tolerance
    for sums equal in theory but not in floating point.
    """
    n = len(values)
    if side == "two-sided":
        lo, hi = sign_flip_p(values, "less"), sign_flip_p(values, "greater")
        return min(Fraction(1), 2 * min(lo, hi))
    vals = [float(v) for v in values] if side == "greater" else [-float(v) for v in values]
    # Flipping the set S changes the sum by -2*sum(S); it stays >= observed iff sum(S) <= 0.
    return Fraction(_count_subsets_at_most_zero(vals), 2**n)


def sign_flip_p_scipy(values: Sequence[float], side: Side = "greater") -> float:
    """``scipy.stats.permutation_test`` with ``permutation_type='samples'`` and ``n_resamples=inf``
    on one sample (scipy flips signs): an independent computation of ``sign_flip_p``."""
    x = np.asarray(values, dtype=float)
    if not 2 <= len(x) <= SCIPY_CROSS_CHECK_BLOCKS:
        raise ValueError(f"the scipy cross-check takes 2 to {SCIPY_CROSS_CHECK_BLOCKS} blocks, not {len(x)}")
    res = sps.permutation_test(
        (x,), _mean, permutation_type="samples", n_resamples=np.inf, vectorized=True,
        alternative=side, batch=4096,
    )
    return float(res.pvalue)


def sign_ci(values: Sequence[float], tail: float | Fraction) -> Interval | None:
    """Distribution-free CI for the median: [x_(k), x_(n-k+1)] from the sorted values.

    Inverts the sign test: k is the largest with P(X <= k-1) <= tail, X ~ Binomial(n, 1/2);
    exact coverage 1 - 2*P(X <= k-1) for continuous data. Of the log ratios this bounds the median
    ratio, which equals the geometric-mean ratio only for symmetric noise. None when n is too
    small (1/2**n > tail).
    """
    n = len(values)
    t = exact_fraction(tail)
    k, below = 0, Fraction(0)
    while k < (n + 1) // 2:
        nxt = below + Fraction(math.comb(n, k), 2**n)
        if nxt > t:
            break
        k, below = k + 1, nxt
    if k == 0:
        return None
    xs = sorted(float(v) for v in values)
    return Interval(xs[k - 1], xs[n - k], 1 - 2 * below, "sign")


def sign_flip_ci(values: Sequence[float], tail: float | Fraction) -> Interval | None:
    """CI for the centre of symmetry by inverting the sign-flip test: the k-th smallest and
    k-th largest of the 2**n - 1 subset means, k = floor(tail * 2**n).

    A shift d is kept when the one-sided tests of 'centre = d' both give p > tail; the test of d
    counts the subsets whose mean is <= d, so the bounds are order statistics of subset means
    (as Walsh averages are for the signed-rank test). Assumes symmetric noise about the centre,
    which is then both mean and median; of log ratios it bounds the log geometric-mean ratio.
    Exact coverage 1 - 2k/2**n. None when k = 0 or n > MAX_CI_BLOCKS.
    """
    n = len(values)
    k = math.floor(exact_fraction(tail) * 2**n)
    if k == 0 or n > MAX_CI_BLOCKS:
        return None
    sums, sizes = np.zeros(1), np.zeros(1, dtype=np.int64)
    for v in values:
        sums = np.concatenate([sums, sums + float(v)])
        sizes = np.concatenate([sizes, sizes + 1])
    means = np.sort(sums[1:] / sizes[1:])
    return Interval(float(means[k - 1]), float(means[-k]), 1 - Fraction(2 * k, 2**n), "permutation")


def smallest_p(test: TestName, n: int, side: Side = "greater") -> Fraction:
    """The smallest p the test can reach with n blocks (all blocks strongly one way): 1/2**n,
    or 2/2**n two-sided. A design whose smallest p exceeds its alpha can never confirm."""
    one = Fraction(1, 2**n)
    return min(Fraction(1), 2 * one) if side == "two-sided" and test == "permutation" else one


def sign_p_range(in_favour: int, done: int, remaining: int) -> tuple[Fraction, Fraction]:
    """(smallest, largest) sign-test p still reachable when ``remaining`` blocks are to come.

    Exact: the best case is every remaining block in favour, the worst none.
    """
    n = done + remaining
    return sign_test(in_favour + remaining, n, cross_check=False).p, sign_test(in_favour, n, cross_check=False).p


def sign_flip_p_range(done_values: Sequence[float], remaining: int, side: Side = "greater") -> tuple[Fraction, Fraction]:
    """(smallest, largest) sign-flip p reachable over any values of the ``remaining`` blocks.

    Future values are unbounded, so they can dominate: huge values in the tested direction (of
    distinct sizes) leave only the done blocks' own count c, giving c / 2**n; huge values the
    other way make every assignment that flips a future block count. Both bounds are attained,
    so stopping when they sit on one side of alpha is exact; for bounded data (pass counts) it
    is conservative (it may run blocks that could not change the verdict, never too few).
    """
    d, m = len(done_values), remaining
    n = d + m
    if m == 0:
        p = sign_flip_p(done_values, side)
        return p, p
    if side == "two-sided":
        c = min(_count_subsets_at_most_zero([float(v) for v in done_values]),
                _count_subsets_at_most_zero([-float(v) for v in done_values]))
        return min(Fraction(1), Fraction(2 * c, 2**n)), Fraction(1)
    vals = [float(v) if side == "greater" else -float(v) for v in done_values]
    c = _count_subsets_at_most_zero(vals)
    return Fraction(c, 2**n), Fraction((2**m - 1) * 2**d + c, 2**n)


def _count_subsets_at_most_zero(values: Sequence[float]) -> int:
    """How many of the 2**n subsets (the empty one included) have sum <= 0 (within tolerance)."""
    if is_integral(values):
        return _count_integral(int(v) for v in values)
    n = len(values)
    if n > MAX_ENUMERATED_BLOCKS:
        raise ValueError(f"exact enumeration of 2**{n} sign flips is too large (at most {MAX_ENUMERATED_BLOCKS} blocks)")
    tol = 50 * _EPS * math.fsum(abs(v) for v in values)  # scipy's 100*eps relative tolerance, on the sum
    half = n // 2
    left, right = np.sort(_subset_sums(values[:half])), _subset_sums(values[half:])
    return int(np.searchsorted(left, tol - right, side="right").sum())


def _count_integral(values: object) -> int:
    counts: Counter[int] = Counter({0: 1})
    for v in values:  # type: ignore[attr-defined]
        nxt: Counter[int] = Counter()
        for s, c in counts.items():
            nxt[s] += c
            nxt[s + v] += c
        counts = nxt
    return sum(c for s, c in counts.items() if s <= 0)


def _subset_sums(values: Sequence[float]) -> np.ndarray:
    sums = np.zeros(1)
    for v in values:
        sums = np.concatenate([sums, sums + v])
    return sums


def _mean(x: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x, axis=axis)


def _same_length(a: Sequence[float], b: Sequence[float]) -> None:
    if len(a) != len(b):
        raise ValueError(f"served has {len(a)} blocks, candidate {len(b)}")
