"""Decision rules: verdict words, exact p, practical thresholds, curtailment, JSON round-trip."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError

from frankenstein.design import rules
from frankenstein.design.rules import RULE_ADAPTER, Verdict, can_change, evaluate, evaluate_differences, parse_rule
from frankenstein.errors import AnalysisError

SERVED = [10.0, 10.0, 10.0, 10.0, 10.0]
FASTER = [9.0, 9.5, 9.8, 9.1, 9.9]  # every block lower


def test_five_of_five_lower_confirms_with_one_in_32() -> None:
    v = evaluate(parse_rule("sign"), SERVED, FASTER, "lower")
    assert (v.word, v.p, v.p_float, v.p_scipy) == ("confirmed", Fraction(1, 32), 0.03125, 0.03125)
    assert (v.in_favour, v.against, v.ties, v.n_blocks) == (5, 0, 0, 5)
    assert v.geomean_ratio == pytest.approx(math.exp(sum(math.log(c / 10) for c in FASTER) / 5))
    assert [r.favours for r in v.rows] == ["candidate"] * 5
    assert v.rows[0].ratio_minus_one == pytest.approx(-0.1)
    assert v.rows[0].log_ratio == pytest.approx(math.log(0.9))


def test_same_data_higher_is_better_is_not_confirmed() -> None:
    v = evaluate(parse_rule("sign"), SERVED, FASTER, "higher")
    assert (v.word, v.p, v.in_favour, v.against) == ("not confirmed", Fraction(1), 0, 5)
    assert v.reason == "p > alpha = 0.05"


def test_swapping_arms_inverts_geomean_and_moves_p_to_the_other_side() -> None:
    rng = np.random.default_rng(11)
    s = list(rng.uniform(9, 11, 8))
    c = list(rng.uniform(8.5, 10.5, 8))
    better = evaluate(parse_rule("permutation", side="better"), s, c, "lower")
    worse_swapped = evaluate(parse_rule("permutation", side="worse"), c, s, "lower")
    assert better.geomean_ratio * worse_swapped.geomean_ratio == pytest.approx(1.0, abs=1e-14)
    assert better.p == worse_swapped.p
    assert evaluate(parse_rule("harm"), c, s, "lower").p == better.p


def test_four_blocks_sign_is_invalid_with_the_smallest_p() -> None:
    v = evaluate(parse_rule("sign"), SERVED[:4], FASTER[:4], "lower")
    assert v.word == "invalid"
    assert v.reason == (
        "4 blocks cannot reach alpha = 0.05 under the sign rule: the smallest reachable p is "
        "1/16 = 0.0625 (it needs at least 5 blocks)"
    )
    assert v.smallest_p == Fraction(1, 16)


def test_all_blocks_better_needs_every_block() -> None:
    v = evaluate(parse_rule("all_blocks_better"), SERVED, [9.0, 9.5, 10.2, 9.1, 9.9], "lower")
    assert (v.word, v.reason) == ("not confirmed", "4 of 5 blocks favour the candidate; the rule needs all")
    v = evaluate(parse_rule("all_blocks_better"), SERVED, FASTER, "lower")
    assert (v.word, v.reason, v.p) == ("confirmed", "all 5 blocks favour the candidate", Fraction(1, 32))


def test_ties_count_against_the_candidate_in_the_sign_test() -> None:
    v = evaluate(parse_rule("sign"), SERVED, [9.0, 9.5, 10.0, 9.1, 9.9], "lower")
    assert (v.in_favour, v.ties, v.p) == (4, 1, Fraction(6, 32))
    assert v.rows[2].favours == "tie"


def test_harm_rule_shows_harm() -> None:
    slower = [11.0, 10.5, 10.2, 10.9, 10.1, 10.4]
    v = evaluate(parse_rule("harm"), SERVED + [10.0], slower, "lower")
    assert (v.word, v.p) == ("harm shown", Fraction(1, 64))
    v = evaluate(parse_rule("harm", test="sign"), SERVED + [10.0], slower, "lower")
    assert (v.word, v.p) == ("harm shown", Fraction(1, 64))
    assert evaluate(parse_rule("harm"), SERVED + [10.0], slower, "higher").word == "not confirmed"


def test_two_sided_permutation_names_the_direction() -> None:
    slower = [11.0, 10.5, 10.2, 10.9, 10.1, 10.4]
    faster = [9.0, 9.5, 9.8, 9.1, 9.9, 9.6]
    rule = parse_rule("permutation", side="two-sided")
    assert (evaluate(rule, [10.0] * 6, faster, "lower").word, evaluate(rule, [10.0] * 6, faster, "lower").p) == (
        "confirmed",
        Fraction(1, 32),
    )
    assert evaluate(rule, [10.0] * 6, slower, "lower").word == "harm shown"
    assert evaluate(rule, SERVED, FASTER, "lower").word == "invalid"  # 2/32 > 0.05


def test_min_effect_practical_threshold_on_the_geomean() -> None:
    small = [9.9, 9.95, 9.9, 9.92, 9.97]  # every block about 0.3-1% lower: p = 1/32
    v = evaluate(parse_rule("sign", min_effect=0.05), SERVED, small, "lower")
    assert v.word == "not confirmed"
    assert v.reason == (
        "p <= alpha = 0.05, but the geometric-mean ratio 0.9928 is short of the practical threshold min_effect = 0.05"
    )
    assert evaluate(parse_rule("sign", min_effect=0.005), SERVED, small, "lower").word == "confirmed"
    # 5% better when higher is better means a ratio of at least 1.05.
    up = [10.6, 10.7, 10.55, 10.8, 10.52]  # geometric mean ratio 1.0634
    assert evaluate(parse_rule("sign", min_effect=0.06), SERVED, up, "higher").word == "confirmed"
    assert evaluate(parse_rule("sign", min_effect=0.07), SERVED, up, "higher").word == "not confirmed"


def test_differences_exact_fraction_and_direction() -> None:
    d = [2, 1, 1, 0, 3, 1, -1, 2, 0, 1]  # hand count in test_stats: 24/1024
    v = evaluate_differences(parse_rule("permutation"), d, "higher")
    assert (v.word, v.p, v.mean_difference, v.in_favour, v.ties) == ("confirmed", Fraction(3, 128), 1.0, 7, 2)
    assert v.p_scipy == pytest.approx(24 / 1024, abs=1e-15)
    assert v.geomean_ratio is None and v.data == "difference"
    assert evaluate_differences(parse_rule("harm"), d, "lower").word == "harm shown"
    v = evaluate_differences(parse_rule("permutation", min_effect=1.5), d, "higher")
    assert (v.word, v.reason) == (
        "not confirmed",
        "p <= alpha = 0.05, but the mean difference +1 is short of the practical threshold min_effect = 1.5",
    )


def test_non_positive_value_is_invalid_naming_the_block() -> None:
    v = evaluate(parse_rule("sign"), SERVED, [9.0, 9.5, 0.0, 9.1, 9.9], "lower", blocks=["a", "b", "c", "d", "e"])
    assert (v.word, v.reason) == ("invalid", "block c: a ratio needs positive finite values (served 10, candidate 0)")
    assert v.p is None


def test_verdict_json_round_trip() -> None:
    v = evaluate(
        parse_rule("permutation", side="two-sided", min_effect=0.01),
        [10.0] * 6,
        [9.0, 9.5, 9.8, 9.1, 9.9, 9.6],
        "lower",
        blocks=[1, 2, 3, 4, 5, 6],
    )
    text = v.model_dump_json()
    data = json.loads(text)
    assert (
        data["p"] == "1/32" and data["smallest_p"] == "1/32" and data["ci"]["coverage"] == "31/32"
    )  # two-sided: tail 0.025, k = floor(0.025 * 64) = 1
    assert data["rule"] == {"alpha": 0.05, "min_effect": 0.01, "kind": "permutation", "side": "two-sided"}
    back = Verdict.model_validate_json(text)
    assert back == v and isinstance(back.p, Fraction) and isinstance(back.rule, rules.PermutationRule)


def test_verdict_refuses_unknown_fields_and_float_p() -> None:
    data = json.loads(evaluate(parse_rule("sign"), SERVED, FASTER, "lower").model_dump_json())
    with pytest.raises(ValidationError, match="extra"):
        Verdict.model_validate({**data, "surprise": 1})
    with pytest.raises(ValidationError, match="exact fraction"):
        Verdict.model_validate({**data, "p": 0.03125})


def test_rules_are_data_with_extra_forbidden() -> None:
    assert RULE_ADAPTER.validate_python({"kind": "sign", "alpha": 0.01}) == rules.SignRule(alpha=0.01)
    with pytest.raises(ValidationError, match="side"):
        RULE_ADAPTER.validate_python({"kind": "sign", "side": "better"})
    with pytest.raises(
        AnalysisError, match=r"^rule alpha: must be above 0 and at most 0.5 \(0.05 is usual\), got 1.5$"
    ):
        parse_rule("sign", alpha=1.5)
    with pytest.raises(
        AnalysisError, match=r"^--side applies only to the order_adjusted and permutation rule, not 'sign'$"
    ):
        parse_rule("sign", side="better")


def test_ci_matches_the_verdict() -> None:
    rng = np.random.default_rng(9)
    for _ in range(60):
        n = int(rng.integers(5, 10))
        s = list(rng.uniform(9, 11, n))
        c = [x * math.exp(rng.normal(-0.03, 0.04)) for x in s]
        for kind in ("sign", "permutation"):
            v = evaluate(parse_rule(kind), s, c, "lower")
            assert v.ci is not None
            assert (v.word == "confirmed") == (v.ci.high < 1.0)


def test_ci_of_the_geomean_by_permutation_and_median_by_sign() -> None:
    v = evaluate(parse_rule("permutation"), [10.0] * 6, [9.0, 9.5, 9.8, 9.1, 9.9, 9.6], "lower")
    assert v.ci is not None and v.ci.method == "permutation" and v.ci.coverage == Fraction(29, 32)
    assert v.ci.estimand.startswith("geometric-mean ratio")
    assert v.ci.low <= v.geomean_ratio <= v.ci.high  # type: ignore[operator]
    v = evaluate(parse_rule("sign"), SERVED, FASTER, "lower")
    assert v.ci is not None and (v.ci.low, v.ci.high) == pytest.approx((0.9, 0.99))


def test_smallest_p_and_min_blocks_per_rule() -> None:
    assert rules.smallest_p(parse_rule("sign"), 4) == Fraction(1, 16)
    assert rules.min_blocks(parse_rule("sign")) == 5
    assert rules.min_blocks(parse_rule("permutation", side="two-sided")) == 6
    assert rules.min_blocks(parse_rule("harm", alpha=0.01)) == 7
    assert rules.unreachable_reason(parse_rule("all_blocks_better"), 5) is None


def test_curtailment_all_blocks_better() -> None:
    rule = parse_rule("all_blocks_better")
    assert can_change(rule, [0.1, -0.02], 3) is False  # a block already went the other way
    assert can_change(rule, [0.1, 0.02], 3) is True
    assert can_change(rule, [0.1] * 5, 0) is False


def test_curtailment_sign() -> None:
    rule = parse_rule("sign")  # 10 blocks need 9 in favour
    assert can_change(rule, [0.1, 0.1, 0.1], 7) is True
    assert can_change(rule, [-0.1, -0.1], 8) is False  # at most 8 of 10: never confirmed
    assert can_change(rule, [0.1] * 9, 1) is False  # 9 of 10 already: confirmed whatever comes
    assert can_change(parse_rule("sign", min_effect=0.05), [0.1] * 9, 1) is True  # the estimate can still move
    assert can_change(rule, [0.1], 3) is False  # 4 blocks in all: invalid whatever comes


def test_curtailment_permutation_by_bounding() -> None:
    rule = parse_rule("permutation")
    # 4 done with 2 against: c = #{S: sum(S) <= 0} of the done blocks; best p = c / 2**n. By hand,
    # the subsets of {.05, -.04, -.03, .01} with sum <= 0: {}, {-.04}, {-.03}, {-.04,-.03},
    # {-.04,.01}, {-.03,.01}, {.05,-.04,-.03}, {-.04,-.03,.01}, all four: c = 9.
    done = [0.05, -0.04, -0.03, 0.01]
    assert rules.stats.sign_flip_p(done, "greater") == Fraction(9, 16)
    assert can_change(rule, done, 2) is False  # best p = 9/64 > 0.05
    assert can_change(rule, done, 4) is True  # best p = 9/256 <= 0.05
    assert can_change(rule, [0.05] * 9, 1) is True  # one huge future block against can still undo it
