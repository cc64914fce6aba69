"""Analysis of a registered design under its registered rule, from the starts recorded under it.

The design's kind (:mod:`frankenstein.design.kinds`) makes the :class:`Analysis`; this module looks the
kind up and prints the result for ``frank analyze``.

    analyze(campaign, design_id) -> Analysis
    analyze_evidence(campaign, evidence) -> Analysis            the same, from evidence already read
    format_analysis(analysis, percentiles=None) -> list[str]   with the per-arm latency percentiles, if given
    analyze_registered(campaign_dir, design_id) -> list[str]
"""

from __future__ import annotations

from pathlib import Path

from frankenstein.campaign import Campaign, open_campaign
from frankenstein.design import registry, timespent
from frankenstein.design.kinds import kind_of, timed
from frankenstein.design.kinds.base import (
    Analysis,
    Evidence,
    arm_values,
    block_values,
    can_still_change,
    speculation_lines,
)
from frankenstein.measure import metrics
from frankenstein.measure.timings import RATES
from frankenstein.design.percentiles import Percentiles, arm_percentiles, percentile_lines
from frankenstein.design.start import load_warnings, resumed_warnings
from frankenstein.design.predicts import PredictionCheck, compare, parse_prediction
from frankenstein.design.table import format_verdict

__all__ = [
    "Analysis",
    "analyze",
    "analyze_registered",
    "arm_values",
    "block_values",
    "can_still_change",
    "format_analysis",
]


def analyze(campaign: Campaign, design_id: str) -> Analysis:
    """The kind's analysis of the design, its starts read from the store once (:class:`Evidence`)."""
    return analyze_evidence(campaign, Evidence.read(campaign, registry.get(campaign, design_id)))


def analyze_evidence(campaign: Campaign, ev: Evidence) -> Analysis:
    """The kind's analysis of evidence already read (the note reads a design's starts once for all it says)."""
    a = kind_of(ev.reg.design.kind).analyze(campaign, ev)
    a.warnings = [*load_warnings(ev.starts, timed=timed(ev.reg.design.kind)), *resumed_warnings(ev.starts), *a.warnings]
    a.time_spent = timespent.summarize(ev.starts, ev.reg.design.cache)
    a.predictions = prediction_checks(campaign, ev.reg, a)
    return a


def added_parts(reg: registry.Registered) -> list[str] | None:
    """The parts a design's candidate adds to its served arm, or None (command arms, another recipe)."""
    served, cand = reg.frozen.recipes.get("served"), reg.frozen.recipes.get("candidate")
    if served is None or cand is None or cand.parts[: len(served.parts)] != served.parts:
        return None
    return cand.parts[len(served.parts) :] or None


def observed_difference(a: Analysis) -> tuple[float, int] | None:
    """Mean over the analysed blocks of candidate − served (the primary metric's unit), and the block count."""
    rows = a.verdict.rows if a.verdict else []
    diffs = [r.candidate - r.served for r in rows if r.served is not None and r.candidate is not None]
    return (sum(diffs) / len(diffs), len(diffs)) if diffs else None


def prediction_checks(campaign: Campaign, reg: registry.Registered, a: Analysis) -> list[PredictionCheck]:
    """Each earlier design of the same part and primary metric that registered ``predicts``, against what
    this design observed."""
    parts, seen = added_parts(reg), observed_difference(a)
    if parts is None or seen is None:
        return []
    out = []
    for row in campaign.store.registry_rows():
        if row.seq >= reg.seq or row.design_id == reg.design_id:
            continue
        earlier = registry.get(campaign, row.design_id)
        d = earlier.design
        if d.predicts is None or d.primary_metric != reg.design.primary_metric or added_parts(earlier) != parts:
            continue
        pred = parse_prediction(d.predicts, d.primary_metric, earlier.unit(d.primary_metric))
        out.append(compare(pred, earlier.design_id, seen[0], seen[1], reg.frozen.direction))
    return out


def format_analysis(a: Analysis, percentiles: Percentiles | None = None) -> list[str]:
    d = a.reg.design
    lines = [f"design {a.reg.design_id} ({d.kind}): {d.name}", f"hypothesis: {d.hypothesis or '-'}"]
    if not (kind_of(d.kind).measures_fidelity or kind_of(d.kind).measures_memory):
        lines.append(
            f"primary metric: {d.primary_metric} ({a.reg.frozen.direction} is better); "
            f"{a.blocks_done} of {d.blocks} blocks complete"
        )
    lines.append("")
    if a.lines:
        lines += a.lines
    elif a.verdict is not None:
        lines += format_verdict(a.verdict, a.incomplete)
    if a.invalidated:
        lines.append(f"verdict under the registered stopping and failure rules: invalid ({a.invalidated})")
    for note in a.dropped:
        lines.append(f"note: {note}")
    for warning in a.warnings:
        lines += f"warning: {warning}".split("\n")
    lines += veto_lines(a)
    if a.predictions:
        lines += ["", "predicted by an earlier design of the same part (candidate − served):"]
        lines += [f"  {p.sentence()}" for p in a.predictions]
    if a.secondary:
        lines += ["", "secondary metrics (reported, not tested):"]
        for m, s in a.secondary.items():
            g = s["geomean_ratio"]
            if g is None and s.get("per_arm"):
                only = ", ".join(f"{arm} {v:.4f}" for arm, v in s["per_arm"].items())
                why = s.get("no_ratio", "only one arm has it")
                lines.append(f"  {m}: {why}, reported per arm (no ratio): {only}")
                continue
            lines.append(f"  {m}: geometric-mean ratio {'-' if g is None else f'{g:.4f}'} over {s['blocks']} blocks")
    if a.speculation:
        lines += ["", "speculation per arm (summed over the turns that drafted; not a ratio between arms):"]
        lines += [f"  {line}" for line in speculation_lines(a.speculation)]
    lines += rate_lines(a)
    if percentiles:
        lines += ["", *percentile_lines(percentiles)]
    return lines


def rate_lines(a: Analysis) -> list[str]:
    """Each arm's start-level rates (throughput, goodput: :data:`~frankenstein.measure.timings.RATES`) the design
    names, as the mean over its starts with their range; nothing when it names none."""
    named = [m for m in RATES if m in a.per_block]
    rows = []
    for arm in ("served", "candidate"):
        for m in named:
            xs = [v[arm] for v in a.per_block[m].values() if arm in v]
            if xs:
                unit = metrics.BUILTIN[m].unit
                rows.append(f"  {arm:<9}  {m:<19}  {sum(xs) / len(xs):.4g} {unit} ({min(xs):.4g} to {max(xs):.4g})")
    if not rows:
        return []
    head = "throughput per arm (mean over its starts, range; per second of each start's measured wall span):"
    return ["", head, *rows]


def veto_lines(a: Analysis) -> list[str]:
    """The registered vetoes, each with what the starts showed; adopt refuses on any not passed."""
    if not a.vetoes:
        return []
    out = ["", "vetoes (registered with the design; adopt refuses on any that did not pass):"]
    return out + [f"  {v.sentence()}" for v in a.vetoes]


def analyze_registered(campaign_dir: Path, design_id: str) -> list[str]:
    """Lines for ``frank analyze DESIGN_ID``."""
    with open_campaign(campaign_dir) as c:
        ev = Evidence.read(c, registry.get(c, design_id))
        return format_analysis(analyze_evidence(c, ev), arm_percentiles(c.store, ev.starts))
