"""The gates a speed design can name, checked by the ledger before a part is adopted.

* fidelity: a registered fidelity design whose verdict is ``passed``, for the same part, against the same
  served recipe;
* memory: the largest increase of peak GPU memory (candidate − served, per GPU) within ``memory_mib``;
* memory design: a registered memory design (``gates.memory``) whose verdict is ``passed``, for the same
  part, against the same served recipe (its rule holds the limit: "at most +X MiB").

Each answer is ``(passed, sentence)``; ``passed`` is None when the gate could not be checked (absent is
not zero). Never raises for a missing or unfinished gate design.

    fidelity_gate_passed(campaign, design_id, candidate_parts=None) -> (bool, str)
    fidelity_gate(campaign, reg, part) -> (bool | None, str)
    memory_gate(resources, limit_mib) -> (bool | None, str)
    memory_design_gate(campaign, reg, part) -> (bool, str)
"""

from __future__ import annotations

from frankenstein.campaign import Campaign
from frankenstein.design import registry
from frankenstein.design.analysis import analyze_evidence
from frankenstein.design.facts import Resources
from frankenstein.design.kinds import kind_of
from frankenstein.design.kinds.base import Evidence
from frankenstein.design.model import Registered
from frankenstein.errors import FrankError


def fidelity_gate_passed(
    campaign: Campaign, design_id: str, *, candidate_parts: list[str] | None = None
) -> tuple[bool, str]:
    """Whether the fidelity design ``design_id`` has the verdict ``passed``.

    ``candidate_parts``, when given, must equal the parts the fidelity design's candidate added, so a
    gate cannot be satisfied by a fidelity test of another part."""
    ok, text, _ = fidelity_gate_read(campaign, design_id, candidate_parts=candidate_parts)
    return ok, text


def fidelity_gate_read(
    campaign: Campaign, design_id: str, *, candidate_parts: list[str] | None = None
) -> tuple[bool, str, Registered | None]:
    """:func:`fidelity_gate_passed`, also handing back the fidelity design it read (its starts read once)."""
    try:
        reg = registry.get(campaign, design_id)
    except FrankError as exc:
        return False, f"fidelity gate {design_id}: {exc}", None
    ok, text = _fidelity_verdict(campaign, reg, candidate_parts)
    return ok, text, reg


def _fidelity_verdict(campaign: Campaign, reg: Registered, candidate_parts: list[str] | None) -> tuple[bool, str]:
    design_id = reg.design_id
    if not kind_of(reg.design.kind).measures_fidelity:
        return False, f"fidelity gate {design_id}: a {reg.design.kind} design, not a fidelity design"
    if kind_of(reg.design.kind).same_arms:
        return False, f"fidelity gate {design_id}: an A/A fidelity design measures the noise floor and tested no part"
    tested = list(reg.design.arms["candidate"].parts)
    if candidate_parts is not None and list(candidate_parts) != tested:
        return False, (f"fidelity gate {design_id}: it tested parts {tested}, not {list(candidate_parts)}")
    try:
        a = analyze_evidence(campaign, Evidence.read(campaign, reg))
    except FrankError as exc:
        return False, f"fidelity gate {design_id}: {exc}"
    return a.word == "passed", f"fidelity gate {design_id}: {a.word} ({a.why or ''})"


def fidelity_gate(campaign: Campaign, reg: Registered, part: str) -> tuple[bool | None, str]:
    """The fidelity design ``reg`` names must have passed, for this part, against the same served recipe."""
    gate = reg.design.gates.fidelity
    if not gate:
        return True, ""
    ok, text, fid = fidelity_gate_read(campaign, gate, candidate_parts=[part])
    if not ok or fid is None:
        return False, text
    fid_served = fid.frozen.recipes["served"]
    served = reg.frozen.recipes["served"]
    if fid_served is None or served is None or fid_served.parts != served.parts:
        then = "a command" if fid_served is None else " + ".join([campaign.config.served, *fid_served.parts])
        now = "a command" if served is None else " + ".join([campaign.config.served, *served.parts])
        return (
            False,
            f"fidelity gate {gate} measured against served = {then}, but {reg.design_id} tested served = {now}",
        )
    return True, text


def memory_gate(res: Resources, limit_mib: float) -> tuple[bool | None, str]:
    """(passed, sentence); passed is None when the gate could not be checked (absent is not zero)."""
    if res.starts == 0:
        return None, "memory gate not checked: no ok starts"
    if res.absent and res.not_sampled:
        return None, f"memory gate not checked: GPU not sampled in {len(res.not_sampled)} of {res.starts} ok starts"
    if res.absent:
        return None, f"memory gate not checked: no GPU (resources absent in all {res.starts} ok starts)"
    if res.with_gpu < res.starts:
        return (
            None,
            f"memory gate not checked: {res.starts - res.with_gpu} of {res.starts} ok starts have no GPU figures",
        )
    inc = res.largest_increase()
    if inc is None:
        return None, "memory gate not checked: no GPU seen by both arms"
    gpu, mib = inc
    ok = mib <= limit_mib
    return ok, (
        f"memory gate {'passed' if ok else 'failed'}: the largest increase of peak GPU memory is "
        f"{mib:+.0f} MiB (GPU {gpu}), {'within' if ok else 'over'} the {limit_mib:g} MiB allowed"
    )


def memory_gate_of(reg: Registered, res: Resources) -> tuple[bool | None, str]:
    """The memory gate ``reg`` names, over its resources; passed when it names none."""
    limit = reg.design.gates.memory_mib
    if limit is None:
        return True, ""
    return memory_gate(res, limit)


def memory_design_gate(campaign: Campaign, reg: Registered, part: str) -> tuple[bool, str]:
    """The memory design ``reg`` cites (``gates.memory``) must have passed, for this part, against the same
    served recipe; passed when it cites none."""
    gate = reg.design.gates.memory
    if not gate:
        return True, ""
    try:
        mem = registry.get(campaign, gate)
        a = analyze_evidence(campaign, Evidence.read(campaign, mem))
    except FrankError as exc:
        return False, f"memory gate {gate}: {exc}"
    if not kind_of(mem.design.kind).measures_memory:
        return False, f"memory gate {gate}: a {mem.design.kind} design, not a memory design"
    problem = _same_comparison(campaign, mem, reg, part)
    if problem:
        return False, f"memory gate {gate}: {problem}"
    return a.word == "passed", f"memory gate {gate}: {a.word} ({a.why or ''})"


def _same_comparison(campaign: Campaign, gate: Registered, reg: Registered, part: str) -> str | None:
    """Why the gate design did not compare what ``reg`` compares (served + ``part`` against the same served
    recipe), or None."""
    served, cand = gate.frozen.recipes["served"], gate.frozen.recipes["candidate"]
    if served is None or cand is None:
        return "it compares command arms, not served + " + part
    if cand.parts != [*served.parts, part]:
        return f"it tested parts {cand.parts} against {served.parts}, not + {part}"
    now = reg.frozen.recipes["served"]
    if now is None or now.parts != served.parts:
        then = " + ".join([campaign.config.served, *served.parts])
        return f"it measured against served = {then}, but {reg.design_id} tested another served recipe"
    return None
