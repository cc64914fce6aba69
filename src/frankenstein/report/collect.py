"""Everything a progress note says, read from the campaign in one place, so rendering stays pure.

A design's analysis is made under its registered rule (``design.analysis.analyze``); where the analysis
fails (a tampered artifact, a changed workload), the note says so instead of failing whole. The campaign is
verified once more as the note is written (``NoteData.verification``: the first broken record, or None), and
every recorded ``--force --why`` override of a failed verification is collected, whatever ``since`` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from frankenstein.campaign import Campaign
from frankenstein.config import NoteHeader, Provenance
from frankenstein.design.analysis import Analysis, analyze_evidence
from frankenstein.design.kinds.base import Evidence
from frankenstein.design.facts import DesignFacts, design_facts
from frankenstein.design.kinds import Description, kind_of
from frankenstein.design.model import Registered
from frankenstein.design.percentiles import Percentiles, arm_percentiles
from frankenstein.design.registry import get, verify
from frankenstein.design.serving import Served, served_now
from frankenstein.errors import ConfigError, FrankError, RegistryError
from frankenstein.part_status import PartStatus, part_statuses
from frankenstein.served import served_parts
from frankenstein.store import EpisodeRow, LedgerEntry, Override, Refusal


@dataclass
class DesignReport:
    reg: Registered
    facts: DesignFacts
    part: str  # what the candidate adds to the served arm, e.g. "draft", or "command arms"
    block_status: dict[int, str]  # complete | dropped | partial | not run
    description: Description
    analysis: Analysis | None = None
    error: str | None = None
    episodes: list[EpisodeRow] = field(default_factory=list)
    percentiles: Percentiles = field(default_factory=dict)  # per arm latency p50/p90/p99 (reported, not tested)

    @property
    def design_id(self) -> str:
        return self.reg.design_id

    @property
    def word(self) -> str:
        return self.analysis.word if self.analysis is not None else "unavailable"

    @property
    def says(self) -> str:
        """The verdict word as printed, the same in the summary, the section and note.json: a harm rule
        that did not fire says 'no harm shown' (``Rule.phrase``), not 'not confirmed'."""
        a = self.analysis
        if a is None or a.verdict is None:
            return self.word
        return a.verdict.rule.phrase(a.word)  # type: ignore[arg-type]  # Analysis.word is a plain str


@dataclass(frozen=True)
class Credit:
    part: str
    fork: str
    commit: str
    author: str
    licence: str
    step: int | None  # the ledger step that adopted it; None for a part of the base recipe
    credit: str = ""  # what the credit is for, in words (provenance.credit)


@dataclass(frozen=True)
class PieceCredit:
    """A credited piece other than a part: the served base recipe, a model, an engine, a weight format."""

    kind: str  # recipe | model | engine | format
    name: str
    provenance: Provenance


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
    overrides: list[Override] = field(default_factory=list)  # every one, oldest first (not only since)
    verification: str | None = None  # the first broken record when the note was written; None: verified
    pieces: list[PieceCredit] = field(default_factory=list)  # the base recipe, models, engines, formats
    header: NoteHeader = field(default_factory=NoteHeader)  # frank.toml's [note], printed as given
    served_recipe: Served | None = None  # the recipe `frank serve` launches (frozen by adopt), with its pins
    parts: list[PartStatus] = field(default_factory=list)  # every part of frank.toml with its status now


def collect(campaign: Campaign, since: str | None = None) -> NoteData:
    """Designs registered, ledger steps and refusals at or after ``since`` (an ISO date or timestamp)."""
    lower = since or ""
    try:
        verify(campaign)
        problem = None
    except RegistryError as exc:  # the note is written only under --force --why then; it says so at the top
        problem = str(exc)
    designs = [design_report(campaign, get(campaign, did)) for did in campaign.store.design_ids(lower)]
    steps = [e for e in campaign.store.ledger_steps() if e.at >= lower]
    return NoteData(
        campaign=campaign.config.name,
        base=campaign.config.served,
        served=served_parts(campaign),
        since=since,
        designs=designs,
        steps=steps,
        refusals=campaign.store.refusals(since),
        credits=credits(campaign),
        overrides=campaign.store.overrides(),
        verification=problem,
        pieces=piece_credits(campaign),
        header=campaign.config.note,
        served_recipe=_served(campaign),
        parts=part_statuses(campaign),
    )


def piece_credits(campaign: Campaign) -> list[PieceCredit]:
    """The served base recipe's provenance, then every model, engine and format ``frank.toml`` credits."""
    cfg = campaign.config
    out = [PieceCredit("recipe", cfg.served, cfg.recipes[cfg.served].provenance)] if cfg.served in cfg.recipes else []
    for kind, table in (("model", cfg.models), ("engine", cfg.engines), ("format", cfg.formats)):
        out += [PieceCredit(kind, name, prov) for name, prov in table.items()]
    return out


def _served(campaign: Campaign) -> Served | None:
    """The served recipe as ``frank serve`` would launch it, or None where frank.toml no longer resolves it."""
    try:
        return served_now(campaign)
    except ConfigError:
        return None


def design_report(campaign: Campaign, reg: Registered) -> DesignReport:
    """What the note says about one design; its starts read from the store once (:class:`Evidence`)."""
    ev = Evidence.read(campaign, reg)
    rep = DesignReport(
        reg=reg,
        facts=design_facts(campaign, ev),
        part=tested_part(reg),
        block_status=block_status(ev),
        description=kind_of(reg.design.kind).describe(reg),
        episodes=campaign.store.episodes_of(reg.design_id),
        percentiles=arm_percentiles(campaign.store, ev.starts),
    )
    try:
        rep.analysis = analyze_evidence(campaign, ev)
    except FrankError as exc:
        rep.error = f"analysis failed: {exc}"
    return rep


def tested_part(reg: Registered) -> str:
    """The parts the candidate arm adds to the served arm, as frozen at registration."""
    if reg.design.family:
        return f"a family of {len(reg.design.candidates)} candidates ({', '.join(reg.design.candidates)})"
    s, c = reg.frozen.recipes["served"], reg.frozen.recipes["candidate"]
    if s is None or c is None:
        return "command arms"
    if c.parts[: len(s.parts)] == s.parts and len(c.parts) > len(s.parts):
        return " + ".join(c.parts[len(s.parts) :])
    if c.parts == s.parts:
        return "no part (same parts in both arms)"
    return f"[{', '.join(c.parts)}] against [{', '.join(s.parts)}]"


def block_status(ev: Evidence) -> dict[int, str]:
    """Per registered block (0-based): complete, failed (a start failed or was invalid), partial, or not run."""
    reg = ev.reg
    status = {(r.block, r.position): r.status for r in ev.starts}
    per_block: dict[int, list[str | None]] = {}
    for s in reg.slots():
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


def credits(campaign: Campaign) -> list[Credit]:
    """Provenance of every part in the served recipe now: the base recipe's own, then the adopted ones."""
    cfg = campaign.config
    base_parts = cfg.recipes[cfg.served].parts if cfg.served in cfg.recipes else []
    adopted_at: dict[str, int] = {}
    before: list[str] = []
    for e in campaign.store.ledger_steps():
        for p in e.parts:
            if p not in before:
                adopted_at[p] = e.seq  # the step that last put it in
        before = e.parts
    out = []
    for name, step in [*((p, None) for p in base_parts), *((p, adopted_at.get(p)) for p in served_parts(campaign))]:
        prov = cfg.parts[name].provenance if name in cfg.parts else None
        out.append(
            Credit(
                part=name,
                fork=prov.fork if prov else "",
                commit=prov.commit if prov else "",
                author=prov.author if prov else "",
                licence=prov.licence if prov else "",
                step=step,
                credit=prov.credit if prov else "",
            )
        )
    return out
