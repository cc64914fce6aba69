"""Refusals kept for the progress note: designs refused at registration and adoptions refused by the ledger.

A refused registration leaves no row in the registry (nothing was registered), yet "what didn't work" must
show it, so the refusal itself is stored here with its reason. Bad command-line input (an unknown part, a
typo in a design id) is not kept: only refusals about evidence and designs.

    record_refusal(campaign, what=..., name=..., reason=...)   append one row
    record_registration_refusal(campaign, path, exc)          the registry's error path calls this
    register_or_record(campaign, path)                        registry.register, recording a refusal
    refusals(campaign, since=None)                             rows, oldest first
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from frankenstein.campaign import Campaign
from frankenstein.errors import DesignError
from frankenstein.store import now_iso

if TYPE_CHECKING:
    from frankenstein.design.registry import Registered

What = Literal["registration", "adopt"]


@dataclass(frozen=True)
class Refusal:
    seq: int
    what: What
    name: str
    part: str | None
    path: str | None
    reason: str
    at: str


def record_refusal(campaign: Campaign, *, what: What, name: str, reason: str, part: str | None = None,
                   path: str | None = None) -> int:
    """Append one refusal in its own transaction; returns its seq."""
    with campaign.store.transaction() as c:
        cur = c.execute("INSERT INTO refusals (what, name, part, path, reason, at) VALUES (?,?,?,?,?,?)",
                        (what, name, part, path, reason, now_iso()))
    return int(cur.lastrowid or 0)


def _design_name(path: Path) -> str:
    """The design's ``name`` if the file still parses that far, else the file's stem."""
    try:
        name = tomllib.loads(path.read_text()).get("name")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        name = None
    return name if isinstance(name, str) and name else path.stem


def record_registration_refusal(campaign: Campaign, path: str | Path, exc: Exception) -> int:
    """Keep a refused registration: the design's name, its file, and the refusal message."""
    path = Path(path)
    return record_refusal(campaign, what="registration", name=_design_name(path), reason=str(exc), path=str(path))


def register_or_record(campaign: Campaign, path: str | Path) -> Registered:
    """``registry.register``, recording the refusal before re-raising it when the design is refused."""
    from frankenstein.design.registry import register

    try:
        return register(campaign, path)
    except DesignError as exc:
        record_registration_refusal(campaign, path, exc)
        raise


def refusals(campaign: Campaign, since: str | None = None) -> list[Refusal]:
    """Stored refusals, oldest first; ``since`` is an ISO date or timestamp prefix (inclusive)."""
    rows = campaign.store.query("SELECT * FROM refusals WHERE at >= ? ORDER BY seq", (since or "",))
    return [Refusal(r["seq"], r["what"], r["name"], r["part"], r["path"], r["reason"], r["at"]) for r in rows]
