"""The verdict of a completely randomized design (``layout = "unpaired"``): n starts per arm in one
registered random order, no blocks, decided by the exact two-sample permutation test
(:mod:`frankenstein.design.twosample`) over every split of the starts.

The scores are the start-level values' logs (ratio data: the statistic is the difference of mean
logs, the estimate the ratio of geometric means) or the values themselves (difference data, or a
threshold in the metric's unit). A rule whose test is the permutation test (``permutation``, ``harm``
with test permutation, ``mean_by``) runs as the two-sample test; a rule that counts blocks
(``sign``, ``all_blocks_better``, ``all_blocks_by``) has no meaning without pairs and is refused.

    unpaired_reason(rule, n_served, n_candidate)   why the rule cannot decide such a design, or None
    evaluate_unpaired(rule, served, candidate, direction, data) -> Verdict
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from frankenstein.design import stats, twosample
from frankenstein.design.rules.base import BlockRule, DataKind, Direction, Fired
from frankenstein.design.rules.evaluate import BlockRow, ConfidenceInterval, Verdict, effect_thresholds


def unpaired_reason(rule: BlockRule, n_served: int, n_candidate: int) -> str | None:
    """Why ``rule`` cannot decide n_served + n_candidate unpaired starts (registration refuses), or None."""
    if rule.test_name != "permutation":
        return (
            f"the {rule.kind} rule counts blocks, and an unpaired design has none; use permutation, "
            "harm (test permutation) or mean_by (the exact two-sample permutation test)"
        )
    why = twosample.unsupported(n_served, n_candidate)
    if why:
        return why
    p = twosample.smallest_p(n_served, n_candidate, rule.test_side())
    if p > stats.exact_fraction(rule.alpha):
        return (
            f"{n_served} + {n_candidate} starts cannot reach alpha = {rule.alpha:g}: the smallest reachable p "
            f"is {p} = {float(p):.4g} (one split in C({n_served + n_candidate}, {n_candidate}))"
        )
    return None


def evaluate_unpaired(
    rule: BlockRule, served: Sequence[float], candidate: Sequence[float], direction: Direction, data: DataKind
) -> Verdict:
    """The verdict from every ok start's value per arm; non-positive values under ratio data are invalid."""
    data = "difference" if rule.tests_differences() else data
    rows = [BlockRow(block=f"served {i + 1}", served=v) for i, v in enumerate(served)]
    rows += [BlockRow(block=f"candidate {i + 1}", candidate=v) for i, v in enumerate(candidate)]
    base: dict[str, Any] = dict(
        rule=rule,
        direction=direction,
        data=data,
        n_blocks=len(rows),
        rows=rows,
        layout="unpaired",
        smallest_p=twosample.smallest_p(max(1, len(served)), max(1, len(candidate)), rule.test_side()),
    )
    problem = _bad_values(served, candidate, data) or unpaired_reason(rule, len(served), len(candidate))
    if problem:
        return Verdict(word="invalid", says="invalid", reason=problem, **base)
    y_s, y_c = _scale(served, data), _scale(candidate, data)
    sign = -1.0 if direction == "lower" else 1.0
    score_s, score_c = [sign * y for y in y_s], rule.tested([sign * y for y in y_c], direction, data)
    p = twosample.two_sample_p(score_s, score_c, rule.test_side())
    gain = stats.safe_mean([sign * y for y in y_c]) - stats.safe_mean([sign * y for y in y_s])
    word, why = _decide(rule, p, gain, direction, data)
    wins, losses, ties = _comparisons(served, candidate, direction)
    splits = twosample.assignments(len(served), len(candidate))
    test = f"exact two-sample permutation test over all {splits} splits of {len(served)} + {len(candidate)} starts"
    ci, note = _interval(rule, y_s, y_c, data)
    return Verdict(
        word=word,
        says=rule.phrase(word),
        reason=f"{test}: {why}",
        p=p,
        p_float=float(p),
        in_favour=wins,
        against=losses,
        ties=ties,
        geomean_ratio=math.exp(stats.safe_mean(y_c) - stats.safe_mean(y_s)) if data == "ratio" else None,
        mean_difference=stats.safe_mean(candidate) - stats.safe_mean(served),
        ci=ci,
        ci_note=note,
        **base,
    )


def _bad_values(served: Sequence[float], candidate: Sequence[float], data: DataKind) -> str | None:
    for arm, values in (("served", served), ("candidate", candidate)):
        for i, v in enumerate(values):
            if not math.isfinite(v) or (data == "ratio" and v <= 0):
                need = "a positive finite value" if data == "ratio" else "a finite value"
                return f"{arm} start {i + 1}: {v:g} is not {need}"
    return None


def _scale(values: Sequence[float], data: DataKind) -> list[float]:
    return [math.log(v) for v in values] if data == "ratio" else [float(v) for v in values]


def _decide(rule: BlockRule, p: Fraction, gain: float, direction: Direction, data: DataKind) -> tuple[Any, str]:
    """The rule's word from the exact p and the estimated gain (positive = candidate better)."""
    alpha = stats.exact_fraction(rule.alpha)
    if p > alpha:
        return rule.word(None), f"p = {p} > alpha = {float(alpha):g}"
    looks = rule.looks_for()
    fired: Fired = looks if looks != "either" else ("better" if gain > 0 else "worse")
    better, worse = effect_thresholds(rule, direction, data)
    short = gain < better if fired == "better" else gain > -worse
    if rule.min_effect is not None and short:
        return rule.word(None), f"p = {p} <= alpha, but the estimate is short of min_effect = {rule.min_effect:g}"
    return rule.word(fired), f"p = {p} <= alpha = {float(alpha):g}"


def _comparisons(served: Sequence[float], candidate: Sequence[float], direction: Direction) -> tuple[int, int, int]:
    """(candidate better, served better, ties) over every pair of one start of each arm."""
    sign = -1 if direction == "lower" else 1
    pairs = [sign * (c - s) for s in served for c in candidate]
    return sum(x > 0 for x in pairs), sum(x < 0 for x in pairs), sum(x == 0 for x in pairs)


def _interval(
    rule: BlockRule, y_s: list[float], y_c: list[float], data: DataKind
) -> tuple[ConfidenceInterval | None, str]:
    iv = twosample.shift_ci(y_s, y_c, rule.interval_tail())
    if iv is None:
        return None, f"no exact interval at level {float(1 - 2 * rule.interval_tail()):g} with these starts"
    lo, hi = (math.exp(iv.low), math.exp(iv.high)) if data == "ratio" else (iv.low, iv.high)
    estimand = "ratio of geometric means (shift of the log values)" if data == "ratio" else "shift (candidate - served)"
    return ConfidenceInterval(
        low=lo,
        high=hi,
        level=float(1 - 2 * rule.interval_tail()),
        coverage=iv.coverage,
        method="permutation",
        estimand=estimand,
    ), ""
