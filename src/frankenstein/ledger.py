"""The served-recipe ledger: adopt and revert, one step at a time, each pointing at its verdict.

The served recipe is the base recipe named by ``served`` in ``frank.toml`` plus the parts the ledger
lists; each ledger row stores the whole parts list after its step, so the served recipe is the last
row's list and a revert restores exactly the list before the step it undoes.

``adopt`` lets a part in only on the evidence of a registered design. Some refusals are about the
request and can never be forced (an unknown part, one already served, a design that did not test
served + this part); the others are about the evidence (the verdict, blocks not run, a changed served
recipe, a gate that failed or could not be checked) and ``force=True`` with a reason overrides them:
the row is then marked forced and keeps the refusals it overrode. Refusals about evidence are kept in
the store for the progress note.

    history(campaign) -> list[LedgerEntry]
    served_parts / served_recipe / describe_parts  re-exported from :mod:`frankenstein.served` (the registry reads them there)
    adopt(campaign, part, design_id, *, force=False, why=None, scope=None) -> LedgerEntry   (scope: adopt --scope)
    revert(campaign, *, why=None, force=False) -> LedgerEntry
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.design import serving
from frankenstein.design.analysis import Analysis, analyze_evidence
from frankenstein.design.facts import DesignFacts, design_facts
from frankenstein.design.kinds import kind_of
from frankenstein.design.kinds.base import Evidence as DesignEvidence
from frankenstein.design.model import Registered
from frankenstein.design.registry import get, verified
from frankenstein.errors import FrankError, LedgerError
from frankenstein.gates import fidelity_gate, memory_design_gate, memory_gate_of
from frankenstein.part_status import part_statuses, status_lines
from frankenstein.scope import KEY as SCOPE_KEY
from frankenstein.scope import AdoptedScope, adopted_for, scope_words, with_design_concurrency
from frankenstein.served import describe_parts, served_parts, served_recipe
from frankenstein.store import LedgerEntry

__all__ = [
    "Evidence",
    "LedgerEntry",
    "adopt",
    "describe_parts",
    "format_served",
    "history",
    "revert",
    "served_parts",
    "served_recipe",
]


def history(campaign: Campaign) -> list[LedgerEntry]:
    """Every step, oldest first."""
    return campaign.store.ledger_steps()


# ---------------------------------------------------------------- adopt


@dataclass
class Evidence:
    """What adopt found: refusals that force may override, and the scope to record."""

    problems: list[str] = field(default_factory=list)
    scope: dict[str, Any] = field(default_factory=dict)


def adopt(
    campaign: Campaign,
    part: str,
    design_id: str,
    *,
    force: bool = False,
    why: str | None = None,
    scope: AdoptedScope | None = None,
) -> LedgerEntry:
    """Add ``part`` to the served recipe on the evidence of ``design_id``; one step, recorded with its scope
    (and, with ``scope``, what it is adopted for: :mod:`frankenstein.scope`)."""
    if force and not (why or "").strip():
        raise LedgerError("--force needs --why TEXT: a forced adoption is recorded with its reason")
    verified(
        campaign, "adopt", force=force, why=why
    )  # first: a forced adopt also overrides a failed verification, recorded
    last = campaign.store.last_steps(1)
    before = last[0] if last else None
    current = list(before.parts) if before else []
    _check_request(campaign, part, current)
    reg = _registered(campaign, design_id)
    _check_design_shape(reg, part)
    ev = gather_evidence(campaign, reg, part, current)
    if ev.problems and not force:
        reason = "; ".join(ev.problems)
        campaign.store.insert_refusal(what="adopt", name=design_id, part=part, reason=reason)
        raise LedgerError(f"refused: adopt {part!r} on design {design_id}: {reason}")
    if force:
        ev.scope["overridden"] = list(ev.problems)
    with_adopted_scope(ev.scope, with_design_concurrency(scope or AdoptedScope(), reg.design.replay.concurrency))
    ev.scope[serving.KEY] = serving.freeze(reg, campaign.config.served)
    return _append(
        campaign,
        before,
        action="adopt",
        part=part,
        design_id=design_id,
        scope=ev.scope,
        forced=force,
        why=why,
        parts=[*current, part],
    )


def _check_request(campaign: Campaign, part: str, current: list[str]) -> None:
    if part not in campaign.config.parts:
        known = ", ".join(sorted(campaign.config.parts)) or "none"
        raise LedgerError(f"PART: unknown part {part!r} (parts in frank.toml: {known})")
    base_parts = (
        campaign.config.recipes[campaign.config.served].parts
        if campaign.config.served in campaign.config.recipes
        else []
    )
    if part in current or part in base_parts:
        raise LedgerError(f"part {part!r} is already served ({describe_parts(campaign, current)})")


def _registered(campaign: Campaign, design_id: str) -> Registered:
    try:
        return get(campaign, design_id)
    except FrankError as exc:
        raise LedgerError(f"cannot adopt on design {design_id}: {exc}") from exc


def _check_design_shape(reg: Registered, part: str) -> None:
    """Refusals no force overrides: the design must be a comparison of served with served + this part."""
    did, kind = reg.design_id, reg.design.kind
    if not kind_of(kind).adoptable:
        raise LedgerError(
            f"design {did} is a {kind} design; a part is adopted on a speed design "
            "(fidelity and memory are its gates, an agent design guards against harm)"
        )
    if reg.design.family:
        raise LedgerError(
            f"design {did} screens a family of candidates ({', '.join(reg.design.candidates)}); a part is adopted "
            "on a design of the chosen candidate against served"
        )
    served, cand = reg.frozen.recipes["served"], reg.frozen.recipes["candidate"]
    if served is None or cand is None:
        raise LedgerError(f"design {did} compares command arms, not recipes; there is no part to adopt")
    extra = cand.parts[len(served.parts) :] if cand.parts[: len(served.parts)] == served.parts else None
    if extra != [part]:
        tested = "+ " + " + ".join(extra) if extra else f"parts {cand.parts} against {served.parts}"
        raise LedgerError(f"design {did} did not test served + {part}: its candidate arm is served {tested}")


def gather_evidence(campaign: Campaign, reg: Registered, part: str, current: list[str]) -> Evidence:
    """Every refusal about the evidence (force may override them) and the scope the result holds in."""
    ev = Evidence()
    starts = DesignEvidence.read(campaign, reg)  # the design's starts, read once for its facts and its analysis
    facts = design_facts(campaign, starts)
    if facts.blocks_run < facts.blocks:
        how = facts.stopped or "incomplete"
        ev.problems.append(
            f"{facts.blocks_run} of {facts.blocks} blocks were run ({how}); adopt needs every registered block"
        )
    a = analyze_evidence(campaign, starts)
    if a.word != "confirmed":
        reason = a.reason
        ev.problems.append(f"its verdict is {a.word!r}, not 'confirmed'" + (f" ({reason})" if reason else ""))
    ev.problems += veto_problems(a)
    ev.problems += _recipe_problems(campaign, reg, part, current)
    fid_ok, fid_text = fidelity_gate(campaign, reg, part)
    mem_ok, mem_text = memory_gate_of(reg, facts.resources)
    ev.problems += [t for ok, t in ((fid_ok, fid_text), (mem_ok, mem_text)) if ok is not True and t]
    ev.problems += cited_gate_problems(campaign, reg, part, ev)
    ev.scope = {**_scope(reg, facts, a, fid_text, mem_text), **ev.scope}
    return ev


def cited_gate_problems(campaign: Campaign, reg: Registered, part: str, ev: Evidence) -> list[str]:
    """Gates that cite another registered design beside fidelity (a memory design); their sentences go
    into the scope."""
    ok, text = memory_design_gate(campaign, reg, part)
    if text:
        ev.scope["memory_design_gate"] = text
    return [] if ok else [text]


def veto_problems(a: Analysis) -> list[str]:
    """A refusal per registered veto that failed or could not be checked, naming it."""
    return [f"its {v.sentence()}" for v in a.failed_vetoes]


def _recipe_problems(campaign: Campaign, reg: Registered, part: str, current: list[str]) -> list[str]:
    """The served recipe then must be the served recipe now, and frank.toml must still define both arms the same."""
    did = reg.design_id
    then = reg.frozen.recipes["served"]
    assert then is not None  # _check_design_shape refused command arms
    now = campaign.recipe(campaign.config.served, current)
    if then.parts != now.parts:
        return [
            f"it was registered when the served recipe was {' + '.join([campaign.config.served, *then.parts])}, "
            f"and it is now {describe_parts(campaign, current)}: register the design again"
        ]
    cand_now = campaign.recipe(campaign.config.served, [*current, part])
    for arm, frozen, fresh in (("served", then, now), ("candidate", reg.frozen.recipes["candidate"], cand_now)):
        changed = frozen.launch_differences(fresh) if frozen is not None else ["command"]
        if changed:
            return [
                f"frank.toml changed since {did} was registered: its {arm} arm's {', '.join(changed)} "
                "differ from what the recipe resolves to now"
            ]
    return []


def _scope(reg: Registered, facts: DesignFacts, a: Analysis, fid_text: str, mem_text: str) -> dict[str, Any]:
    """Where the result holds: the conditions it was tested under, and the numbers it rests on."""
    v = a.verdict
    return {
        "design_id": reg.design_id,
        "kind": reg.design.kind,
        "design_hash": reg.design_hash,
        "concurrency": facts.concurrency,
        "workload_path": facts.workload_path,
        "workload_hash": facts.workload_hash,
        "engine": ", ".join(facts.engines) or None,
        "engine_version": ", ".join(facts.engine_versions) or None,
        "metric": reg.design.primary_metric,
        "verdict": a.word,
        "p": None if v is None or v.p is None else str(v.p),
        "p_bound": None if v is None or v.p_bound == "exact" else v.p_bound,  # curtailed: p over the completions
        "geomean_ratio": None if v is None else v.geomean_ratio,
        "blocks": None if v is None else v.n_blocks,
        "in_favour": None if v is None else v.in_favour,
        "fidelity_gate": fid_text or None,
        "memory_gate": mem_text or None,
        **({"vetoes": [v.sentence() for v in a.vetoes]} if a.vetoes else {}),
    }


def with_adopted_scope(scope: dict[str, Any], adopted: AdoptedScope | None) -> None:
    """Keep what the part is adopted for (``adopt --scope``) in the step's scope; nothing when none given."""
    if adopted is not None and adopted.recorded():
        scope[SCOPE_KEY] = adopted.recorded()


def _append(campaign: Campaign, before: LedgerEntry | None, **row: Any) -> LedgerEntry:
    """Write one step, refusing if another step was written since ``before`` was read."""
    step = LedgerEntry(
        seq=0,
        at="",
        action=row["action"],
        part=row["part"],
        design_id=row["design_id"],
        scope=row["scope"],
        forced=bool(row["forced"]),
        why=row["why"],
        parts=list(row["parts"]),
    )

    def build(last: LedgerEntry | None) -> LedgerEntry:
        if (last.seq if last else None) != (before.seq if before else None):
            raise LedgerError(
                "the ledger changed while this step was being checked (another adopt or revert?); run it again"
            )
        return step

    return campaign.store.append_ledger(build)


# ---------------------------------------------------------------- revert


def revert(campaign: Campaign, *, why: str | None = None, force: bool = False) -> LedgerEntry:
    """Undo exactly the last step: the served parts become exactly what they were before it.

    Reverting an adopt removes that part; reverting a revert re-applies what it undid. A campaign that fails
    verification is refused (the steps it would undo may not be the ones written) unless ``force`` with ``why``."""
    verified(campaign, "revert", force=force, why=why)
    steps = campaign.store.last_steps(2)
    if not steps:
        raise LedgerError(f"nothing to revert: the ledger is empty (served: {describe_parts(campaign, [])})")
    last = steps[0]
    previous = steps[1].parts if len(steps) > 1 else []
    scope = {"undoes": last.seq, "undoes_action": last.action, "parts_before": last.parts}
    scope.update(_restored_recipe(steps[1] if len(steps) > 1 else None))
    return _append(
        campaign,
        last,
        action="revert",
        part=last.part,
        design_id=last.design_id,
        scope=scope,
        forced=False,
        why=why,
        parts=list(previous),
    )


def _restored_recipe(previous: LedgerEntry | None) -> dict[str, Any]:
    """A revert serves again the recipe the step before the undone one froze (nothing frozen: none)."""
    frozen = serving.frozen_of(previous) if previous is not None and previous.parts else None
    return {serving.KEY: frozen} if frozen is not None else {}


# ---------------------------------------------------------------- formatting


def format_step(e: LedgerEntry) -> str:
    """One line per step: seq, time, action, part, design, forced, and the parts after it."""
    what = f"{e.action} {e.part}"
    if e.action == "revert":
        what += f" (undoes step {e.scope.get('undoes')}: {e.scope.get('undoes_action')})"
    design = f"  design {e.design_id}" if e.design_id else ""
    if e.scope.get("designs"):
        design = f"  designs {', '.join(e.scope['designs'])}"
    forced = f"  FORCED: {e.why}" if e.forced else (f"  why: {e.why}" if e.why else "")
    return f"{e.seq:>3}  {e.at}  {what}{design}{forced}  → [{', '.join(e.parts)}]"


def format_scope(scope: dict[str, Any]) -> str:
    keys = ("concurrency", "workload_hash", "engine_version", "kind", "verdict", "p")
    cells = [
        f"{k}={str(scope[k])[:12] if k == 'workload_hash' else scope[k]}" for k in keys if scope.get(k) is not None
    ]
    return "scope: " + ", ".join(cells) if cells else ""


def format_served(campaign: Campaign) -> list[str]:
    """``frank served``: the served recipe (frozen by the last step, or resolved now), its pins, what disagrees
    with it, then its history."""
    lines = serving.served_lines(serving.served_now(campaign))
    steps = history(campaign)
    lines += ["", "history:" if steps else "history: no steps yet (the served recipe is the base recipe)"]
    for e in steps:
        lines.append("  " + format_step(e))
        if e.action == "adopt" and format_scope(e.scope):
            lines.append("       " + format_scope(e.scope))
        if scope_words(adopted_for(e)):
            lines.append("       adopted for: " + scope_words(adopted_for(e)))
    return [*lines, "", *status_lines(part_statuses(campaign))]
