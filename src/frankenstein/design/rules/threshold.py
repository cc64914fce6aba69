"""Threshold rules: "better by at least X in every block" and "mean better by at least X".

X (``by``) is relative (``unit = "relative"``: 0.05 = the candidate's value is at least 5 % lower, or
higher, than the served one) or in the metric's own unit (``unit = "metric"``: 0.079 = at least
0.079 ms lower per step). Each rule tests the gains shifted by the threshold, so the registered
null is "the effect is X" and the test stays exact:

    all_blocks_by   every block beats the threshold. Under the null each block beats it with
                    probability at most 1/2, so p = 1/2**n exactly (the sign test of the shifted gains).
    mean_by         the exact sign-flip permutation test of the shifted gains over all 2**n
                    assignments (the null: gains symmetric about the threshold).

The verdict's reason says which part decided: the blocks short of the threshold, the mean short of
it, or the test's p against alpha. ``min_effect`` is not taken: ``by`` is the threshold. These
rules never curtail (the runner runs every block): their outcomes on unshifted gains are not known.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from frankenstein.design import stats
from frankenstein.design.rules.base import BlockRule, DataKind, Direction, Fired, RuleResult, register_rule

Unit = Literal["relative", "metric"]


class ThresholdRule(BlockRule):
    """What both threshold rules share: the threshold, its unit, and the shift of the gains."""

    by: float = Field(gt=0, description="the threshold: relative (0.05 = 5 %) or in the metric's unit")
    unit: Unit = "relative"

    @model_validator(mode="after")
    def _no_min_effect(self) -> ThresholdRule:
        if self.min_effect is not None:
            raise ValueError(f"a {self.kind} rule takes no min_effect: `by` is its threshold")
        if self.unit == "relative" and self.by >= 1:
            raise ValueError(f"by = {self.by:g} is relative and must be below 1 (0.05 = 5 %)")
        return self

    def threshold_words(self) -> str:
        return f"{self.by:.4g} in the metric's unit" if self.unit == "metric" else f"{self.by * 100:.4g} %"

    def tests_differences(self) -> bool:
        return self.unit == "metric"

    def shift(self, direction: Direction) -> float:
        """The threshold on the gain scale (positive = candidate better): a log ratio, or the metric's unit."""
        if self.unit == "metric":
            return self.by
        return -math.log1p(-self.by) if direction == "lower" else math.log1p(self.by)

    def tested(self, g: Sequence[float], direction: Direction, data: DataKind) -> list[float]:
        t = self.shift(direction)
        return [x - t for x in g]

    def computable(self, n: int, data: DataKind, max_abs: int | None = None) -> str | None:
        if self.unit == "relative" and data == "difference":
            return (
                'a relative threshold (unit = "relative") needs start-level values per arm; these data are '
                'differences: give `by` in the metric\'s unit (unit = "metric")'
            )
        return super().computable(n, data, None)

    def exact_power(self, n: int, q: float) -> float | None:
        return None  # the planner simulates through decide(), which shifts the gains

    def favour_words(self) -> str:
        return f"favour the candidate by at least {self.threshold_words()}"

    def outcomes(self, done: Sequence[float], remaining: int) -> frozenset[Fired]:
        if remaining <= 0:
            return super().outcomes(done, remaining)
        return frozenset({"better", "worse", None})  # never curtail: the done gains here are not shifted


@register_rule
class AllBlocksBy(ThresholdRule):
    """Confirmed when every block beats the served arm by at least ``by``; p = 1/2**n under the null."""

    kind: Literal["all_blocks_by"] = "all_blocks_by"
    summary: ClassVar[str] = "confirmed when every block is better by at least the threshold `by`"

    def describe(self) -> str:
        return f"every block better by at least {self.threshold_words()} (exact: p = 1/2^n under that null)"

    def smallest_p_with(self, k: int, n: int) -> Fraction:
        return Fraction(1, 2**n) if k == n else Fraction(1)

    def run_test(self, g: Sequence[float], cross_check: bool) -> RuleResult:
        n = len(g)
        short = [i + 1 for i, x in enumerate(g) if not x > 0]
        st = stats.sign_test(n - len(short), n, cross_check=cross_check)
        p_scipy = st.p_scipy if cross_check else None
        if short:
            which = ", ".join(str(b) for b in short)
            why = (
                f"the threshold decided: block{'s' if len(short) > 1 else ''} {which} "
                f"{'are' if len(short) > 1 else 'is'} not better by at least {self.threshold_words()} "
                f"({n - len(short)} of {n} blocks are)"
            )
            return RuleResult(st.p, None, p_scipy, why)
        alpha = stats.exact_fraction(self.alpha)
        fired: Fired = "better" if st.p <= alpha else None
        why = f"all {n} blocks better by at least {self.threshold_words()}; p = {st.p} {'<=' if fired else '>'} alpha"
        return RuleResult(st.p, fired, p_scipy, why)


@register_rule
class MeanBy(ThresholdRule):
    """Confirmed when the exact sign-flip test finds the mean better by more than ``by`` at alpha."""

    kind: Literal["mean_by"] = "mean_by"
    test_name: ClassVar[stats.TestName] = "permutation"
    summary: ClassVar[str] = "confirmed when the mean is better by at least the threshold `by` (exact sign-flip test)"

    def describe(self) -> str:
        what = "geometric mean" if self.unit == "relative" else "mean"
        return (
            f"{what} better by at least {self.threshold_words()}: paired sign-flip permutation test of the "
            "gains beyond the threshold over all 2^n assignments, one-sided"
        )

    def run_test(self, g: Sequence[float], cross_check: bool) -> RuleResult:
        res = super().run_test(g, cross_check)
        alpha = stats.exact_fraction(self.alpha)
        if stats.safe_mean(g) <= 0:
            why = f"the threshold decided: the mean is not better by at least {self.threshold_words()} (p = {res.p})"
        elif res.p > alpha:
            why = f"the test decided: the mean is beyond {self.threshold_words()}, but p = {res.p} > alpha"
        else:
            why = f"the mean is better by at least {self.threshold_words()}, p = {res.p} <= alpha"
        return RuleResult(res.p, res.fired, res.p_scipy, why)

    def p_range(self, done: Sequence[float], remaining: int) -> tuple[Fraction, Fraction]:
        return stats.sign_flip_p_range(done, remaining, "greater")
