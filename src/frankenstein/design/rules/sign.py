"""sign: the exact one-sided sign test at alpha (ties count against the candidate)."""

from __future__ import annotations

from typing import ClassVar, Literal

from frankenstein.design import stats
from frankenstein.design.rules.base import BlockRule, register_rule


@register_rule
class SignRule(BlockRule):
    kind: Literal["sign"] = "sign"
    test_name: ClassVar[stats.TestName] = "sign"
    summary = (
        "confirmed when the exact one-sided sign test gives p <= alpha: P(Binomial(n, 1/2) >= blocks "
        "favouring the candidate); ties count against"
    )
