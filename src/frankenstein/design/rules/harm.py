"""harm: one-sided, fires ("harm shown") when the candidate is worse; test permutation | sign."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from frankenstein.design import stats
from frankenstein.design.rules.base import BlockRule, register_rule


@register_rule
class HarmRule(BlockRule):
    """One-sided: fires ("harm shown") when the candidate is worse; otherwise "no harm shown"."""

    kind: Literal["harm"] = "harm"
    test: Literal["permutation", "sign"] = "permutation"
    margin: float | None = Field(
        None,
        gt=0,
        description=(
            "non-inferiority margin, registered: the largest harm the verdict must exclude at one-sided alpha "
            "(difference data: in the data's units, e.g. passes per start; ratio data: 0.05 = 5% worse)"
        ),
    )
    summary = (
        "harm shown when the exact one-sided test (permutation, or sign counting blocks against the "
        "candidate) gives p <= alpha that the candidate is worse; otherwise no harm shown"
    )

    @property
    def test_name(self) -> stats.TestName:  # type: ignore[override]
        return self.test

    def test_side(self) -> stats.Side:
        return "less"

    def harm_margin(self) -> float | None:
        return self.margin
