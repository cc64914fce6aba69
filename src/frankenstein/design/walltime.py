"""``frank plan --timing-from DESIGN``: the wall time of the planned design, from the phases an
earlier design (a pilot, or any design of the same arms) recorded in a campaign.

    estimate_lines(campaign_dir, design_id, plan, blocks=None) -> list[str]
"""

from __future__ import annotations

from pathlib import Path

from frankenstein.campaign import open_campaign
from frankenstein.design.timespent import summarize
from frankenstein.design.plan import Plan, wall_time_lines
from frankenstein.errors import AnalysisError


def estimate_lines(campaign_dir: Path, design_id: str, plan: Plan, blocks: int | None = None) -> list[str]:
    if blocks is not None and not 1 <= blocks <= 1000:
        raise AnalysisError(f"--blocks must be 1..1000, got {blocks}")
    with open_campaign(campaign_dir) as c:
        ids = c.store.design_ids()
        if design_id not in ids:
            raise AnalysisError(
                f"--timing-from: no design {design_id} in campaign {campaign_dir} "
                f"(registered: {', '.join(ids) or 'none'})"
            )
        summary = summarize(c.store.starts_of(design_id))
    if not summary.starts:
        raise AnalysisError(
            f"--timing-from: design {design_id} has no start with recorded phases to estimate wall time from"
        )
    return wall_time_lines(plan, summary, f"design {design_id}", blocks=blocks)
