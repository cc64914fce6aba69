"""The note's "Where the time went" section of a design: mean seconds per phase of each arm's starts
(launch, launch → ready, warm-up, replay, scrape, stop, and the time between starts), the design's
wall time and the share spent starting and stopping engines, the cache policy that ran and the
prefetch of the next start's files. From the analysis's :class:`~frankenstein.design.phases.TimeSummary`
(stored phases only); nothing where no start recorded phases.

    format_time_spent(d) -> list[str]
"""

from __future__ import annotations

from frankenstein.design.phases import sentences, table
from frankenstein.report.collect import DesignReport
from frankenstein.report.markdown import md_table


def format_time_spent(d: DesignReport) -> list[str]:
    summary = d.analysis.time_spent if d.analysis is not None else None
    if summary is None or not summary.starts:
        return []
    header, rows, align = table(summary)
    lines = ["", "### Where the time went", "", "Mean seconds per start, per arm.", "", *md_table(header, rows, align)]
    return lines + ["", *(f"- {s[0].upper()}{s[1:]}." for s in sentences(summary))]
