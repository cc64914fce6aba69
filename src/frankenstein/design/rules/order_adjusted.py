"""order_adjusted: the exact sign-flip test over pairs of counter-balanced blocks.

Under ``order = "balanced"`` blocks come in pairs whose second block runs the first's order with the
arms swapped: one draw decides both. So the randomization flips a pair's two gains together, and the
pair's sum holds each arm once in each position: an order effect (the second start of a block slower,
say) cancels in it. The test is the paired sign-flip test of the pair sums over all 2**(n/2)
assignments, exact under that randomization whatever the order effect; its smallest p is 1/2**(n/2),
so it needs twice the blocks of the per-block test (10 for 0.05). Registration asks for a balanced
draw, an even number of blocks and ``failure_policy = "invalidate"`` (a dropped block would break its
pair). The interval inverts the same test over the pair means. It never curtails.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import ClassVar, Literal

from frankenstein.design import stats
from frankenstein.design.rules.base import BlockRule, DataKind, Fired, RuleResult, _p_reason, register_rule

_SIDES: dict[str, stats.Side] = {"better": "greater", "worse": "less", "two-sided": "two-sided"}


def pair_sums(g: Sequence[float]) -> list[float]:
    """Blocks 1+2, 3+4, ...: a trailing block without its partner (a run still going) is left out."""
    return [g[i] + g[i + 1] for i in range(0, len(g) - 1, 2)]


@register_rule
class OrderAdjusted(BlockRule):
    kind: Literal["order_adjusted"] = "order_adjusted"
    side: Literal["better", "worse", "two-sided"] = "better"
    test_name: ClassVar[stats.TestName] = "permutation"
    summary: ClassVar[str] = (
        "exact sign-flip test over pairs of counter-balanced blocks (order effects cancel in each pair's sum)"
    )

    def test_side(self) -> stats.Side:
        return _SIDES[self.side]

    def describe(self) -> str:
        side = {"better": "one-sided, candidate better", "worse": "one-sided, candidate worse"}.get(
            self.side, "two-sided"
        )
        return f"order-adjusted: sign-flip test of the pair sums of counter-balanced blocks over all 2^(n/2) assignments, {side}"

    def smallest_p(self, n: int) -> Fraction:
        return stats.smallest_p("permutation", n // 2, self.test_side())

    def smallest_p_with(self, k: int, n: int) -> Fraction:
        """k favourable blocks spread one to a pair make min(k, n/2) pairs that favour it."""
        p = Fraction(1, 2 ** min(k, n // 2))
        return min(Fraction(1), 2 * p) if self.test_side() == "two-sided" else p

    def run_test(self, g: Sequence[float], cross_check: bool) -> RuleResult:
        sums = pair_sums(g)
        side = self.test_side()
        p = stats.sign_flip_p(sums, side)
        check = cross_check and 2 <= len(sums) <= stats.SCIPY_CROSS_CHECK_BLOCKS
        p_scipy = stats.sign_flip_p_scipy(sums, side) if check else None
        alpha = stats.exact_fraction(self.alpha)
        left = " (the last block waits for its partner)" if len(g) % 2 else ""
        why = f"{len(sums)} pairs of counter-balanced blocks{left}; {_p_reason(p, alpha)}"
        return RuleResult(p, self._fired(sums, p, alpha), p_scipy, why)

    def interval_values(self, values: Sequence[float]) -> list[float]:
        return [s / 2 for s in pair_sums(values)]

    def computable(self, n: int, data: DataKind, max_abs: int | None = None) -> str | None:
        return super().computable(n // 2, data, None if max_abs is None else 2 * max_abs)

    def exact_power(self, n: int, q: float) -> float | None:
        return None

    def outcomes(self, done: Sequence[float], remaining: int) -> frozenset[Fired]:
        if remaining <= 0:
            return super().outcomes(done, remaining)
        return frozenset({"better", "worse", None})  # never curtail

    def shape_problem(self, blocks: int, order: str | None, failure_policy: str) -> tuple[str, str] | None:
        if order == "independent":
            return "order", 'the order_adjusted rule tests pairs of counter-balanced blocks: order = "balanced"'
        if blocks % 2:
            return "blocks", f"the order_adjusted rule tests pairs of blocks: an even number of blocks, not {blocks}"
        if failure_policy != "invalidate":
            return "failure_policy", (
                'a dropped block would break its pair under the order_adjusted rule: failure_policy = "invalidate"'
            )
        return None
