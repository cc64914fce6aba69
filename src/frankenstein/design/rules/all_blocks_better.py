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
    summary = "confirmed when every block favours the candidate (a tie or one block against: not confirmed)"

    def run_test(self, g: Sequence[float], cross_check: bool) -> RuleResult:
        n = len(g)
        up = sum(1 for x in g if x > 0)
        st = stats.sign_test(up, n, cross_check=cross_check)
        fired: Fired = "better" if up == n else None
        why = (
            f"all {n} blocks favour the candidate"
            if fired
            else f"{up} of {n} blocks favour the candidate; the rule needs all"
        )
        return RuleResult(st.p, fired, st.p_scipy if cross_check else None, why)

    def exact_power(self, n: int, q: float) -> float | None:
        return q**n

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
