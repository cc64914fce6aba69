"""all_blocks_better: confirmed when every block favours the candidate (false-positive rate 1/2**n)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Literal

from frankenstein.design import stats
from frankenstein.design.rules.base import BlockRule, Fired, RuleResult, register_rule


@register_rule
class AllBlocksBetter(BlockRule):
    """Confirmed when every block favours the candidate. ``alpha`` only sets the fewest blocks."""

    kind: Literal["all_blocks_better"] = "all_blocks_better"
    interval_decides = False  # the rule counts blocks; the interval beside it is descriptive
    summary = "confirmed when every block favours the candidate (a tie or one block against: not confirmed)"

    def run_test(self, g: Sequence[float], cross_check: bool) -> RuleResult:
        """The rule's own test: its statistic is "every block favours the candidate". Its p is 1/2**n
        when every block does and 1 otherwise (a sign test's p of 7 of 8 is another test's)."""
        n = len(g)
        up = sum(1 for x in g if x > 0)
        if up < n:
            return RuleResult(Fraction(1), None, None, f"{up} of {n} blocks favour the candidate; the rule needs all")
        st = stats.sign_test(n, n, cross_check=cross_check)
        return RuleResult(st.p, "better", st.p_scipy if cross_check else None, f"all {n} blocks favour the candidate")

    def exact_power(self, n: int, q: float) -> float | None:
        return q**n

    def smallest_p_with(self, k: int, n: int) -> Fraction:
        return Fraction(1, 2**n) if k == n else Fraction(1)

    def p_range(self, done: Sequence[float], remaining: int) -> tuple[Fraction, Fraction]:
        if any(not x > 0 for x in done):
            return Fraction(1), Fraction(1)
        return stats.sign_p_range(len(done), len(done), remaining)

    def outcomes(self, done: Sequence[float], remaining: int) -> frozenset[Fired]:
        """Fires only if every block favours the candidate: a block against or a tie fixes 'not
        confirmed'; while blocks remain, one of them may still tie or go against."""
        if any(not x > 0 for x in done):
            return frozenset({None})
        if remaining == 0:
            return frozenset({self.run_test(done, False).fired})
        return frozenset({"better", None})
