"""The exact two-sample permutation test of a completely randomized design (pure functions).

n_s starts of the served arm and n_c of the candidate ran in one registered random order; under the
null (the part changes nothing) every split of the pooled values into n_c "candidate" and n_s
"served" is equally likely, so p = (splits at least as extreme as the one observed) / C(n_s+n_c, n_c),
an exact Fraction. The statistic is the candidate's sum of scores (equivalently the difference of
means, as the group sizes are fixed); the scores are the values or their logs, signed so that
positive favours the candidate. With 4 + 4 starts and every candidate start better, p = 1/70.

Values equal in theory but not in floating point count as ties, i.e. as extreme (a relative
tolerance of TIE_TOLERANCE on the sums), so p can only grow and the test stays valid.

    assignments(n_s, n_c)                C(n_s+n_c, n_c): how many splits the test enumerates
    unsupported(n_s, n_c)                why the split count is too large to enumerate, or None
    smallest_p(n_s, n_c, side)           1/C(n_s+n_c, n_c) one-sided (2/C two-sided)
    two_sample_p(served, candidate, side) the exact p of the candidate's scores against the served ones
    shift_ci(served, candidate, tail)    CI for the shift (candidate - served) by inverting the test
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from fractions import Fraction

from frankenstein.design.stats import Interval, Side, exact_fraction

MAX_ASSIGNMENTS = 200_000  # C(20, 10) = 184,756: ten starts per arm are enumerated in about a second
TIE_TOLERANCE = 1e-9


def assignments(n_s: int, n_c: int) -> int:
    return math.comb(n_s + n_c, n_c)


def unsupported(n_s: int, n_c: int) -> str | None:
    """Why the exact test of n_s + n_c starts cannot be enumerated here, or None."""
    if n_s < 1 or n_c < 1:
        return f"a two-sample test needs starts of both arms (served {n_s}, candidate {n_c})"
    if assignments(n_s, n_c) <= MAX_ASSIGNMENTS:
        return None
    return (
        f"{n_s} + {n_c} starts give {assignments(n_s, n_c):,} splits, more than the {MAX_ASSIGNMENTS:,} the "
        "exact two-sample test enumerates; use at most 10 starts per arm"
    )


def smallest_p(n_s: int, n_c: int, side: Side = "greater") -> Fraction:
    """The smallest p the test can give: the observed split is the only one as extreme."""
    return Fraction(2 if side == "two-sided" else 1, assignments(n_s, n_c))


def two_sample_p(served: Sequence[float], candidate: Sequence[float], side: Side = "greater") -> Fraction:
    """Exact p over every split of the pooled scores: 'greater' = the candidate's scores tend to be larger.

    Two-sided: the statistic is |difference of means| (an exact test of its own, not a doubled p).
    Raises ValueError beyond MAX_ASSIGNMENTS splits.
    """
    why = unsupported(len(served), len(candidate))
    if why:
        raise ValueError(why)
    pooled = [*served, *candidate]
    n_s, n_c = len(served), len(candidate)
    total = math.fsum(pooled)
    tol = TIE_TOLERANCE * max(1.0, math.fsum(abs(x) for x in pooled))

    def stat(s: float) -> float:  # difference of means with the candidate's sum s
        return s / n_c - (total - s) / n_s

    observed = stat(math.fsum(candidate))
    hits = 0
    for idx in itertools.combinations(range(len(pooled)), n_c):
        x = stat(math.fsum(pooled[i] for i in idx))
        if side == "greater":
            hits += x >= observed - tol
        elif side == "less":
            hits += x <= observed + tol
        else:
            hits += abs(x) >= abs(observed) - tol
    return Fraction(hits, assignments(n_s, n_c))


def shift_ci(served: Sequence[float], candidate: Sequence[float], tail: float | Fraction) -> Interval | None:
    """CI for the shift d (candidate = served + d) by inverting the one-sided tests at ``tail`` each.

    Under 'shift = d' the candidate's scores move by -d. A split A that calls k of the candidate's
    starts served then has a difference of means T_A(0) - d + d*k*(1/n_c + 1/n_s) against the
    observed split's T(0) - d, so it is at least as extreme exactly when d >= (T(0) - T_A(0)) /
    (k*(1/n_c + 1/n_s)): each split has one critical shift and each one-sided p is a step function of
    d. The bounds are the m-th smallest and m-th largest critical shifts, m = floor(tail * C);
    exact coverage 1 - 2m/C for continuous data. None when m = 0 or the splits are too many.
    """
    n_s, n_c = len(served), len(candidate)
    if unsupported(n_s, n_c):
        return None
    splits = assignments(n_s, n_c)
    m = math.floor(exact_fraction(tail) * splits)
    if m == 0:
        return None
    crit = sorted(_critical_shifts(served, candidate))
    return Interval(crit[m - 1], crit[-m], 1 - Fraction(2 * m, splits), "permutation")


def _critical_shifts(served: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """For every split but the observed one, the shift at which it becomes as extreme as the observed."""
    pooled = [*served, *candidate]
    n_s, n_c = len(served), len(candidate)
    total = math.fsum(pooled)
    observed = math.fsum(candidate) / n_c - math.fsum(served) / n_s
    out = []
    for idx in itertools.combinations(range(len(pooled)), n_c):
        k = sum(1 for i in idx if i < n_s)  # served starts this split calls candidate = candidates it calls served
        if k == 0:
            continue
        s = math.fsum(pooled[i] for i in idx)
        diff = s / n_c - (total - s) / n_s
        out.append((observed - diff) / (k * (1 / n_c + 1 / n_s)))
    return out
