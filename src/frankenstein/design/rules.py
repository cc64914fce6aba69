"""Decision rules as data, and the verdict they give on recorded blocks.

A rule is a pydantic model (``extra="forbid"``), chosen by its ``kind``:

    all_blocks_better   every block favours the candidate (its false-positive rate is 1/2**n)
    sign                exact one-sided sign test at alpha (ties count against the candidate)
    permutation         exact paired sign-flip test at alpha; side better | worse | two-sided
    harm                one-sided: the candidate is worse (test permutation | sign)

Each rule may carry ``min_effect``: a practical threshold the point estimate must also pass
(ratio data: the geometric-mean ratio, 0.05 = 5% better; difference data: the mean difference in
its own units). ``direction`` (lower | higher) says which way is better for the candidate.

Public functions:

    parse_rule(kind, alpha=..., side=..., min_effect=..., test=...)   build a Rule (AnalysisError)
    rule_test(rule)            'sign' or 'permutation': the exact test behind the rule
    smallest_p(rule, n)        smallest p the rule can reach with n blocks
    min_blocks(rule)           fewest blocks for which the rule can reach its alpha
    unreachable_reason(rule, n) why n blocks can never reach alpha, or None
    gains(...)                 per-block evidence for the candidate (positive = candidate better)
    decide(rule, gains, direction, data)   word + exact p from gains (the core of evaluate)
    evaluate(rule, served, candidate, direction)       -> Verdict (from start-level values)
    evaluate_differences(rule, differences, direction) -> Verdict (from candidate - served)
    can_change(rule, done_gains, remaining)            curtailment: can the verdict still change?
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, TypeAdapter,
                      ValidationError, WithJsonSchema)

from frankenstein.design import stats
from frankenstein.errors import AnalysisError

Direction = Literal["lower", "higher"]
DataKind = Literal["ratio", "difference"]
Word = Literal["confirmed", "not confirmed", "harm shown", "invalid"]
RULE_KINDS = ("all_blocks_better", "sign", "permutation", "harm")


def _to_fraction(v: object) -> Fraction:
    if isinstance(v, (Fraction, int)) and not isinstance(v, bool):
        return Fraction(v)
    if isinstance(v, str):
        try:
            return Fraction(v)
        except ValueError as exc:
            raise ValueError(f"not an exact fraction: {v!r}") from exc
    raise ValueError(f"an exact fraction is written as a string like '1/32', got {v!r}")


ExactFraction = Annotated[
    Fraction, PlainValidator(_to_fraction), PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "examples": ["1/32"]}),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Rule(_Model):
    alpha: float = Field(0.05, gt=0, lt=1)
    min_effect: float | None = Field(None, ge=0)


class AllBlocksBetter(_Rule):
    """Confirmed when every block favours the candidate. ``alpha`` only sets the fewest blocks."""

    kind: Literal["all_blocks_better"] = "all_blocks_better"


class SignRule(_Rule):
    kind: Literal["sign"] = "sign"


class PermutationRule(_Rule):
    kind: Literal["permutation"] = "permutation"
    side: Literal["better", "worse", "two-sided"] = "better"


class HarmRule(_Rule):
    """One-sided: fires ("harm shown") when the candidate is worse."""

    kind: Literal["harm"] = "harm"
    test: Literal["permutation", "sign"] = "permutation"


Rule = Annotated[Union[AllBlocksBetter, SignRule, PermutationRule, HarmRule], Field(discriminator="kind")]
RULE_ADAPTER: TypeAdapter[Rule] = TypeAdapter(Rule)


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


class Verdict(_Model):
    """What a rule says about recorded blocks; JSON round-trips (``model_dump_json``/``model_validate_json``)."""

    format_version: Literal[1] = 1
    word: Word
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
    ci: ConfidenceInterval | None = None
    ci_note: str = ""
    p: ExactFraction | None = None
    p_float: float | None = None
    p_scipy: float | None = None
    smallest_p: ExactFraction


@dataclass(frozen=True)
class Decision:
    word: Word
    p: Fraction | None
    reason: str
    p_scipy: float | None = None


def parse_rule(kind: str, *, alpha: float = 0.05, side: str | None = None, min_effect: float | None = None,
               test: str | None = None) -> Rule:
    """Build a rule from command-line words; a bad value raises AnalysisError naming the field."""
    data: dict[str, object] = {"kind": kind, "alpha": alpha}
    if min_effect is not None:
        data["min_effect"] = min_effect
    if side is not None:
        if kind != "permutation":
            raise AnalysisError(f"--side applies only to the permutation rule, not {kind!r}")
        data["side"] = side
    if test is not None:
        if kind != "harm":
            raise AnalysisError(f"--test applies only to the harm rule, not {kind!r}")
        data["test"] = test
    try:
        return RULE_ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"] if p != kind) or "kind"
        raise AnalysisError(f"rule {field}: {err['msg']}") from exc


def rule_test(rule: Rule) -> stats.TestName:
    if isinstance(rule, PermutationRule) or (isinstance(rule, HarmRule) and rule.test == "permutation"):
        return "permutation"
    return "sign"


def _two_sided(rule: Rule) -> bool:
    return isinstance(rule, PermutationRule) and rule.side == "two-sided"


def smallest_p(rule: Rule, n: int) -> Fraction:
    """The smallest p the rule can give with n blocks (1/2**n; 2/2**n for a two-sided test)."""
    return stats.smallest_p(rule_test(rule), n, "two-sided" if _two_sided(rule) else "greater")


def min_blocks(rule: Rule) -> int:
    """The fewest blocks for which the rule can reach its alpha."""
    n = 1
    while smallest_p(rule, n) > stats.exact_fraction(rule.alpha):
        n += 1
    return n


def unreachable_reason(rule: Rule, n: int) -> str | None:
    """Why n blocks can never reach the rule's alpha (for refusal at registration), or None."""
    p = smallest_p(rule, n)
    if p <= stats.exact_fraction(rule.alpha):
        return None
    return (f"{n} blocks cannot reach alpha = {rule.alpha:g} under the {rule.kind} rule: the smallest "
            f"reachable p is {p} = {float(p):.4g} (it needs at least {min_blocks(rule)} blocks)")


def gains(values: Sequence[float], direction: Direction) -> list[float]:
    """Evidence for the candidate per block: log ratios or differences, signed so that positive
    means the candidate is better."""
    return [-v if direction == "lower" else v for v in values]


def effect_thresholds(rule: Rule, direction: Direction, data: DataKind) -> tuple[float, float]:
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


def decide(rule: Rule, g: Sequence[float], direction: Direction = "lower", data: DataKind = "ratio",
           *, cross_check: bool = False) -> Decision:
    """The rule's word and exact p from per-block gains (positive = candidate better).

    Ties (a gain of exactly 0) never count in anyone's favour. With ``cross_check`` the p is also
    computed by scipy (binomtest, or permutation_test over 2**n for n <= 16).
    """
    n = len(g)
    if n == 0:
        return Decision("invalid", None, "no blocks")
    reason = unreachable_reason(rule, n)
    if reason:
        return Decision("invalid", None, reason)
    p, fired, p_scipy, why = _test(rule, g, cross_check)
    if fired is None:
        return Decision("not confirmed", p, why, p_scipy)
    better, worse = effect_thresholds(rule, direction, data)
    mean = math.fsum(g) / n
    short = mean < better if fired == "better" else mean > -worse
    if rule.min_effect is not None and short:
        est = mean if direction == "higher" else -mean
        what = f"geometric-mean ratio {math.exp(est):.4g}" if data == "ratio" else f"mean difference {est:+.4g}"
        return Decision("not confirmed", p, f"{why}, but the {what} is short of the practical threshold "
                        f"min_effect = {rule.min_effect:g}", p_scipy)
    return Decision("confirmed" if fired == "better" else "harm shown", p, why, p_scipy)


def _test(rule: Rule, g: Sequence[float], cross_check: bool) -> tuple[Fraction, str | None, float | None, str]:
    """(p, 'better' | 'worse' | None when the rule does not fire, scipy's p, reason)."""
    n, alpha = len(g), stats.exact_fraction(rule.alpha)
    up, down = sum(1 for x in g if x > 0), sum(1 for x in g if x < 0)
    if isinstance(rule, AllBlocksBetter):
        st = stats.sign_test(up, n, cross_check=cross_check)
        fired = "better" if up == n else None
        why = f"all {n} blocks favour the candidate" if fired else f"{up} of {n} blocks favour the candidate; the rule needs all"
        return st.p, fired, st.p_scipy if cross_check else None, why
    if rule_test(rule) == "sign":
        harm = isinstance(rule, HarmRule)
        st = stats.sign_test(down if harm else up, n, cross_check=cross_check)
        fired = ("worse" if harm else "better") if st.p <= alpha else None
        return st.p, fired, st.p_scipy if cross_check else None, _p_reason(st.p, alpha)
    side = _side(rule)
    try:
        p = stats.sign_flip_p(g, side)
    except ValueError as exc:  # too many real-valued blocks to enumerate
        raise AnalysisError(str(exc)) from exc
    scipy_p = stats.sign_flip_p_scipy(g, side) if cross_check and 2 <= n <= stats.SCIPY_CROSS_CHECK_BLOCKS else None
    fired = None
    if p <= alpha:
        fired = {"greater": "better", "less": "worse"}.get(side) or ("better" if math.fsum(g) > 0 else "worse")
    return p, fired, scipy_p, _p_reason(p, alpha)


def _side(rule: Rule) -> stats.Side:
    if isinstance(rule, HarmRule):
        return "less"
    assert isinstance(rule, PermutationRule)
    return {"better": "greater", "worse": "less", "two-sided": "two-sided"}[rule.side]  # type: ignore[return-value]


def _p_reason(p: Fraction, alpha: Fraction) -> str:
    return f"p {'<=' if p <= alpha else '>'} alpha = {float(alpha):g}"


def evaluate(rule: Rule, served: Sequence[float], candidate: Sequence[float], direction: Direction,
             blocks: Sequence[object] | None = None) -> Verdict:
    """The verdict from start-level values per block (one per arm); the test runs on log ratios.

    Non-positive or non-finite values, or too few blocks for alpha, give the word "invalid".
    """
    if len(served) != len(candidate):
        raise AnalysisError(f"served has {len(served)} blocks, candidate {len(candidate)}")
    labels = _labels(blocks, len(served))
    base = dict(rule=rule, direction=direction, data="ratio", n_blocks=len(served),
                smallest_p=smallest_p(rule, len(served)))
    for label, s, c in zip(labels, served, candidate):
        if not (math.isfinite(s) and math.isfinite(c) and s > 0 and c > 0):
            rows = [BlockRow(block=b, served=_finite(x), candidate=_finite(y)) for b, x, y in zip(labels, served, candidate)]
            return Verdict(word="invalid", reason=f"block {label}: a ratio needs positive finite values "
                           f"(served {s:g}, candidate {c:g})", rows=rows, **base)
    logs = stats.log_ratios(served, candidate)
    rel = stats.ratios_minus_one(served, candidate)
    g = gains(logs, direction)
    rows = [BlockRow(block=b, served=s, candidate=c, ratio_minus_one=r, log_ratio=lr, favours=_favours(x))
            for b, s, c, r, lr, x in zip(labels, served, candidate, rel, logs, g)]
    ci, note = _interval(rule, logs, "ratio")
    extra = dict(geomean_ratio=stats.geomean_ratio(logs) if logs else None, ci=ci, ci_note=note)
    return _verdict(rule, g, direction, "ratio", rows, base, extra)


def evaluate_differences(rule: Rule, differences: Sequence[float], direction: Direction,
                         blocks: Sequence[object] | None = None) -> Verdict:
    """The verdict from paired differences (candidate - served) per block, e.g. pass counts.

    Whole-number differences are tested by exact convolution; there is no ratio, so the summary
    gives the mean difference and min_effect is read in the data's own units.
    """
    labels = _labels(blocks, len(differences))
    base = dict(rule=rule, direction=direction, data="difference", n_blocks=len(differences),
                smallest_p=smallest_p(rule, len(differences)))
    for label, d in zip(labels, differences):
        if not math.isfinite(d):
            rows = [BlockRow(block=b, difference=_finite(x)) for b, x in zip(labels, differences)]
            return Verdict(word="invalid", reason=f"block {label}: difference is not a finite number", rows=rows, **base)
    g = gains(differences, direction)
    rows = [BlockRow(block=b, difference=d, favours=_favours(x)) for b, d, x in zip(labels, differences, g)]
    ci, note = _interval(rule, list(differences), "difference")
    mean = math.fsum(differences) / len(differences) if differences else None
    return _verdict(rule, g, direction, "difference", rows, base, dict(mean_difference=mean, ci=ci, ci_note=note))


def _verdict(rule: Rule, g: list[float], direction: Direction, data: DataKind, rows: list[BlockRow],
             base: dict[str, object], extra: dict[str, object]) -> Verdict:
    d = decide(rule, g, direction, data, cross_check=True)
    return Verdict(
        word=d.word, reason=d.reason, rows=rows, p=d.p, p_float=None if d.p is None else float(d.p),
        p_scipy=d.p_scipy, in_favour=sum(1 for x in g if x > 0), against=sum(1 for x in g if x < 0),
        ties=sum(1 for x in g if x == 0), **base, **extra,  # type: ignore[arg-type]
    )


def _interval(rule: Rule, values: list[float], data: DataKind) -> tuple[ConfidenceInterval | None, str]:
    """The exact CI that matches the rule's test, at two-sided level 1 - 2*tail.

    tail = alpha for one-sided rules, so the relevant bound excludes no-change exactly when the
    test gives p <= alpha; alpha/2 for a two-sided rule.
    """
    if not values:
        return None, "no blocks"
    tail = stats.exact_fraction(rule.alpha) / (2 if _two_sided(rule) else 1)
    method = rule_test(rule)
    note = ""
    if method == "permutation" and len(values) > stats.MAX_CI_BLOCKS:
        method, note = "sign", f"more than {stats.MAX_CI_BLOCKS} blocks: the interval is the sign test's (median)"
    iv = stats.sign_flip_ci(values, tail) if method == "permutation" else stats.sign_ci(values, tail)
    if iv is None:
        return None, f"no exact interval at level {float(1 - 2 * tail):g} with {len(values)} blocks"
    lo, hi = (math.exp(iv.low), math.exp(iv.high)) if data == "ratio" else (iv.low, iv.high)
    estimand = {("permutation", "ratio"): "geometric-mean ratio (centre of symmetry of the log ratios)",
                ("sign", "ratio"): "median ratio (order statistics of the log ratios)",
                ("permutation", "difference"): "centre of symmetry of the differences",
                ("sign", "difference"): "median difference"}[(iv.method, data)]
    return ConfidenceInterval(low=lo, high=hi, level=float(1 - 2 * tail), coverage=iv.coverage, method=iv.method,
                    estimand=estimand), note


def can_change(rule: Rule, done_gains: Sequence[float], remaining: int) -> bool:
    """Curtailment: can the verdict still change when ``remaining`` blocks are still to run?

    Exact for all_blocks_better and the sign test (counts bound everything). For the permutation
    test it is decided by bounding: future values of any size give the reachable p range
    (stats.sign_flip_p_range), exact for unbounded data and conservative for bounded data. With
    min_effect a confirmation can never be fixed early (future blocks move the estimate).
    """
    if remaining <= 0:
        return False
    n, alpha = len(done_gains) + remaining, stats.exact_fraction(rule.alpha)
    if smallest_p(rule, n) > alpha:
        return False  # invalid whatever happens
    lo, hi = _p_range(rule, done_gains, remaining)
    can_fire, must_fire = lo <= alpha, hi <= alpha and rule.min_effect is None
    return can_fire and not must_fire


def _p_range(rule: Rule, g: Sequence[float], remaining: int) -> tuple[Fraction, Fraction]:
    d = len(g)
    if isinstance(rule, AllBlocksBetter):
        if any(x <= 0 for x in g):
            return Fraction(1), Fraction(1)  # can never fire: a block already went the other way
        return stats.sign_p_range(d, d, remaining)
    if rule_test(rule) == "sign":
        k = sum(1 for x in g if (x < 0 if isinstance(rule, HarmRule) else x > 0))
        return stats.sign_p_range(k, d, remaining)
    return stats.sign_flip_p_range(g, remaining, _side(rule))


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
