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
    safe_mean(values)                     the mean, without overflow near the float limit
    exact_mean(values)                    the mean of whole numbers as a Fraction (None for real values)
    tie_values(values, side)              the exact integers the sign-flip test and interval count
    count_at_most_zero(ints)              subsets with sum <= 0 (convolution or meet in the middle)
    sign_flip_unsupported(n, integral, max_abs)  why n blocks cannot be computed exactly, or None
    sign_flip_p(values, side)             exact paired sign-flip permutation test, p = count / 2**n
    sign_flip_p_scipy(values, side)       the same via scipy.stats.permutation_test (a cross-check)
    sign_ci(values, tail)                 CI for the median from order statistics (sign-test inversion)
    sign_flip_ci(values, tail)            CI for the centre of symmetry (sign-flip-test inversion)
    smallest_p(test, n, side)             the smallest p a test can give with n blocks
    sign_p_range(in_favour, done, remaining)       p values still reachable (curtailment)
    sign_flip_p_range(done_values, remaining, side) p values still reachable (curtailment)
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

Side = Literal["greater", "less", "two-sided"]
TestName = Literal["sign", "permutation"]

MAX_ENUMERATED_BLOCKS = 40  # 2**20 subset sums per half: exact real-valued sign-flip tests up to here
MAX_CI_BLOCKS = 20  # sign_flip_ci lists all 2**n - 1 subset means
SCIPY_CROSS_CHECK_BLOCKS = 16  # scipy.stats.permutation_test enumerates 2**n resamples
CONVOLUTION_CELLS = 2**24  # exact convolution of whole numbers: n * (span of subset sums) cells at most
TIE_BITS = 32  # real values are compared at 32 significant bits each (a relative tolerance near 2**-31)


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
    return x if isinstance(x, Fraction) else _decimal_fraction(float(x))


@functools.lru_cache(maxsize=256)
def _decimal_fraction(x: float) -> Fraction:
    return Fraction(repr(x))


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
        from scipy import stats as sps  # scipy takes ~1.4 s to import: only where a cross-check runs

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

    Whole numbers are counted exactly. Real values are first rounded, each on its own, down to
    TIE_BITS significant bits and one unit further (:func:`tie_values`): sums equal in theory but
    not in floating point (0.1 + 0.2 vs 0.3) then count as ties, i.e. as extreme, so p can only
    grow (the test stays valid), and the interval (:func:`sign_flip_ci`) counts the same values.
    Every subset sum is then an exact integer, counted by convolution when the sums span few
    values and by meet in the middle up to MAX_ENUMERATED_BLOCKS blocks; larger designs raise
    ValueError (registration refuses them first: :func:`sign_flip_unsupported`).
    """
    n = len(values)
    if side == "two-sided":
        lo, hi = sign_flip_p(values, "less"), sign_flip_p(values, "greater")
        return min(Fraction(1), 2 * min(lo, hi))
    # Flipping the set S changes the sum by -2*sum(S); it stays >= observed iff sum(S) <= 0.
    return Fraction(count_at_most_zero(tie_values(values, side)), 2**n)


def safe_mean(values: Sequence[float]) -> float:
    """The mean: the correctly rounded sum over n, so whole numbers that sum to 0 give exactly 0;
    near the float limit (the sum overflows) each value is divided by n first."""
    n = len(values)
    if n == 0:
        raise ValueError("no blocks")
    try:
        total = math.fsum(float(v) for v in values)
    except OverflowError:
        total = math.inf
    if math.isfinite(total):
        return total / n
    return math.fsum(float(v) / n for v in values)


def exact_mean(values: Sequence[float]) -> Fraction | None:
    """The mean of whole numbers (pass counts) as an exact Fraction; None when a value is not whole."""
    if not values or not is_integral(values):
        return None
    return Fraction(sum(int(v) for v in values), len(values))


def tie_values(values: Sequence[float], side: Side = "greater", *, force_real: bool = False) -> list[int]:
    """The values (negated for side 'less') as exact integers on one common scale, for counting.

    Whole numbers stay exact. Otherwise each value x is rounded down to a multiple of its own unit
    u = 2**(e - TIE_BITS) (where 2**(e-1) <= |x| < 2**e), minus one unit, so y <= x - u: a relative
    tolerance per block, independent of the other blocks (curtailment needs that), that absorbs
    the rounding of decimal data and of log ratios.
    """
    vals = [float(v) if side != "less" else -float(v) for v in values]
    if not force_real and is_integral(vals):
        return [int(v) for v in vals]
    parts: list[tuple[int, int]] = []
    for x in vals:
        if x == 0:
            parts.append((0, 0))
            continue
        m, e = math.frexp(x)
        parts.append((math.floor(math.ldexp(m, TIE_BITS)) - 1, e - TIE_BITS))
    low = min((e for u, e in parts if u), default=0)
    return [u << (e - low) if u else 0 for u, e in parts]


def _tie_unit(values: Sequence[float], side: Side) -> float:
    """The value of 1 in :func:`tie_values`' integers (may underflow to 0.0 for subnormal data)."""
    vals = [float(v) if side != "less" else -float(v) for v in values]
    if is_integral(vals):
        return 1.0
    return math.ldexp(1.0, min((math.frexp(x)[1] for x in vals if x), default=TIE_BITS) - TIE_BITS)


def count_at_most_zero(ints: Sequence[int]) -> int:
    """How many of the 2**n subsets (the empty one included) have sum <= 0, exactly.

    Convolution of subset-sum counts when n * (span of sums) <= CONVOLUTION_CELLS (pass counts),
    else meet in the middle for n <= MAX_ENUMERATED_BLOCKS (2 * 2**20 sums at most), else ValueError.
    """
    n = len(ints)
    if n <= 10:  # 2**10 sums: plain integers are quicker than arrays
        return sum(1 for s in _py_subset_sums(ints) if s <= 0)
    neg, pos = -sum(v for v in ints if v < 0), sum(v for v in ints if v > 0)
    if n * (neg + pos + 1) <= CONVOLUTION_CELLS:
        return _convolve(ints, neg, pos)
    if n > MAX_ENUMERATED_BLOCKS:
        raise ValueError(sign_flip_unsupported(n, False, None) or "too many blocks")
    half = n // 2
    return _meet_in_the_middle(ints[:half], ints[half:], neg + pos)


def sign_flip_unsupported(n: int, integral: bool, max_abs: int | None) -> str | None:
    """Why an exact sign-flip test of n blocks cannot be computed, or None.

    Whole numbers with |value| <= max_abs are counted by convolution in n * (n*max_abs + 1) cells;
    anything else by meet in the middle (2 * 2**(n/2) sums), up to MAX_ENUMERATED_BLOCKS blocks.
    """
    if n <= MAX_ENUMERATED_BLOCKS:
        return None
    if integral and max_abs is not None and n * (n * max_abs + 1) <= CONVOLUTION_CELLS:
        return None
    bound = f", or whole numbers with n * (n * largest |difference| + 1) <= {CONVOLUTION_CELLS}" if integral else ""
    return (
        f"{n} blocks are too many for an exact sign-flip test: it is computed exactly for at most "
        f"{MAX_ENUMERATED_BLOCKS} blocks of real values{bound}; use the sign test or fewer blocks"
    )


def _convolve(ints: Sequence[int], neg: int, pos: int) -> int:
    dtype: object = np.int64 if len(ints) <= 62 else object
    counts = np.zeros(neg + pos + 1, dtype=dtype)  # type: ignore[call-overload]
    counts[neg] = 1  # index i holds the number of subsets whose sum is i - neg
    for v in ints:
        nxt = counts.copy()
        if v > 0:
            nxt[v:] += counts[:-v]
        elif v < 0:
            nxt[:v] += counts[-v:]
        else:
            nxt += counts
        counts = nxt
    return int(counts[: neg + 1].sum())


def _meet_in_the_middle(left: Sequence[int], right: Sequence[int], span: int) -> int:
    if span < 2**62:
        a = np.sort(_int_subset_sums(left))
        return int(np.searchsorted(a, -_int_subset_sums(right), side="right").sum())
    sa = sorted(_py_subset_sums(left))  # exact Python integers: values many powers of two apart
    return sum(bisect.bisect_right(sa, -s) for s in _py_subset_sums(right))


def _int_subset_sums(values: Sequence[int]) -> np.ndarray:
    sums = np.zeros(1, dtype=np.int64)
    for v in values:
        sums = np.concatenate([sums, sums + np.int64(v)])
    return sums


def _py_subset_sums(values: Sequence[int]) -> list[int]:
    sums = [0]
    for v in values:
        sums = sums + [s + v for s in sums]
    return sums


def sign_flip_p_scipy(values: Sequence[float], side: Side = "greater") -> float | None:
    """``scipy.stats.permutation_test`` (``permutation_type='samples'``, ``n_resamples=inf``, one
    sample: scipy flips signs) on the same tie values :func:`sign_flip_p` counts: an independent
    count of the same test. None when those integers cannot be given to scipy exactly (their sums
    would pass 2**53): then there is no cross-check rather than one of another test."""
    if not 2 <= len(values) <= SCIPY_CROSS_CHECK_BLOCKS:
        raise ValueError(f"the scipy cross-check takes 2 to {SCIPY_CROSS_CHECK_BLOCKS} blocks, not {len(values)}")
    if side == "two-sided":
        lo, hi = sign_flip_p_scipy(values, "less"), sign_flip_p_scipy(values, "greater")
        return None if lo is None or hi is None else min(1.0, 2 * min(lo, hi))
    ints = tie_values(values, side)  # negated for 'less': the test of 'greater' on them
    if len(ints) * max(abs(v) for v in ints) >= 2**53:
        return None
    from scipy import stats as sps  # imported here: ~1.4 s that frank run's curtailment never needs

    res = sps.permutation_test(
        (np.asarray(ints, dtype=float),),
        _mean,
        permutation_type="samples",
        n_resamples=np.inf,
        vectorized=True,
        alternative="greater",
        batch=4096,
    )
    return float(res.pvalue)


def sign_ci(values: Sequence[float], tail: float | Fraction) -> Interval | None:
    """Distribution-free CI for the median: [x_(k), x_(n-k+1)] from the sorted values.

    Inverts the sign test: k is the largest with P(X <= k-1) <= tail, X ~ Binomial(n, 1/2);
    exact coverage 1 - 2*P(X <= k-1) for continuous data. Of the log ratios this bounds the median
    ratio, which equals the geometric-mean ratio only for symmetric noise. Inclusive: a bound equal
    to 0 keeps 0, as the test counts a tie against. None when n is too small (1/2**n > tail).
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
    The means are of the tie values the test counts (:func:`tie_values`), and where a bound lies
    within rounding of 0 the exact count decides its side: 0 is inside (ties included) exactly when
    neither one-sided test at ``tail`` rejects. Coverage 1 - 2k/2**n for continuous data.
    None when k = 0 or n > MAX_CI_BLOCKS.
    """
    n = len(values)
    t = exact_fraction(tail)
    k = math.floor(t * 2**n)
    if k == 0 or n > MAX_CI_BLOCKS:
        return None
    return Interval(
        _kth_mean(values, "greater", k, t), -_kth_mean(values, "less", k, t), 1 - Fraction(2 * k, 2**n), "permutation"
    )


def _kth_mean(values: Sequence[float], side: Side, k: int, tail: Fraction) -> float:
    """The k-th smallest subset mean of the tie values of ``side``, on the side of 0 the exact test gives."""
    ints = tie_values(values, side)
    bits = max((abs(v) for v in ints), default=0).bit_length()
    scale = 2 ** max(0, bits - 900)  # a power of two: exact, and keeps the sums finite
    sums, sizes = np.zeros(1), np.zeros(1, dtype=np.int64)
    for v in ints:
        sums = np.concatenate([sums, sums + float(v // scale if scale > 1 else v)])
        sizes = np.concatenate([sizes, sizes + 1])
    m = float(np.sort(sums[1:] / sizes[1:])[k - 1])
    big = max(abs(float(v)) for v in values)
    kth = max(-big, min(big, m * (scale * _tie_unit(values, side)))) if m else 0.0
    kept = Fraction(count_at_most_zero(ints), 2 ** len(values)) > tail  # the exact test at 0 keeps 0
    if kept and (kth > 0 or -kth <= big * 2.0 ** (2 - TIE_BITS) * len(values)):
        return 0.0  # a tie: 0 is the bound (within the tie values' resolution)
    if not kept and kth <= 0:
        return math.ulp(0.0)
    return kth


@functools.lru_cache(maxsize=1024)
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


def sign_flip_p_range(
    done_values: Sequence[float], remaining: int, side: Side = "greater"
) -> tuple[Fraction, Fraction]:
    """(smallest, largest) sign-flip p over any values of the ``remaining`` blocks: true bounds.

    A subset S of all n blocks counts when its tie values sum to <= 0. The subsets of the done
    blocks alone count the same whatever comes (tie values are per block): c of them, or at most
    c_hi when later real values turn whole-number data into rounded data. The 2**d * (2**m - 1)
    subsets with a future block may all count or none, so c / 2**n <= p <= (c_hi + 2**d*(2**m-1)) / 2**n.
    Both are attained by huge future values (distinct sizes) of either sign, so stopping when both
    sit on one side of alpha loses nothing; for bounded data (pass counts) it is conservative.
    """
    d, m = len(done_values), remaining
    n = d + m
    if m == 0:
        p = sign_flip_p(done_values, side)
        return p, p
    if side == "two-sided":
        c = min(
            count_at_most_zero(tie_values(done_values, "greater")), count_at_most_zero(tie_values(done_values, "less"))
        )
        return min(Fraction(1), Fraction(2 * c, 2**n)), Fraction(1)
    c = count_at_most_zero(tie_values(done_values, side))
    c_hi = max(c, count_at_most_zero(tie_values(done_values, side, force_real=True)))
    return Fraction(c, 2**n), Fraction((2**m - 1) * 2**d + c_hi, 2**n)


def _mean(x: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x, axis=axis)


def _same_length(a: Sequence[float], b: Sequence[float]) -> None:
    if len(a) != len(b):
        raise ValueError(f"served has {len(a)} blocks, candidate {len(b)}")
