"""Vetoes: a secondary metric with its own registered rule, checked from the same starts as the primary.

A speed design's primary rule says whether the part is faster; a veto says what must not get worse on the
way. ``adopt`` refuses a design any of whose vetoes failed (or could not be checked), naming the veto, and
the note lists it under "What didn't work" with the veto that stopped it. Two rules:

* ``not_worse``: the geometric-mean ratio (candidate/served) of the metric over the blocks is not worse than
  ``tolerance`` (a fraction; 0 = not worse at all), in the metric's better direction;
* ``blocks_better``: the metric is better in at least ``at_least`` blocks.

    [[vetoes]]
    metric = "decode_ms_per_token"
    rule = "blocks_better"
    at_least = 5

Pure: :func:`evaluate_veto` takes per-block values and the metric's direction and returns a
:class:`VetoResult` (``passed`` None when no block has both arms: absent is never a pass).

    Veto                                   the design file's ``[[vetoes]]`` table
    evaluate_veto(veto, values, direction) -> VetoResult
    veto_problem(veto, blocks, known)      -> (field, why) | None, for registration
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from frankenstein.validation import UserFile

VetoRuleName = Literal["not_worse", "blocks_better"]


class Veto(UserFile):
    """One registered veto: a metric and the rule it must meet for the part to be adopted."""

    metric: str
    rule: VetoRuleName
    at_least: int | None = Field(default=None, ge=1, description="blocks_better: blocks that must be better")
    tolerance: float = Field(
        default=0.0, ge=0, allow_inf_nan=False, description="not_worse: how much worse the geometric mean may be"
    )

    @model_validator(mode="after")
    def _fields_of_its_rule(self) -> Veto:
        if self.rule == "blocks_better" and self.at_least is None:
            raise ValueError('rule "blocks_better" needs at_least (the blocks that must be better)')
        if self.rule == "not_worse" and self.at_least is not None:
            raise ValueError('at_least belongs to rule "blocks_better"; rule "not_worse" takes a tolerance')
        if self.rule == "blocks_better" and self.tolerance:
            raise ValueError('tolerance belongs to rule "not_worse"; rule "blocks_better" takes at_least')
        return self

    def name(self, blocks: int, direction: str) -> str:
        """The veto in words, e.g. 'decode_ms_per_token lower in at least 5 of 5 blocks'."""
        if self.rule == "blocks_better":
            return f"{self.metric} {direction} in at least {self.at_least} of {blocks} blocks"
        worse = "higher" if direction == "lower" else "lower"
        slack = f" by more than {self.tolerance * 100:g} %" if self.tolerance else ""
        return f"{self.metric} not {worse}{slack} (geometric mean)"


@dataclass(frozen=True)
class VetoResult:
    """One veto checked: ``passed`` None when it could not be checked."""

    name: str
    metric: str
    passed: bool | None
    observed: str  # what the starts showed, e.g. 'lower in 3 of 5 blocks, geometric-mean ratio 0.9920 (-0.80 %)'

    @property
    def word(self) -> str:
        return {True: "passed", False: "failed", None: "not checked"}[self.passed]

    def sentence(self) -> str:
        return f"veto '{self.name}' {self.word}: {self.observed}"


def veto_problem(veto: Veto, blocks: int, known: Collection[str]) -> tuple[str, str] | None:
    """(field suffix, why) for a veto registration must refuse, else None."""
    if veto.metric not in known:
        return "metric", f"unknown metric {veto.metric!r} (known: {', '.join(sorted(known))})"
    if veto.at_least is not None and veto.at_least > blocks:
        return "at_least", f"{veto.at_least} blocks better can never happen in a design of {blocks} blocks"
    return None


def evaluate_veto(veto: Veto, values: dict[int, dict[str, float]], direction: str, blocks: int) -> VetoResult:
    """The veto over ``{block: {arm: value}}``: the blocks where both arms have a value above zero."""
    pairs = [(v["served"], v["candidate"]) for _, v in sorted(values.items()) if "served" in v and "candidate" in v]
    pairs = [(s, c) for s, c in pairs if s > 0 and c > 0]
    name = veto.name(blocks, direction)
    if not pairs:
        return VetoResult(name, veto.metric, None, f"no block has {veto.metric} above zero in both arms")
    ratio = math.exp(sum(math.log(c / s) for s, c in pairs) / len(pairs))
    better = sum(1 for s, c in pairs if (c < s if direction == "lower" else c > s))
    observed = (
        f"{direction} in {better} of {len(pairs)} blocks, geometric-mean ratio {ratio:.4f} ({(ratio - 1) * 100:+.2f}%)"
    )
    if veto.rule == "blocks_better":
        return VetoResult(name, veto.metric, better >= (veto.at_least or 0), observed)
    ok = ratio <= 1 + veto.tolerance if direction == "lower" else ratio >= 1 - veto.tolerance
    return VetoResult(name, veto.metric, ok, observed)
