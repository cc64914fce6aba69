"""One test per hole of #13 in the statistics (items 1, 4, 5, 7, and the pure pieces of 2 and 3).

Each docstring records what the code before the fix (git 5ad44c2, design/rules.py and stats.py)
did on the same input, measured by running that code: every one of these failed there.
"""

from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction

import pytest

from frankenstein.design import plan, rules, stats
from frankenstein.design.rules import can_change, decide, evaluate, evaluate_differences, parse_rule


def test_all_blocks_better_with_curtail_waits_for_the_eighth_block_and_confirms() -> None:
    """Item 1. Before: can_change(all_blocks_better, [0.1]*7, 1) was False (a sign-test bound), so a
    curtailed run stopped and judged a completion 'not confirmed' although 8 favourable blocks confirm."""
    rule = parse_rule("all_blocks_better")
    assert can_change(rule, [0.1] * 7, 1) is True
    assert rules.curtailed(rule, [0.1] * 7, 1) is None
    assert decide(rule, [0.1] * 8, "higher").word == "confirmed"
    assert rules.curtailed(rule, [0.1, 0.0], 8) is not None  # a tie already: 'not confirmed' whatever comes
    assert rules.curtailed(rule, [0.1, 0.0], 8).word == "not confirmed"  # type: ignore[union-attr]


def test_interval_and_test_agree_on_decimal_ties() -> None:
    """Item 5. Before: sign_flip_ci gave [1.85e-17, 0.8] (0 excluded) while the test gave p = 1/16 > 0.05:
    the tie 0.4 + 0.3 - 0.7 = 0 in theory was a tie to the test (its tolerance) but not to the interval."""
    x = [0.8, 0.4, -0.7, 0.3, 0.3, 0.8, 0.8]
    iv = stats.sign_flip_ci(x, 0.05)
    assert stats.sign_flip_p(x, "greater") == Fraction(1, 16)
    assert iv is not None and iv.low == 0.0  # inclusive at the tie
    v = evaluate_differences(parse_rule("permutation"), x, "higher")
    assert v.word == "not confirmed" and v.ci is not None and v.ci.low <= 0 <= v.ci.high


def test_interval_excludes_zero_exactly_when_the_test_rejects_on_decimal_data() -> None:
    """Item 5, swept: decimal data with planted ties, every one-sided rule; before, the interval and
    the test disagreed on data like the case above."""
    grid = (0.1, 0.2, 0.3, 0.4, 0.7, 0.8)
    for vals in itertools.islice(itertools.product(grid, repeat=6), 0, None, 37):
        for neg in range(6):
            x = [v if i != neg else -round(vals[(i + 1) % 6] + vals[(i + 2) % 6], 1) for i, v in enumerate(vals)]
            iv = stats.sign_flip_ci(x, 0.05)
            assert iv is not None
            assert (iv.low > 0) == (stats.sign_flip_p(x, "greater") <= Fraction(1, 20)), x
            assert (iv.high < 0) == (stats.sign_flip_p(x, "less") <= Fraction(1, 20)), x


def test_decide_with_nan_is_invalid() -> None:
    """Item 7. Before: decide(sign, [0.1, nan, 0.2, 0.3, 0.4]) said 'not confirmed'."""
    d = decide(parse_rule("sign"), [0.1, math.nan, 0.2, 0.3, 0.4])
    assert (d.word, d.p) == ("invalid", None) and "block 2" in d.reason
    assert rules.curtailed(parse_rule("sign"), [math.nan], 9).word == "invalid"  # type: ignore[union-attr]


def test_values_near_the_float_limit_decide() -> None:
    """Item 7. Before: evaluate_differences on values near 1e308 raised OverflowError (fsum)."""
    v = evaluate_differences(
        parse_rule("permutation"), [1.7e308, 1.6e308, 1.5e308, 1.1e308, 1.2e308, 1.3e308], "higher"
    )
    assert (v.word, v.p, v.p_scipy) == ("confirmed", Fraction(1, 64), 0.015625)
    assert v.mean_difference == pytest.approx(1.4e308)
    assert v.ci is not None and 1.1e308 <= v.ci.low <= v.ci.high <= 1.7e308


def test_all_ties_give_no_interval_with_a_coverage_it_lacks() -> None:
    """Item 7. Before: six equal blocks gave the interval [1, 1] labelled 'exact coverage 31/32'."""
    v = evaluate(parse_rule("sign"), [10.0] * 6, [10.0] * 6, "lower")
    assert v.ci is None and "same value" in v.ci_note


def test_harm_rule_words() -> None:
    """Item 7. Before: a harm rule that did not fire was only 'not confirmed' (no word of its own)."""
    quiet = evaluate(parse_rule("harm"), [10.0] * 6, [9.0] * 6, "lower")
    assert (quiet.word, quiet.says) == ("not confirmed", "no harm shown")
    fired = evaluate(parse_rule("harm"), [10.0] * 6, [11.0, 11.5, 10.5, 11.2, 11.1, 10.9], "lower")
    assert (fired.word, fired.says) == ("harm shown", "harm shown")
    assert evaluate(parse_rule("sign"), [10.0] * 6, [11.0] * 6, "lower").says == "not confirmed"


def test_mean_difference_reads_properly_for_whole_numbers() -> None:
    """Item 7. Before: a mean difference of 0 printed '+0'."""
    assert rules.format_difference(0.0) == "0 (no difference)"
    assert rules.format_difference(1.0) == "+1"
    assert rules.format_difference(-0.25) == "-0.25"
    d = decide(parse_rule("sign", min_effect=1), [1.0, 1.0, 1.0, 1.0, 1.0, 0.5], "higher", "difference")
    assert d.word == "not confirmed" and "mean difference +0.916667 is short" in d.reason


@pytest.mark.timeout(30)
def test_distinct_large_integers_are_counted_in_bounded_time_and_memory() -> None:
    """Item 4. Before: the integer convolution kept every distinct subset sum: 20 distinct large
    integers took 11.8 s and 107 MiB here (22 blocks: 7.9 s and 554 MB in the issue)."""
    d = [(3**i + 7 * i) * (-1) ** i * 1000003 for i in range(34)]
    t0 = time.perf_counter()
    p = stats.sign_flip_p(d, "greater")
    assert time.perf_counter() - t0 < 10
    small = d[:12]
    brute = sum(1 for signs in itertools.product((0, 1), repeat=12) if sum(v for s, v in zip(signs, small) if s) <= 0)
    assert stats.sign_flip_p(small, "greater") == Fraction(brute, 2**12)
    assert 0 < p < 1


def test_registration_planner_and_analysis_agree_on_what_is_exact() -> None:
    """Item 4. Before: 41+ real-valued permutation blocks were accepted at registration (no check) and
    recommended by the planner (plan_blocks(permutation, sd=0.1, effect=0.03, max_blocks=100) said 69),
    then refused by the analysis with an AnalysisError."""
    perm = parse_rule("permutation")
    assert rules.check_computable(perm, 40, "ratio") is None
    reason = rules.check_computable(perm, 41, "ratio")
    assert reason is not None and "at most 40 blocks" in reason
    assert decide(perm, [0.01 * (i + 1) for i in range(41)]).word == "invalid"
    assert rules.check_computable(perm, 200, "difference", max_abs=5) is None  # pass counts: convolution
    assert decide(perm, [float((i % 5) - 1) for i in range(200)], "higher", "difference").word in (
        "confirmed",
        "not confirmed",
    )
    assert rules.check_computable(parse_rule("sign"), 1000, "ratio") is None
    row = plan.plan_blocks(perm, 0.1, 0.03, "lower", max_blocks=100, simulations=200)
    assert row.blocks is None or row.blocks <= 40
    assert "not above 40 blocks" in row.method


def test_remaining_blocks_do_not_count_dropped_ones() -> None:
    """Item 3 (the pure formula): remaining = registered - analysed - dropped."""
    assert rules.remaining_blocks(10, 8, 1) == 1
    assert rules.remaining_blocks(10, 9, 1) == 0


def test_curtail_on_pass_count_differences_with_a_zero_arm() -> None:
    """Item 2 (the pure piece): curtailment of an agent design on the registered difference test,
    with an arm that passes nothing (log ratios of pass counts crashed before)."""
    rule = parse_rule("permutation")
    diffs = [3.0, 2.0, 4.0, 3.0, 5.0, 2.0, 3.0]  # candidate passes, served arm 0
    g = rules.gains(diffs, "higher")
    assert rules.curtailed(rule, g, 3, "higher", "difference") is None  # huge future losses could still undo it
    early = rules.curtailed(parse_rule("sign"), [1.0] * 9, 1, "higher", "difference")
    assert early is not None and early.word == "confirmed" and early.reason.startswith("curtailed after 9 of 10")
    assert rules.curtailed(rule, [-1.0] * 9, 1, "higher", "difference").word == "not confirmed"  # type: ignore[union-attr]
