"""Everything a progress note says, read from the campaign in one place, so rendering stays pure.

A design's analysis is made under its registered rule (``design.analysis.analyze``); where the kind's
analysis module is not installed or the analysis fails, the note says so instead of failing whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.design.registry import Registered, get
from frankenstein.errors import FrankError
from frankenstein.ledger import LedgerEntry, history, served_parts
from frankenstein.report.facts import DesignFacts, design_facts
from frankenstein.report.refusals import Refusal, refusals


@dataclass
class Episode:
    block: int
    arm: str
    task_id: str
    draw: int
    passed: bool
    status: str


@dataclass
class DesignReport:
    reg: Registered
    facts: DesignFacts
    part: str  # what the candidate adds to the served arm, e.g. "draft", or "command arms"
    block_status: dict[int, str]  # complete | dropped | partial | not run
    analysis: Any | None = None  # frankenstein.design.analysis.Analysis
    error: str | None = None
    episodes: list[Episode] = field(default_factory=list)
    fidelity: dict[str, Any] | None = None  # per-position KL of the candidate and of the noise floor

    @property
    def design_id(self) -> str:
        return self.reg.design_id

    @property
    def word(self) -> str:
        return self.analysis.word if self.analysis is not None else "unavailable"


@dataclass(frozen=True)
class Credit:
    part: str
    fork: str
    commit: str
    author: str
    licence: str
    step: int | None  # the ledger step that adopted it; None for a part of the base recipe


@dataclass
class NoteData:
    campaign: str
    base: str
    served: list[str]
    since: str | None
    designs: list[DesignReport]
    steps: list[LedgerEntry]
    refusals: list[Refusal]
    credits: list[Credit]


def collect(campaign: Campaign, since: str | None = None) -> NoteData:
    """Designs registered, ledger steps and refusals at or after ``since`` (an ISO date or timestamp)."""
    lower = since or ""
    rows = campaign.store.query("SELECT design_id FROM registry WHERE registered_at >= ? ORDER BY seq", (lower,))
    designs = [design_report(campaign, get(campaign, r["design_id"])) for r in rows]
    steps = [e for e in history(campaign) if e.at >= lower]
    return NoteData(campaign=campaign.config.name, base=campaign.config.served, served=served_parts(campaign),
                    since=since, designs=designs, steps=steps, refusals=refusals(campaign, since),
                    credits=credits(campaign))


def design_report(campaign: Campaign, reg: Registered) -> DesignReport:
    rep = DesignReport(reg=reg, facts=design_facts(campaign, reg), part=tested_part(reg),
                       block_status=block_status(campaign, reg))
    rep.analysis, rep.error = _analysis(campaign, reg.design_id)
    if reg.design.kind == "agent":
        rep.episodes = episodes(campaign, reg.design_id)
    if reg.design.kind == "fidelity":
        rep.fidelity = fidelity_series(campaign, reg)
    return rep


def _analysis(campaign: Campaign, design_id: str) -> tuple[Any | None, str | None]:
    from frankenstein.design.analysis import analyze

    try:
        return analyze(campaign, design_id), None
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("frankenstein."):
            raise
        return None, f"analysis unavailable: {exc.name} is not installed"
    except FrankError as exc:
        return None, f"analysis failed: {exc}"


def tested_part(reg: Registered) -> str:
    """The parts the candidate arm adds to the served arm, as frozen at registration."""
    s, c = reg.frozen.recipes["served"], reg.frozen.recipes["candidate"]
    if s is None or c is None:
        return "command arms"
    if c.parts[: len(s.parts)] == s.parts and len(c.parts) > len(s.parts):
        return " + ".join(c.parts[len(s.parts):])
    if c.parts == s.parts:
        return "no part (same parts in both arms)"
    return f"[{', '.join(c.parts)}] against [{', '.join(s.parts)}]"


def block_status(campaign: Campaign, reg: Registered) -> dict[int, str]:
    """Per registered block (0-based): complete, failed (a start failed or was invalid), partial, or not run."""
    from frankenstein.design.runner import slots

    rows = campaign.store.query("SELECT block, position, status FROM starts WHERE design_id = ?", (reg.design_id,))
    status = {(r["block"], r["position"]): r["status"] for r in rows}
    per_block: dict[int, list[str | None]] = {}
    for s in slots(reg):
        per_block.setdefault(s.block, []).append(status.get((s.block, s.position)))
    out = {}
    for b, states in per_block.items():
        if all(st is None for st in states):
            out[b] = "not run"
        elif any(st is None for st in states):
            out[b] = "partial"
        else:
            out[b] = "complete" if all(st == "ok" for st in states) else "failed"
    return out


def episodes(campaign: Campaign, design_id: str) -> list[Episode]:
    rows = campaign.store.query(
        "SELECT s.block, s.arm, e.task_id, e.draw, e.passed, e.status FROM episodes e JOIN starts s ON e.start_id = s.id"
        " WHERE s.design_id = ? ORDER BY s.block, s.position, e.task_id, e.draw", (design_id,))
    return [Episode(r["block"], r["arm"], r["task_id"], r["draw"], bool(r["passed"]), r["status"]) for r in rows]


def fidelity_series(campaign: Campaign, reg: Registered) -> dict[str, Any] | None:
    """Per-position KL (pooled over pairs) of the candidate and of the noise floor, for the KL plot.

    Uses ``kind_fidelity.kl_series(campaign, reg)`` when the fidelity module provides it; otherwise
    pairs the stored top-k artifacts the way its analysis does (``_load``, ``make_pairs``, ``pool``).
    Returns None, and the note says no KL plot was made, when neither is available or readable."""
    try:
        from frankenstein.design import kind_fidelity as kf
        from frankenstein.fidelity.compare import pool
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("frankenstein."):
            raise
        return None
    rule = reg.design.rule
    try:
        if hasattr(kf, "kl_series"):
            data = kf.kl_series(campaign, reg)
            return dict(data) if data else None
        starts, failures = kf._load(campaign, reg)
        if reg.design.failure_policy == "drop_block":
            bad = {f["block"] for f in failures}
            starts = [s for s in starts if s.block not in bad]
        noise, cand = kf.make_pairs(starts)
    except (FrankError, AttributeError, KeyError, ValueError):
        return None
    if not cand:
        return None
    return {"candidate": [float(x) for x in pool(cand).kl], "noise": [float(x) for x in pool(noise).kl] if noise else None,
            "tolerance": getattr(rule, "tolerance", None), "threshold": getattr(rule, "threshold", None)}


def credits(campaign: Campaign) -> list[Credit]:
    """Provenance of every part in the served recipe now: the base recipe's own, then the adopted ones."""
    cfg = campaign.config
    base_parts = cfg.recipes[cfg.served].parts if cfg.served in cfg.recipes else []
    adopted_at: dict[str, int] = {}
    before: list[str] = []
    for e in history(campaign):
        for p in e.parts:
            if p not in before:
                adopted_at[p] = e.seq  # the step that last put it in
        before = e.parts
    out = []
    for name, step in [*((p, None) for p in base_parts), *((p, adopted_at.get(p)) for p in served_parts(campaign))]:
        prov = cfg.parts[name].provenance if name in cfg.parts else None
        out.append(Credit(part=name, fork=prov.fork if prov else "", commit=prov.commit if prov else "",
                          author=prov.author if prov else "", licence=prov.licence if prov else "", step=step))
    return out

