"""Part status in the ledger: park, stop and unpark, each one chained ledger step with its reason and the
designs it rests on; and every part's status now (served, parked, stopped, tested, never tested).

A part that was tried and is not served is not simply "never tested": the campaign note says "Parked"
(set aside, may come back) and "Stopped" (given up). Those decisions are ledger steps beside adopt and
revert, written through :meth:`Store.append_ledger` (so in the evidence chain), each with ``why`` and
``scope = {"status": ..., "designs": [...]}``. They never change what is served (each row keeps the parts
list as it was, and the served recipe the step before froze). ``frank revert`` undoes a status step like any other last step.

    park(campaign, part, why, designs) -> LedgerEntry
    stop(campaign, part, why, designs) -> LedgerEntry
    unpark(campaign, part, why, designs) -> LedgerEntry
    part_statuses(campaign) -> list[PartStatus]      every part of frank.toml, with its status and reason
    status_lines(statuses) -> list[str]               the block ``frank served`` prints
"""

from __future__ import annotations

from dataclasses import dataclass

from frankenstein.campaign import Campaign
from frankenstein.design import serving
from frankenstein.design.registry import get, verified
from frankenstein.errors import FrankError, LedgerError
from frankenstein.served import describe_parts
from frankenstein.store import LedgerEntry

STATUS_ACTIONS = {"park": "parked", "stop": "stopped", "unpark": "unparked"}
ORDER = ("served", "parked", "stopped", "tested", "never tested")


@dataclass(frozen=True)
class PartStatus:
    """One part's status now, and the step and reason behind it (None for served-by-base or untested parts)."""

    part: str
    status: str  # served | parked | stopped | tested | never tested
    why: str | None = None
    step: int | None = None
    designs: tuple[str, ...] = ()


def park(campaign: Campaign, part: str, why: str, designs: list[str]) -> LedgerEntry:
    """Set a part aside (it may come back): one ledger step with its reason and the designs it rests on."""
    return _status_step(campaign, "park", part, why, designs)


def stop(campaign: Campaign, part: str, why: str, designs: list[str]) -> LedgerEntry:
    """Give a part up: one ledger step with its reason and the designs it rests on."""
    return _status_step(campaign, "stop", part, why, designs)


def unpark(campaign: Campaign, part: str, why: str, designs: list[str]) -> LedgerEntry:
    """Take a parked or stopped part back into play: one ledger step with its reason."""
    return _status_step(campaign, "unpark", part, why, designs)


def _status_step(campaign: Campaign, action: str, part: str, why: str, designs: list[str]) -> LedgerEntry:
    if not (why or "").strip():
        raise LedgerError(f"{action} needs --why TEXT: the reason is recorded in the ledger")
    verified(campaign, action)
    _check_part(campaign, action, part)
    for design_id in designs:
        try:
            get(campaign, design_id)
        except FrankError as exc:
            raise LedgerError(f"--design {design_id}: {exc}") from exc
    last = campaign.store.last_steps(1)
    before = last[0] if last else None
    step = LedgerEntry(
        seq=0,
        at="",
        action=action,
        part=part,
        design_id=designs[0] if designs else None,
        scope={"status": STATUS_ACTIONS[action], "designs": list(designs), **_frozen(before)},
        forced=False,
        why=why.strip(),
        parts=list(before.parts) if before else [],
    )

    def build(now: LedgerEntry | None) -> LedgerEntry:
        if (now.seq if now else None) != (before.seq if before else None):
            raise LedgerError("the ledger changed while this step was being checked (another step?); run it again")
        return step

    return campaign.store.append_ledger(build)


def _frozen(before: LedgerEntry | None) -> dict[str, object]:
    """The served recipe the step before froze, carried forward: a status step changes what is served in no way."""
    frozen = serving.frozen_of(before)
    return {serving.KEY: frozen} if frozen is not None else {}


def _check_part(campaign: Campaign, action: str, part: str) -> None:
    """A known part, not served; unpark only a parked or stopped part."""
    if part not in campaign.config.parts:
        known = ", ".join(sorted(campaign.config.parts)) or "none"
        raise LedgerError(f"PART: unknown part {part!r} (parts in frank.toml: {known})")
    now = {s.part: s for s in part_statuses(campaign)}[part]
    if now.status == "served":
        last = campaign.store.last_steps(1)
        raise LedgerError(
            f"part {part!r} is served ({describe_parts(campaign, last[0].parts if last else [])}); a served part "
            f"is removed on evidence (revert, or a design whose candidate drops it), not {STATUS_ACTIONS[action]}"
        )
    if action == "unpark" and now.status not in ("parked", "stopped"):
        raise LedgerError(f"part {part!r} is {now.status}, not parked or stopped: nothing to unpark")


def part_statuses(campaign: Campaign) -> list[PartStatus]:
    """Every part of ``frank.toml``: served (base recipe or ledger), else its last status step in force
    (a revert undoes the step before it), else tested (a design's candidate added it), else never tested."""
    steps = campaign.store.ledger_steps()
    marks = _marks_in_force(steps)
    served = set(steps[-1].parts) if steps else set()
    recipes = campaign.config.recipes
    base = recipes[campaign.config.served].parts if campaign.config.served in recipes else []
    tested = _tested_parts(campaign)
    out = []
    for part in campaign.config.parts:
        mark = marks.get(part)
        if part in served or part in base:
            out.append(PartStatus(part, "served"))
        elif mark is not None and mark.action in ("park", "stop"):
            out.append(PartStatus(part, STATUS_ACTIONS[mark.action], mark.why, mark.seq, _designs(mark)))
        elif part in tested:
            out.append(PartStatus(part, "tested", None, None, tuple(tested[part])))
        else:
            out.append(PartStatus(part, "never tested"))
    return sorted(out, key=lambda s: (ORDER.index(s.status), s.part))


def _marks_in_force(steps: list[LedgerEntry]) -> dict[str, LedgerEntry]:
    """Per part, its last status step (park/stop/unpark) still in force: a revert puts back the marks as
    they were before the step it undoes (as it puts back the parts)."""
    history: list[dict[str, LedgerEntry]] = [{}]
    for e in steps:
        if e.action == "revert":
            history.append(history[-2] if len(history) > 1 else {})
        elif e.action in STATUS_ACTIONS:
            history.append({**history[-1], e.part: e})
        else:
            history.append(history[-1])
    return history[-1]


def _designs(e: LedgerEntry) -> tuple[str, ...]:
    return tuple(str(d) for d in e.scope.get("designs") or [])


def _tested_parts(campaign: Campaign) -> dict[str, list[str]]:
    """Part -> the registered designs whose candidate arm added it to the served arm's recipe."""
    out: dict[str, list[str]] = {}
    for row in campaign.store.registry_rows():
        try:
            reg = get(campaign, row.design_id)
        except FrankError:
            continue
        served, cand = reg.frozen.recipes.get("served"), reg.frozen.recipes.get("candidate")
        if served is None or cand is None or cand.parts[: len(served.parts)] != served.parts:
            continue
        for part in cand.parts[len(served.parts) :]:
            out.setdefault(part, []).append(reg.design_id)
    return out


def status_lines(statuses: list[PartStatus]) -> list[str]:
    """``frank served``'s parts block: one line per part, by status, with the reason and designs."""
    lines = ["parts:" if statuses else "parts: none in frank.toml"]
    for s in statuses:
        rests = f" (designs {', '.join(s.designs)})" if s.designs else ""
        why = f": {s.why}" if s.why else ""
        step = f" [step {s.step}]" if s.step is not None else ""
        lines.append(f"  {s.status:<12}  {s.part}{step}{why}{rests}")
    return lines
