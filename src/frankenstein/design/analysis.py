"""Analysis of a registered design under its registered rule, from the starts recorded under it.

Per block the start-level value of each arm is the mean of that arm's ok starts in the block (one
start per arm per block by default). A failed or invalid start is handled by the registered failure
policy: ``drop_block`` leaves its block out (and says so), ``invalidate`` makes the verdict invalid.
Secondary metrics are summarised by their geometric-mean ratio and labelled "reported, not tested".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frankenstein.campaign import Campaign, open_campaign
from frankenstein.design import registry, rules, stats
from frankenstein.design.model import ARMS
from frankenstein.design.table import format_verdict


@dataclass
class Analysis:
    reg: registry.Registered
    verdict: rules.Verdict | None
    blocks_done: int
    dropped: list[str] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    secondary: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_block: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def word(self) -> str:
        if self.extra.get("word"):
            return str(self.extra["word"])
        return self.verdict.word if self.verdict else "invalid"


def _starts(campaign: Campaign, design_id: str) -> list[Any]:
    return campaign.store.query("SELECT * FROM starts WHERE design_id = ? ORDER BY block, position", (design_id,))


def arm_values(campaign: Campaign, reg: registry.Registered, metric: str) -> tuple[dict[int, dict[str, float]], list[dict[str, Any]]]:
    """{block: {arm: mean value over ok starts}}, and the failed/invalid starts."""
    acc: dict[int, dict[str, list[float]]] = {}
    failures = []
    for row in _starts(campaign, reg.design_id):
        if row["status"] != "ok":
            failures.append({"block": row["block"], "arm": row["arm"], "status": row["status"], "reason": row["reason"]})
            continue
        v = json.loads(row["metrics"]).get(metric)
        if v is None:
            continue
        acc.setdefault(row["block"], {}).setdefault(row["arm"], []).append(float(v))
    return {b: {a: sum(v) / len(v) for a, v in arms.items()} for b, arms in acc.items()}, failures


def block_values(campaign: Campaign, reg: registry.Registered) -> tuple[dict[int, float], dict[int, float], list[str]]:
    """Primary-metric value per complete block and arm, after the failure policy; and notes on dropped blocks."""
    values, failures = arm_values(campaign, reg, reg.design.primary_metric)
    bad_blocks = {f["block"] for f in failures}
    notes = []
    served, candidate = {}, {}
    for b, arms in sorted(values.items()):
        if b in bad_blocks and reg.design.failure_policy == "drop_block":
            continue
        if all(a in arms for a in ARMS):
            served[b], candidate[b] = arms["served"], arms["candidate"]
    for f in failures:
        notes.append(f"block {f['block'] + 1}: {f['arm']} start {f['status']} ({f['reason']}); block dropped")
    return served, candidate, notes


def can_still_change(reg: registry.Registered, served: list[float], candidate: list[float], remaining: int) -> bool:
    rule = reg.design.rule
    if rule.kind == "fidelity":
        return True
    g = rules.gains(stats.log_ratios(served, candidate), reg.frozen.direction)
    return rules.can_change(rule, g, remaining)  # type: ignore[arg-type]


def analyze(campaign: Campaign, design_id: str) -> Analysis:
    reg = registry.get(campaign, design_id)
    if reg.design.kind == "fidelity":
        from frankenstein.design.kind_fidelity import analyze_fidelity

        return analyze_fidelity(campaign, reg)
    if reg.design.kind == "agent":
        from frankenstein.design.kind_agent import analyze_agent

        return analyze_agent(campaign, reg)
    served, candidate, notes = block_values(campaign, reg)
    _, failures = arm_values(campaign, reg, reg.design.primary_metric)
    blocks = sorted(served)
    out = Analysis(reg=reg, verdict=None, blocks_done=len(blocks), dropped=notes, failures=failures)
    if failures and reg.design.failure_policy == "invalidate":
        out.extra["word"] = "invalid"
        out.extra["reason"] = f"{len(failures)} failed start(s) and the failure policy is 'invalidate'"
    out.verdict = rules.evaluate(reg.design.rule, [served[b] for b in blocks], [candidate[b] for b in blocks],  # type: ignore[arg-type]
                                 reg.frozen.direction, blocks=[b + 1 for b in blocks])
    _curtailed(out, [served[b] for b in blocks], [candidate[b] for b in blocks])
    for metric in [reg.design.primary_metric, *reg.design.secondary]:
        vals, _ = arm_values(campaign, reg, metric)
        out.per_block[metric] = vals
    for metric in reg.design.secondary:
        out.secondary[metric] = _secondary(out.per_block[metric])
    return out


def _curtailed(out: Analysis, served: list[float], candidate: list[float]) -> None:
    """A curtailed run stopped because no remaining blocks could change the verdict: any completion
    of the remaining blocks gives the same word, so it is decided on a completion with no effect."""
    d = out.reg.design
    remaining = d.blocks - len(served)
    if d.stopping != "curtail" or remaining <= 0 or not served or "word" in out.extra:
        return
    if can_still_change(out.reg, served, candidate, remaining):
        return
    g = rules.gains(stats.log_ratios(served, candidate), out.reg.frozen.direction) + [0.0] * remaining
    dec = rules.decide(d.rule, g, out.reg.frozen.direction)  # type: ignore[arg-type]
    reason = f"curtailed after {len(served)} of {d.blocks} blocks: no remaining blocks could change the verdict"
    if out.verdict is not None:
        out.verdict = out.verdict.model_copy(update={"word": dec.word, "reason": reason})


def _secondary(vals: dict[int, dict[str, float]]) -> dict[str, Any]:
    pairs = [(a["served"], a["candidate"]) for a in vals.values() if "served" in a and "candidate" in a]
    pairs = [(s, c) for s, c in pairs if s > 0 and c > 0]
    if not pairs:
        return {"blocks": 0, "geomean_ratio": None}
    logs = [math.log(c / s) for s, c in pairs]
    return {"blocks": len(pairs), "geomean_ratio": stats.geomean_ratio(logs)}


def format_analysis(a: Analysis) -> list[str]:
    d = a.reg.design
    lines = [f"design {a.reg.design_id} ({d.kind}): {d.name}", f"hypothesis: {d.hypothesis or '-'}"]
    if d.kind != "fidelity":
        lines.append(f"primary metric: {d.primary_metric} ({a.reg.frozen.direction} is better); "
                     f"{a.blocks_done} of {d.blocks} blocks complete")
    lines.append("")
    if "lines" in a.extra:
        lines += a.extra["lines"]
    elif a.verdict is not None:
        lines += format_verdict(a.verdict)
    if a.extra.get("word") and a.extra.get("reason"):
        lines.append(f"verdict under the registered stopping and failure rules: {a.extra['word']} ({a.extra['reason']})")
    for note in a.dropped:
        lines.append(f"note: {note}")
    if a.secondary:
        lines += ["", "secondary metrics (reported, not tested):"]
        for m, s in a.secondary.items():
            g = s["geomean_ratio"]
            lines.append(f"  {m}: geometric-mean ratio {'-' if g is None else f'{g:.4f}'} over {s['blocks']} blocks")
    return lines


def analyze_registered(campaign_dir: Path, design_id: str) -> list[str]:
    """Lines for ``frank analyze DESIGN_ID``."""
    with open_campaign(campaign_dir) as c:
        return format_analysis(analyze(c, design_id))
