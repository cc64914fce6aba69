"""The note's "Where the time went" section of a design: mean seconds per phase of each arm's starts
(launch, launch → ready, warm-up, replay, scrape, stop, and the time between starts), the design's
wall time and the share spent starting and stopping engines, the cache policy that ran and the
prefetch of the next start's files. From the analysis's :class:`~frankenstein.design.timespent.TimeSummary`
(stored phases only); nothing where no start recorded phases.

    format_time_spent(d) -> list[str]
    table(summary) -> (header, rows, align)   the per-arm table: mean seconds per phase
    sentences(summary) -> list[str]           the lines under it: wall time, engine share, caches, prefetch
    time_lines(summary) -> list[str]          what ``frank analyze`` prints after the verdict
"""

from __future__ import annotations

from frankenstein.design.phases import ordered
from frankenstein.design.timespent import GAP_LIMIT_S, TimeSummary, duration
from frankenstein.report.collect import DesignReport
from frankenstein.report.markdown import md_table


def format_time_spent(d: DesignReport) -> list[str]:
    summary = d.analysis.time_spent if d.analysis is not None else None
    if summary is None or not summary.starts:
        return []
    header, rows, align = table(summary)
    lines = ["", "### Where the time went", "", "Mean seconds per start, per arm.", "", *md_table(header, rows, align)]
    return lines + ["", *(f"- {s[0].upper()}{s[1:]}." for s in sentences(summary))]


PHASE_WORDS = {
    "caches": "cache folders",
    "launch": "launch",
    "ready": "launch → ready",
    "warmup": "warm-up",
    "replay": "replay",
    "prepare": "prepare (tokenize)",
    "force": "forced decode",
    "tasks": "agent tasks",
    "command": "command",
    "scrape": "scrape",
    "stop": "stop",
    "other": "other",
    "write": "write",
}


def table(summary: TimeSummary) -> tuple[list[str], list[list[str]], str]:
    """(header, rows, align) of the per-arm table: mean seconds per phase, phases no start had left out."""
    names = ordered({k for a in summary.arms for k, v in a.mean.items() if k != "write" and v > 0.0005})
    if any("write" in a.mean for a in summary.arms):
        names.append("write")
    header = ["arm", "starts", *(PHASE_WORDS.get(n, n) for n in names), "total"]
    rows = [
        [a.arm, str(a.starts), *(f"{a.mean[n]:.2f}" if n in a.mean else "-" for n in names), f"{a.total_s:.2f}"]
        for a in summary.arms
    ]
    return header, rows, "lr" + "r" * (len(names) + 1)


def sentences(summary: TimeSummary) -> list[str]:
    """The lines under the table: the wall time and its share of engine starts, caches, prefetch."""
    out = []
    if summary.starts:
        share = summary.engine_share
        out.append(
            f"{summary.starts} starts took {duration(summary.wall_s)} in all "
            f"({duration(summary.starts_s)} in the starts, {duration(summary.between_s)} between them)"
            + (f", {share:.0%} of it starting and stopping engines (launch, ready, stop)" if share is not None else "")
        )
    if summary.without:
        out.append(f"{summary.without} start(s) were recorded without phases (before they were recorded)")
    if summary.resumed_gaps:
        out.append(f"{summary.resumed_gaps} gap(s) longer than {GAP_LIMIT_S:.0f} s (a stopped run resumed) not counted")
    policy = (
        "warm (each arm's own cache folders, kept across its starts)"
        if summary.cache == "warm"
        else "cold (an empty cache folder for every start)"
    )
    cache = f"engine caches: {policy}"
    if summary.cache_recorded:
        cache += f"; {summary.cache_empty} of {summary.cache_recorded} starts began with an empty campaign folder"
    if summary.cache_outside:
        named = ", ".join(f"{var} ({n} start(s))" for var, n in sorted(summary.cache_outside.items()))
        cache += f"; left to the recipe's own env, outside the campaign (shared by the arms, not emptied under cold): {named}"
    out.append(cache)
    if summary.page_cache:
        full = sum(1 for x in summary.page_cache if x >= 0.999)
        low = min(summary.page_cache)
        out.append(
            f"model files in the page cache when the start launched: all of them for {full} of "
            f"{len(summary.page_cache)} starts" + (f" (lowest {low:.0%})" if full < len(summary.page_cache) else "")
        )
    p = summary.prefetch
    if p.get("starts") or p.get("skipped"):
        line = "prefetch of the next start's files: " + (
            f"{p['starts']} start(s) read {p['bytes'] / 2**20:.1f} MiB in {p['seconds']:.2f} s"
            if p["starts"]
            else "none read"
        )
        if p.get("stopped"):
            line += f" ({p['stopped']} stopped when their start ended)"
        if p.get("skipped"):
            line += "; skipped: " + "; ".join(f"{why} ({n})" for why, n in sorted(p["skipped"].items()))
        out.append(line)
    return out


def time_lines(summary: TimeSummary | None) -> list[str]:
    """What ``frank analyze`` prints after the verdict: the per-arm table and its sentences."""
    if summary is None or not summary.starts:
        return []  # starts recorded before phases were: nothing to say
    lines = ["", "where the time went (mean seconds per start, per arm):"]
    header, body, align = table(summary)
    widths = [max(len(c) for c in col) for col in zip(header, *body)]
    for cells in [header, *body]:
        lines.append("  " + "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)))
    lines += [f"  {s}" for s in sentences(summary)]
    return lines
