"""Exact statistics against values computed by hand (and by brute force where that is independent)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from frankenstein.design import stats


def brute_force_p(values: list[float], side: str) -> Fraction:
    """All 2**n sign assignments written out: count those with sum >= (or <=) the observed sum."""
    t0 = sum(values)
    hits = 0
    for signs in itertools.product([1, -1], repeat=len(values)):
        t = sum(s * v for s, v in zip(signs, values))
        hits += (t >= t0 - 1e-12) if side == "greater" else (t <= t0 + 1e-12)
    return Fraction(hits, 2 ** len(values))


def test_five_of_five_better_gives_one_in_32() -> None:
    st = stats.sign_test(5, 5)
    assert st.p == Fraction(1, 32)
    assert st.p_scipy == 0.03125


def test_sign_test_tail_by_hand() -> None:
    # 8 of 10: (C(10,8) + C(10,9) + C(10,10)) / 1024 = (45 + 10 + 1) / 1024 = 56/1024 = 7/128
    st = stats.sign_test(8, 10)
    assert st.p == Fraction(7, 128)
    assert st.p_scipy == pytest.approx(56 / 1024, abs=1e-15)


def test_sign_critical_count() -> None:
    # n=10: P(X>=9) = 11/1024 <= 0.05 but P(X>=8) = 56/1024 > 0.05
    assert stats.sign_critical_count(10, 0.05) == 9
    assert stats.sign_critical_count(5, 0.05) == 5
    assert stats.sign_critical_count(4, 0.05) is None  # 1/16 > 0.05


def test_integer_differences_over_ten_blocks_exact_fraction_of_1024() -> None:
    # Pass-count differences d = [2, 1, 1, 0, 3, 1, -1, 2, 0, 1] (sum 10). Flipping the set S of
    # blocks keeps the sum >= 10 iff sum(d over S) <= 0. The two zeros can be flipped freely
    # (factor 4). Among the other 8 (positives 2,1,1,3,1,2,1 and one -1), sum(S) <= 0 iff S holds
    # no positive (2 ways: with or without the -1) or exactly one "1" together with the -1
    # (4 ways, one per "1"). So 6 * 4 = 24 of the 1024 assignments: p = 24/1024 = 3/128.
    d = [2, 1, 1, 0, 3, 1, -1, 2, 0, 1]
    assert stats.sign_flip_p(d, "greater") == Fraction(24, 1024)
    assert stats.sign_flip_p(d, "greater") == brute_force_p(d, "greater")
    assert stats.sign_flip_p_scipy(d, "greater") == pytest.approx(24 / 1024, abs=1e-15)


def test_permutation_p_of_all_positive_is_one_in_two_to_the_n() -> None:
    assert stats.sign_flip_p([0.3, 0.1, 0.7, 0.2, 0.5], "greater") == Fraction(1, 32)
    assert stats.sign_flip_p([0.3, 0.1, 0.7, 0.2, 0.5], "two-sided") == Fraction(1, 16)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 11, 14])
@pytest.mark.parametrize("side", ["greater", "less", "two-sided"])
def test_scipy_permutation_test_equals_exact_enumeration_for_real_data(n: int, side: str) -> None:
    rng = np.random.default_rng(1000 + n)
    for _ in range(5):
        x = list(rng.normal(0.02, 0.05, n))
        exact = stats.sign_flip_p(x, side)  # type: ignore[arg-type]
        assert float(exact) == pytest.approx(stats.sign_flip_p_scipy(x, side), abs=1e-12)  # type: ignore[arg-type]
        assert exact.denominator <= 2**n


def test_enumeration_matches_brute_force_including_decimal_ties() -> None:
    # 0.1 + 0.2 and 0.3 tie in decimal but not in binary floating point: counted as ties.
    x = [0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 0.7]
    for side in ("greater", "less"):
        assert stats.sign_flip_p(x, side) == brute_force_p(x, side)
        assert float(stats.sign_flip_p(x, side)) == pytest.approx(stats.sign_flip_p_scipy(x, side), abs=1e-15)


def test_meet_in_the_middle_agrees_with_convolution_on_whole_numbers() -> None:
    rng = np.random.default_rng(7)
    d = [int(v) for v in rng.integers(-3, 6, 18)]
    shifted = [v + 1e-9 * (i + 1) for i, v in enumerate(d)]  # breaks the integer path, same order
    assert stats.is_integral(d) and not stats.is_integral(shifted)
    assert stats.sign_flip_p(d, "greater") == brute_force_p(d, "greater")
    assert abs(stats.sign_flip_p(shifted, "greater") - stats.sign_flip_p(d, "greater")) < Fraction(1, 50)


def test_log_ratio_symmetry_under_swapping_arms() -> None:
    served = [10.0, 12.0, 11.0, 9.5, 10.4, 13.1]
    candidate = [9.1, 11.7, 10.2, 9.9, 9.6, 12.0]
    fwd, back = stats.log_ratios(served, candidate), stats.log_ratios(candidate, served)
    assert back == pytest.approx([-x for x in fwd], abs=1e-15)
    assert stats.geomean_ratio(fwd) * stats.geomean_ratio(back) == pytest.approx(1.0, abs=1e-15)
    assert stats.sign_flip_p(fwd, "less") == stats.sign_flip_p(back, "greater")
    assert stats.sign_flip_p(fwd, "two-sided") == stats.sign_flip_p(back, "two-sided")
    # The mean of ratios does not invert: the reason ratios are averaged on the log scale.
    mean_fwd = 1 + sum(stats.ratios_minus_one(served, candidate)) / 6
    mean_back = 1 + sum(stats.ratios_minus_one(candidate, served)) / 6
    assert mean_fwd * mean_back != pytest.approx(1.0, abs=1e-6)


def test_log_ratios_refuse_non_positive_values() -> None:
    with pytest.raises(ValueError, match="positive"):
        stats.log_ratios([1.0, 0.0], [1.0, 1.0])


def test_smallest_reachable_p() -> None:
    assert stats.smallest_p("sign", 4) == Fraction(1, 16)  # > 0.05: four blocks can never confirm
    assert stats.smallest_p("sign", 5) == Fraction(1, 32)
    assert stats.smallest_p("permutation", 5, "two-sided") == Fraction(1, 16)
    assert stats.smallest_p("permutation", 6, "two-sided") == Fraction(1, 32)


def test_exact_fraction_reads_the_decimal_written() -> None:
    assert stats.exact_fraction(0.05) == Fraction(1, 20)
    assert stats.exact_fraction(Fraction(1, 3)) == Fraction(1, 3)


def test_sign_ci_from_order_statistics_by_hand() -> None:
    # n=10, tail 0.025: P(X<=1) = 11/1024 <= 0.025 < P(X<=2) = 56/1024, so k = 2:
    # [x_(2), x_(9)] with coverage 1 - 22/1024 = 501/512.
    iv = stats.sign_ci(list(range(1, 11)), 0.025)
    assert iv == stats.Interval(2.0, 9.0, Fraction(501, 512), "sign")
    assert stats.sign_ci([1.0, 2.0, 3.0, 4.0], 0.05) is None  # 1/16 > 0.05


def test_sign_flip_ci_is_order_statistics_of_subset_means() -> None:
    # Subset means of {1..5}: smallest 1, next 1.5 ({1,2}); largest 5, next 4.5 ({4,5}).
    assert stats.sign_flip_ci([1, 2, 3, 4, 5], Fraction(1, 32)) == stats.Interval(
        1.0, 5.0, Fraction(15, 16), "permutation"
    )
    assert stats.sign_flip_ci([1, 2, 3, 4, 5], Fraction(2, 32)) == stats.Interval(
        1.5, 4.5, Fraction(7, 8), "permutation"
    )
    assert stats.sign_flip_ci([1, 2, 3, 4], 0.05) is None  # floor(0.05 * 16) = 0


def test_ci_bound_agrees_with_the_one_sided_test() -> None:
    """Inverting a test at tail alpha: the lower bound is above 0 exactly when p <= alpha."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        x = list(rng.normal(0.3, 1.0, int(rng.integers(5, 12))))
        perm, sign = stats.sign_flip_ci(x, 0.05), stats.sign_ci(x, 0.05)
        assert perm is not None and sign is not None
        assert (perm.low > 0) == (stats.sign_flip_p(x, "greater") <= Fraction(1, 20))
        k = sum(v > 0 for v in x)
        assert (sign.low > 0) == (stats.sign_test(k, len(x)).p <= Fraction(1, 20))


def test_sign_curtailment_range() -> None:
    # n = 10 at 0.05 needs 9 in favour.
    lo, hi = stats.sign_p_range(in_favour=0, done=2, remaining=8)
    assert lo == stats.sign_test(8, 10).p == Fraction(7, 128)  # > 0.05: can no longer confirm
    lo, hi = stats.sign_p_range(in_favour=9, done=9, remaining=1)
    assert hi == stats.sign_test(9, 10).p == Fraction(11, 1024)  # <= 0.05 whatever comes


def test_sign_flip_curtailment_bounds_are_attained() -> None:
    done = [0.02, -0.01, 0.03, 0.015]
    lo, hi = stats.sign_flip_p_range(done, 2, "greater")
    # Huge future values of distinct sizes reach each bound exactly.
    assert stats.sign_flip_p(done + [1e3, 2e3], "greater") == lo
    assert stats.sign_flip_p(done + [-1e3, -2e3], "greater") == hi
    c = 2**4 * stats.sign_flip_p(done, "greater")
    assert lo == Fraction(int(c), 64) and hi == Fraction(3 * 16 + int(c), 64)
    rng = np.random.default_rng(5)
    for _ in range(100):
        p = stats.sign_flip_p(done + list(rng.normal(0, 0.05, 2)), "greater")
        assert lo <= p <= hi


def test_sign_flip_range_when_nothing_remains_is_the_p() -> None:
    done = [0.02, -0.01, 0.03]
    assert stats.sign_flip_p_range(done, 0) == (stats.sign_flip_p(done), stats.sign_flip_p(done))
    assert stats.sign_flip_p_range(done, 1, "two-sided")[1] == 1


def test_geomean_ratio() -> None:
    assert stats.geomean_ratio([math.log(0.5), math.log(2.0)]) == pytest.approx(1.0, abs=1e-15)
    assert stats.geomean_ratio([math.log(0.9)] * 3) == pytest.approx(0.9, abs=1e-15)
