"""The progress note (Markdown with PNG plots) and the refusals it reports.

write_report(campaign, out_dir, since=None) -> Path    the note's path
"""

from __future__ import annotations

from frankenstein.report.note import write_report

__all__ = ["write_report"]
