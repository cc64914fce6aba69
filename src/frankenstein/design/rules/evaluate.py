"""The verdict a rule gives on recorded blocks, and curtailment; no function here asks a rule's kind."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from pydantic import Field

from frankenstein.design import stats
from frankenstein.design.rules.base import BlockRule, DataKind, Direction, ExactFraction, Fired, Rule, Word, _Model
from frankenstein.errors import AnalysisError

PBound = Literal["exact", "at most", "at least"]


class BlockRow(_Model):
    block: str
    served: float | None = None
    candidate: float | None = None
    difference: float | None = None
    ratio_minus_one: float | None = None
    log_ratio: float | None = None
    favours: Literal["candidate", "served", "tie"] | None = None


class ConfidenceInterval(_Model):
    """An exact CI on the data's scale: candidate/served ratio, or difference (candidate - served)."""

    low: float
    high: float
    level: float  # nominal two-sided level, 1 - 2*tail
    coverage: ExactFraction  # exact two-sided coverage for continuous data
    method: Literal["sign", "permutation"]
    estimand: str
    descriptive: bool = False  # True: the rule does not decide on this interval (all_blocks_better)


class Verdict(_Model):
    """What a rule says about recorded blocks; JSON round-trips (``model_dump_json``/``model_validate_json``).

    ``word`` is one of four; ``says`` is the word as printed by the rule ('no harm shown' for a harm
    rule that did not fire).
    """

    format_version: Literal[1] = 1
    word: Word
    says: str = ""
    reason: str
    rule: Rule
    direction: Direction
    data: DataKind
    n_blocks: int
    in_favour: int = 0
    against: int = 0
    ties: int = 0
    rows: list[BlockRow] = Field(default_factory=list)
    geomean_ratio: float | None = None
    mean_difference: float | None = None
    mean_exact: ExactFraction | None = None  # the mean of whole-number differences, exactly
    ci: ConfidenceInterval | None = None
    ci_note: str = ""
    harm_bound: float | None = None  # the one-sided (1 - alpha) bound on the harm side (data scale), harm rules
    non_inferior: bool | None = None  # the registered margin's loss is excluded at one-sided alpha (harm margin)
    p_non_inferior: ExactFraction | None = None
    p: ExactFraction | None = None
    p_bound: PBound = "exact"  # a curtailed verdict: the registered test's p over every completion is at most/least p
    p_float: float | None = None
    p_scipy: float | None = None
    smallest_p: ExactFraction
    # "unpaired": a completely randomized design (rules/unpaired.py): rows are starts, in_favour/against/ties
    # count the pairs of one start of each arm
    layout: Literal["paired", "unpaired"] = "paired"


def loss_words(v: Verdict) -> str | None:
    """A clear loss said beside 'not confirmed': the candidate was worse in so many blocks that the sign
    test for worse gives p <= alpha, though the registered rule tests only for better. None otherwise."""
    if v.word != "not confirmed" or v.rule.looks_for() != "better" or v.layout != "paired" or v.against == 0:
        return None
    p = stats.sign_test(v.against, v.n_blocks, cross_check=False).p
    if p > stats.exact_fraction(v.rule.alpha):
        return None
    return (
        f"the candidate was worse in {v.against} of {v.n_blocks} blocks (a sign test for worse would give "
        f"p = {p} = {float(p):.4g}); the rule tests only for better"
    )


@dataclass(frozen=True)
class Decision:
    word: Word
    p: Fraction | None
    reason: str
    p_scipy: float | None = None
    bound: PBound = "exact"


def rule_test(rule: BlockRule) -> stats.TestName:
    """'sign' or 'permutation': the exact test behind the rule."""
    return rule.test_name


def smallest_p(rule: BlockRule, n: int) -> Fraction:
    """The smallest p the rule can give with n blocks (1/2**n; 2/2**n for a two-sided test)."""
    return rule.smallest_p(n)


def min_blocks(rule: BlockRule) -> int:
    """The fewest blocks for which the rule can reach its alpha."""
    n = 1
    while rule.smallest_p(n) > stats.exact_fraction(rule.alpha):
        n += 1
    return n


def unreachable_reason(rule: BlockRule, n: int) -> str | None:
    """Why n blocks can never reach the rule's alpha (for refusal at registration), or None."""
    p = rule.smallest_p(n)
    if p <= stats.exact_fraction(rule.alpha):
        return None
    return (
        f"{n} blocks cannot reach alpha = {rule.alpha:g} under the {rule.kind} rule: the smallest "
        f"reachable p is {p} = {float(p):.4g} (it needs at least {min_blocks(rule)} blocks)"
    )


def check_computable(rule: BlockRule, n_blocks: int, data_kind: DataKind, max_abs: int | None = None) -> str | None:
    """Why the rule cannot be computed exactly over n blocks of this data, or None (registration refuses).

    ``max_abs``: for whole-number differences (pass counts), the largest |difference| a block can have
    (tasks x draws); it lets the convolution count more than MAX_ENUMERATED_BLOCKS blocks exactly.
    The analysis and the planner use the same limits, so nothing registered is refused later.
    """
    return rule.computable(n_blocks, data_kind, max_abs)


def remaining_blocks(registered: int, analysed: int, dropped: int) -> int:
    """Blocks still to run: registered - analysed - dropped (a dropped block never comes back)."""
    return max(0, registered - analysed - dropped)


def gains(values: Sequence[float], direction: Direction) -> list[float]:
    """Evidence for the candidate per block: log ratios or differences, signed so that positive
    means the candidate is better."""
    return [-v if direction == "lower" else v for v in values]


def effect_thresholds(rule: BlockRule, direction: Direction, data: DataKind) -> tuple[float, float]:
    """(better, worse): how far the mean gain must go for min_effect, on the gain scale.

    Ratio data: 'better by e' is a geometric-mean ratio <= 1-e (lower is better) or >= 1+e
    (higher is better), on the log scale; difference data: the mean difference in its own units.
    """
    e = rule.min_effect
    if e is None:
        return 0.0, 0.0
    if data == "difference":
        return e, e
    up, down = math.log1p(e), (-math.log1p(-e) if e < 1 else math.inf)
    return (down, up) if direction == "lower" else (up, down)


def format_difference(x: float | Fraction) -> str:
    """A mean difference as read: '0 (no difference)', '+1', '-0.25'; an exact mean of whole numbers
    as its fraction: '+1/10 = +0.1'."""
    if x == 0:
        return "0 (no difference)"
    if isinstance(x, Fraction):
        sign = "+" if x > 0 else "-"
        whole = f"{sign}{abs(x)}"
        return whole if x.denominator == 1 else f"{whole} = {float(x):+.6g}"
    return f"{x:+.6g}"


def decide(
    rule: BlockRule,
    g: Sequence[float],
    direction: Direction = "lower",
    data: DataKind = "ratio",
    *,
    cross_check: bool = False,
) -> Decision:
    """The rule's word and exact p from per-block gains (positive = candidate better).

    Ties (a gain of exactly 0) never count in anyone's favour. A non-finite gain is invalid. With
    ``cross_check`` the p is also computed by scipy (binomtest, or permutation_test for n <= 16).
    """
    n = len(g)
    if n == 0:
        return Decision("invalid", None, "no blocks")
    bad = next((i for i, x in enumerate(g) if not math.isfinite(x)), None)
    if bad is not None:
        return Decision("invalid", None, f"block {bad + 1}: not a finite number ({g[bad]!r})")
    reason = unreachable_reason(rule, n) or rule.computable(n, data, _max_abs(g, data))
    if reason:
        return Decision("invalid", None, reason)
    res = rule.run_test(rule.tested(g, direction, data), cross_check)
    if res.fired is None:
        return Decision(rule.word(None), res.p, res.why, res.p_scipy)
    better, worse = effect_thresholds(rule, direction, data)
    mean = stats.safe_mean(g)
    short = mean < better if res.fired == "better" else mean > -worse
    if rule.min_effect is not None and short:
        est = mean if direction == "higher" else -mean
        what = (
            f"geometric-mean ratio {math.exp(est):.4g}"
            if data == "ratio"
            else f"mean difference {format_difference(est)}"
        )
        return Decision(
            rule.word(None),
            res.p,
            f"{res.why}, but the {what} is short of the practical threshold min_effect = {rule.min_effect:g}",
            res.p_scipy,
        )
    return Decision(rule.word(res.fired), res.p, res.why, res.p_scipy)


def _max_abs(g: Sequence[float], data: DataKind) -> int | None:
    if data != "difference" or not stats.is_integral(g):
        return None
    return int(max((abs(x) for x in g), default=0))


def outcomes(rule: BlockRule, done_gains: Sequence[float], remaining: int) -> frozenset[Fired]:
    """Every firing some completion of ``remaining`` blocks could give (never too few)."""
    return rule.outcomes(done_gains, remaining)


def curtailed(
    rule: BlockRule,
    done_gains: Sequence[float],
    remaining: int,
    direction: Direction = "lower",
    data: DataKind = "ratio",
) -> Decision | None:
    """Curtailment: the decision every completion of ``remaining`` blocks gives, or None if it can change.

    The word is the rule's own: the outcomes of the rule (its p range under values of any size,
    or its own bound) hold one firing only. Non-finite data, or too few blocks for alpha, is
    'invalid' whatever comes. The p is the registered test's bound over every completion: at most
    its largest when the rule fires, at least its smallest when it does not (exact when they meet),
    never the p of a shorter test over the blocks run.
    """
    if remaining <= 0:
        return None
    n = len(done_gains) + remaining
    completion = [*done_gains, *([0.0] * remaining)]
    if any(not math.isfinite(x) for x in done_gains) or unreachable_reason(rule, n):
        return decide(rule, completion, direction, data)
    if rule.computable(n, data, _max_abs(done_gains, data)) is not None:
        return None  # cannot be computed exactly: run every block
    fires = outcomes(rule, done_gains, remaining)
    if len(fires) != 1:
        return None
    (fired,) = fires
    d = decide(rule, completion, direction, data)
    if d.word != rule.word(fired):  # the bound and the decision disagree: never stop on that
        return None
    p, bound = _p_over_completions(rule, done_gains, remaining, fired)
    return Decision(d.word, p, f"curtailed after {len(done_gains)} of {n} blocks: {d.reason}", None, bound)


def _p_over_completions(
    rule: BlockRule, done_gains: Sequence[float], remaining: int, fired: Fired
) -> tuple[Fraction, PBound]:
    """The registered test's p over every completion: at most the largest (it fired), at least the smallest."""
    lo, hi = rule.p_range(done_gains, remaining)
    if lo == hi:
        return lo, "exact"
    return (hi, "at most") if fired is not None else (lo, "at least")


def can_change(rule: BlockRule, done_gains: Sequence[float], remaining: int) -> bool:
    """Curtailment: can the verdict still change when ``remaining`` blocks are still to run?

    False only when every completion gives one word (see :func:`curtailed`); with min_effect a
    confirmation can never be fixed early (future blocks move the estimate).
    """
    if remaining <= 0:
        return False
    return curtailed(rule, done_gains, remaining) is None


def evaluate(
    rule: BlockRule,
    served: Sequence[float],
    candidate: Sequence[float],
    direction: Direction,
    blocks: Sequence[object] | None = None,
) -> Verdict:
    """The verdict from start-level values per block (one per arm); the test runs on log ratios.

    Non-positive or non-finite values, or too few blocks for alpha, give the word "invalid".
    """
    if len(served) != len(candidate):
        raise AnalysisError(f"served has {len(served)} blocks, candidate {len(candidate)}")
    labels = _labels(blocks, len(served))
    base: dict[str, Any] = dict(
        rule=rule, direction=direction, data="ratio", n_blocks=len(served), smallest_p=rule.smallest_p(len(served))
    )
    for label, s, c in zip(labels, served, candidate):
        if not (math.isfinite(s) and math.isfinite(c) and s > 0 and c > 0):
            rows = [
                BlockRow(block=b, served=_finite(x), candidate=_finite(y)) for b, x, y in zip(labels, served, candidate)
            ]
            return Verdict(
                word="invalid",
                says="invalid",
                reason=f"block {label}: a ratio needs positive finite values (served {s:g}, candidate {c:g})",
                rows=rows,
                **base,
            )
    if rule.tests_differences():  # a threshold in the metric's unit: the test runs on candidate - served
        v = evaluate_differences(rule, [c - s for s, c in zip(served, candidate)], direction, blocks)
        rows = [r.model_copy(update={"served": s, "candidate": c}) for r, s, c in zip(v.rows, served, candidate)]
        return v.model_copy(update={"rows": rows})
    logs = stats.log_ratios(served, candidate)
    rel = stats.ratios_minus_one(served, candidate)
    g = gains(logs, direction)
    rows = [
        BlockRow(block=b, served=s, candidate=c, ratio_minus_one=r, log_ratio=lr, favours=_favours(x))
        for b, s, c, r, lr, x in zip(labels, served, candidate, rel, logs, g)
    ]
    ci, note = _interval(rule, logs, "ratio")
    extra: dict[str, Any] = dict(geomean_ratio=stats.geomean_ratio(logs) if logs else None, ci=ci, ci_note=note)
    return _verdict(rule, g, direction, "ratio", rows, base, extra)


def evaluate_differences(
    rule: BlockRule, differences: Sequence[float], direction: Direction, blocks: Sequence[object] | None = None
) -> Verdict:
    """The verdict from paired differences (candidate - served) per block, e.g. pass counts.

    Whole-number differences are counted exactly by convolution; there is no ratio, so the summary
    gives the mean difference and min_effect is read in the data's own units.
    """
    labels = _labels(blocks, len(differences))
    base: dict[str, Any] = dict(
        rule=rule,
        direction=direction,
        data="difference",
        n_blocks=len(differences),
        smallest_p=rule.smallest_p(len(differences)),
    )
    for label, d in zip(labels, differences):
        if not math.isfinite(d):
            rows = [BlockRow(block=b, difference=_finite(x)) for b, x in zip(labels, differences)]
            return Verdict(
                word="invalid",
                says="invalid",
                reason=f"block {label}: difference is not a finite number",
                rows=rows,
                **base,
            )
    g = gains(differences, direction)
    rows = [BlockRow(block=b, difference=d, favours=_favours(x)) for b, d, x in zip(labels, differences, g)]
    ci, note = _interval(rule, list(differences), "difference")
    exact = stats.exact_mean(differences)
    mean = float(exact) if exact is not None else stats.safe_mean(differences) if differences else None
    extra: dict[str, Any] = dict(mean_difference=mean, mean_exact=exact, ci=ci, ci_note=note)
    return _verdict(rule, g, direction, "difference", rows, base, extra)


def _verdict(
    rule: BlockRule,
    g: list[float],
    direction: Direction,
    data: DataKind,
    rows: list[BlockRow],
    base: dict[str, Any],
    extra: dict[str, Any],
) -> Verdict:
    d = decide(rule, g, direction, data, cross_check=True)
    reason = d.reason
    if d.word != "invalid" and rule.looks_for() == "worse":
        extra = {**extra, "harm_bound": harm_bound(rule, g, direction, data)}
        ni = non_inferiority(rule, g, direction, data)
        if ni is not None:
            extra |= {"p_non_inferior": ni[0], "non_inferior": ni[1]}
            reason += f"; {non_inferiority_words(rule, ni)}"
    return Verdict(
        word=d.word,
        says=rule.phrase(d.word),
        reason=reason,
        rows=rows,
        p=d.p,
        p_float=None if d.p is None else float(d.p),
        p_scipy=d.p_scipy,
        in_favour=sum(1 for x in g if x > 0),
        against=sum(1 for x in g if x < 0),
        ties=sum(1 for x in g if x == 0),
        **base,
        **extra,
    )


def harm_bound(rule: BlockRule, g: Sequence[float], direction: Direction, data: DataKind) -> float | None:
    """The one-sided (1 - alpha) confidence bound on the harm side, on the data's scale (a difference
    candidate - served, or a ratio), by inverting the rule's own test: every harm beyond it is excluded.

    From the gains (positive = candidate better) the lower bound L is the exact test's inversion (the
    k-th smallest subset mean for the sign-flip test, an order statistic for the sign test); harms of
    more than -L are rejected at one-sided alpha. None when no bound exists (1/2**n > alpha)."""
    tail = stats.exact_fraction(rule.alpha)
    iv = None
    if rule.test_name == "permutation" and len(g) <= stats.MAX_CI_BLOCKS:
        iv = stats.sign_flip_ci(g, tail)
    if iv is None:
        iv = stats.sign_ci(g, tail)
    if iv is None:
        return None
    low = iv.low  # on the gain scale; back to the data's (the sign flips when lower is better)
    value = -low if direction == "lower" else low
    return math.exp(value) if data == "ratio" else value


def _margin_gain(rule: BlockRule, direction: Direction, data: DataKind, margin: float) -> float:
    """A harm of ``margin`` as a positive gain: in the data's units, or 0.05 = 5% worse on the log scale."""
    if data == "difference":
        return margin
    return math.log1p(margin) if direction == "lower" else -math.log1p(-min(margin, 1 - 1e-12))


def non_inferiority(
    rule: BlockRule, g: Sequence[float], direction: Direction, data: DataKind
) -> tuple[Fraction, bool] | None:
    """The exact one-sided p that the harm is at least the registered margin, and whether p <= alpha.

    The rule's own test on the gains shifted by the margin (side 'greater'): a sign-flip test of
    g + m, or the sign test counting g + m > 0. None when the rule registered no margin."""
    margin = rule.harm_margin()
    if margin is None:
        return None
    m = _margin_gain(rule, direction, data, margin)
    shifted = [x + m for x in g]
    if rule.test_name == "permutation":
        p = stats.sign_flip_p(shifted, "greater")
    else:
        p = stats.sign_test(sum(1 for x in shifted if x > 0), len(shifted), cross_check=False).p
    return p, p <= stats.exact_fraction(rule.alpha)


def non_inferiority_words(rule: BlockRule, ni: tuple[Fraction, bool]) -> str:
    p, shown = ni
    margin = rule.harm_margin() or 0.0
    what = "excluded" if shown else "not excluded"
    return (
        f"non-inferiority at margin {margin:g}: a harm of {margin:g} or more is {what} "
        f"(one-sided p = {p} {'<=' if shown else '>'} alpha = {rule.alpha:g})"
    )


_ESTIMANDS = {
    ("permutation", "ratio"): "geometric-mean ratio (centre of symmetry of the log ratios)",
    ("sign", "ratio"): "median ratio (order statistics of the log ratios)",
    ("permutation", "difference"): "centre of symmetry of the differences",
    ("sign", "difference"): "median difference",
}


def _interval(rule: BlockRule, values: list[float], data: DataKind) -> tuple[ConfidenceInterval | None, str]:
    """The exact CI that matches the rule's test, at two-sided level 1 - 2*tail.

    tail = alpha for one-sided rules, so the relevant bound excludes no-change exactly when the
    test gives p <= alpha (the same tie values, inclusive at ties); alpha/2 for a two-sided rule.
    All blocks equal give no interval: a single point has no exact coverage.
    """
    values = rule.interval_values(values)
    if not values:
        return None, "no blocks"
    if any(not math.isfinite(v) for v in values):
        return None, "a value is not finite"
    if min(values) == max(values):
        return None, f"every block has the same value ({values[0]:g}): a single point, no interval with exact coverage"
    tail = rule.interval_tail()
    method = rule.test_name
    note = ""
    if method == "permutation" and len(values) > stats.MAX_CI_BLOCKS:
        method, note = "sign", f"more than {stats.MAX_CI_BLOCKS} blocks: the interval is the sign test's (median)"
    iv = stats.sign_flip_ci(values, tail) if method == "permutation" else stats.sign_ci(values, tail)
    if iv is None:
        return None, f"no exact interval at level {float(1 - 2 * tail):g} with {len(values)} blocks"
    lo, hi = (math.exp(iv.low), math.exp(iv.high)) if data == "ratio" else (iv.low, iv.high)
    return ConfidenceInterval(
        low=lo,
        high=hi,
        level=float(1 - 2 * tail),
        coverage=iv.coverage,
        method=iv.method,
        estimand=_ESTIMANDS[(iv.method, data)],
        descriptive=not rule.interval_decides,
    ), note


def _favours(gain: float) -> Literal["candidate", "served", "tie"]:
    return "candidate" if gain > 0 else "served" if gain < 0 else "tie"


def _labels(blocks: Sequence[object] | None, n: int) -> list[str]:
    if blocks is None:
        return [str(i + 1) for i in range(n)]
    if len(blocks) != n:
        raise AnalysisError(f"{len(blocks)} block labels for {n} blocks")
    return [str(b) for b in blocks]


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
