"""permutation: the exact paired sign-flip test at alpha, side better | worse | two-sided."""

from __future__ import annotations

from typing import ClassVar, Literal

from frankenstein.design import stats
from frankenstein.design.rules.base import BlockRule, register_rule

_SIDES: dict[str, stats.Side] = {"better": "greater", "worse": "less", "two-sided": "two-sided"}


@register_rule
class PermutationRule(BlockRule):
    kind: Literal["permutation"] = "permutation"
    side: Literal["better", "worse", "two-sided"] = "better"
    test_name: ClassVar[stats.TestName] = "permutation"
    summary = (
        "exact sign-flip test of the sum over all 2**n assignments: side better confirms, worse shows "
        "harm, two-sided does either at alpha (the direction of the mean)"
    )

    def test_side(self) -> stats.Side:
        return _SIDES[self.side]
