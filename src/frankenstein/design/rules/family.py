"""A family of candidates: k candidates, each tested against the served arm in the same blocks under the
registered rule, with the family-wise error held at alpha by Holm's step-down over the exact p-values.

Holm: sort the candidates by p; the i-th smallest (i = 1..k) passes only if every p before it passed
and p_(i) <= alpha / (k - i + 1). Its family-wise error (the chance that any candidate no better than
served passes) is at most alpha whatever the dependence between the candidates' tests (they share the
served starts), because each p is exact under its own null. A candidate passes when its own verdict is
"confirmed" (the rule fired, its threshold and min_effect met) and Holm rejects at its rank. None
passing is the outcome "no candidate". With k candidates the smallest p must reach alpha / k, so a
family needs more blocks than a single comparison (3 candidates at 0.05: 1/64 <= 0.0167, 6 blocks).

    holm(ps, alpha)                        {arm: (level at its rank or None, passes Holm)}
    family_reason(rule, n_blocks, k)       why n blocks cannot let any of k candidates pass, or None
    decide_family(rule, served, candidates, direction, blocks) -> Family
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from frankenstein.design import stats
from frankenstein.design.rules.base import BlockRule, Direction
from frankenstein.design.rules.evaluate import Verdict, evaluate

FamilyWord = Literal["confirmed", "no candidate", "invalid"]
METHOD = "Holm's step-down over the exact p-values"


@dataclass(frozen=True)
class CandidateResult:
    """One candidate's verdict under the rule, its rank, and Holm's level at that rank."""

    arm: str
    verdict: Verdict
    rank: int
    level: Fraction | None  # alpha / (k - i + 1) at its place among the sorted p-values; None when invalid
    holm: bool  # Holm rejects its null
    passes: bool  # confirmed by the rule and by Holm


@dataclass(frozen=True)
class Family:
    word: FamilyWord
    why: str
    rows: list[CandidateResult]  # ranked: passing first, then by p, then by the estimate


def holm(ps: dict[str, Fraction | None], alpha: Fraction) -> dict[str, tuple[Fraction | None, bool]]:
    """Holm's step-down; a candidate without a p (invalid) counts in k and never passes."""
    k = len(ps)
    ranked = sorted((p, arm) for arm, p in ps.items() if p is not None)
    out: dict[str, tuple[Fraction | None, bool]] = {arm: (None, False) for arm, p in ps.items() if p is None}
    going = True
    for i, (p, arm) in enumerate(ranked):
        level = alpha / (k - i)
        going = going and p <= level
        out[arm] = (level, going)
    return out


def family_reason(rule: BlockRule, n_blocks: int, k: int) -> str | None:
    """Why no candidate of k could ever pass with n blocks (registration refuses), or None."""
    if rule.looks_for() != "better":
        return f"a family screens for candidates better than served; the {rule.kind} rule does not look for better"
    alpha = stats.exact_fraction(rule.alpha)
    p = rule.smallest_p(n_blocks)
    if p <= alpha / k:
        return None
    need = n_blocks
    while rule.smallest_p(need) > alpha / k:
        need += 1
    return (
        f"with {k} candidates Holm tests the smallest p at alpha/{k} = {float(alpha / k):.4g}: {n_blocks} blocks "
        f"reach at best {p} = {float(p):.4g} (it needs at least {need} blocks)"
    )


def decide_family(
    rule: BlockRule,
    served: Sequence[float],
    candidates: dict[str, Sequence[float]],
    direction: Direction,
    blocks: Sequence[object] | None = None,
) -> Family:
    """Each candidate against served per block under ``rule``, Holm across the family, ranked."""
    verdicts = {arm: evaluate(rule, served, values, direction, blocks) for arm, values in candidates.items()}
    alpha = stats.exact_fraction(rule.alpha)
    levels = holm({arm: v.p if v.word != "invalid" else None for arm, v in verdicts.items()}, alpha)
    results = [
        (arm, v, levels[arm][0], levels[arm][1], v.word == "confirmed" and levels[arm][1])
        for arm, v in verdicts.items()
    ]
    results.sort(key=lambda r: (not r[4], r[1].p if r[1].p is not None else 2, -_gain(r[1], direction)))
    rows = [CandidateResult(arm, v, i + 1, lvl, h, ok) for i, (arm, v, lvl, h, ok) in enumerate(results)]
    return Family(_word(rows), _why(rows, alpha), rows)


def _gain(v: Verdict, direction: Direction) -> float:
    """The estimate, positive = candidate better (for ranking)."""
    if v.geomean_ratio is not None and v.geomean_ratio > 0:
        g = math.log(v.geomean_ratio)
    elif v.mean_difference is not None:
        g = v.mean_difference
    else:
        return -math.inf
    return -g if direction == "lower" else g


def _word(rows: list[CandidateResult]) -> FamilyWord:
    if any(r.passes for r in rows):
        return "confirmed"
    return "invalid" if all(r.verdict.word == "invalid" for r in rows) else "no candidate"


def _why(rows: list[CandidateResult], alpha: Fraction) -> str:
    k = len(rows)
    passing = [r.arm for r in rows if r.passes]
    head = f"{k} candidates, {METHOD} (family-wise error <= alpha = {float(alpha):g})"
    if passing:
        return f"{head}: {', '.join(passing)} pass{'es' if len(passing) == 1 else ''}"
    return f"{head}: no candidate passes"
