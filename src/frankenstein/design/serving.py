"""What is served is what was tested: the recipe ``adopt`` froze into its ledger step, and how frank.toml and
the pinned files disagree with it now.

``adopt`` freezes the candidate arm of the design it adopts on (the recipe as registration resolved it, with
the files registration pinned: engine binary and libraries, model, draft model) into the step's scope under
``served_recipe``; a revert freezes the recipe of the step it goes back to. ``frank serve`` launches that
frozen recipe and ``frank served`` shows it. Either one names every way the campaign now disagrees with it:
frank.toml resolving the served recipe differently (a part's args, the base model, ``served =``, the base
recipe's parts) or a pinned file whose sha256 changed.

A campaign whose last step was written before adopt froze recipes (or whose ledger is empty, or went back to no
parts) has nothing frozen: the served recipe is resolved from frank.toml as it reads now, and said so.

    freeze(reg, base) -> dict                       the ``served_recipe`` scope entry adopt stores
    served_now(campaign) -> Served                  the recipe to launch, where it comes from, what disagrees
    frozen_served / toml_differences                the same without the file checks (registration uses them)
    checked(campaign, command, force, why) -> Served  refuses a disagreement unless forced (then recorded)
    served_lines(served) -> list[str]               ``frank served`` and the note: the recipe with its pins
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field, replace
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.model import Registered
from frankenstein.design.pins import Pin, check_arm
from frankenstein.errors import ConfigError, LedgerError
from frankenstein.served import describe_parts, served_parts, served_recipe
from frankenstein.store import LedgerEntry

KEY = "served_recipe"  # the scope entry of a ledger step
ARM = "served"  # the arm name the frozen pins carry
BY = "adoption froze"


@dataclass(frozen=True)
class Served:
    """The recipe ``frank serve`` launches: frozen at ``step`` (None: resolved from frank.toml now, ``why``),
    with its pins and every way the campaign disagrees with it now (``problems``, empty when none)."""

    recipe: ResolvedRecipe
    base: str
    parts: list[str]
    step: int | None
    why: str
    pins: list[Pin] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def frozen(self) -> bool:
        return self.step is not None


def freeze(reg: Registered, base: str) -> dict[str, Any]:
    """The ``served_recipe`` entry of an adopt step: the candidate arm as registration froze it, with the files
    registration pinned for it (what every start of that arm ran, checked before each start)."""
    cand = reg.frozen.recipes["candidate"]
    assert cand is not None  # adopt refuses command arms before this
    pins = [{**p, "arm": ARM} for p in reg.frozen.files.get("candidate", [])]
    return {"design_id": reg.design_id, "base": base, "recipe": cand.model_dump(mode="json"), "pins": pins}


def frozen_of(step: LedgerEntry | None) -> dict[str, Any] | None:
    """The frozen recipe a step recorded, or None (no step, a step from before frozen recipes, no parts)."""
    found = step.scope.get(KEY) if step is not None else None
    return found if isinstance(found, dict) else None


def served_now(campaign: Campaign) -> Served:
    """The served recipe to launch: the last step's frozen recipe, checked against frank.toml and the pinned files."""
    served = frozen_served(campaign)
    return replace(served, problems=disagreements(campaign, served)) if served.frozen else served


def frozen_served(campaign: Campaign) -> Served:
    """The last step's frozen recipe (not yet checked), or the recipe resolved from frank.toml where none is frozen."""
    last = campaign.store.last_steps(1)
    step = last[0] if last else None
    entry = frozen_of(step)
    if step is None or entry is None:
        return _resolved_now(campaign, step)
    recipe = ResolvedRecipe.model_validate(entry["recipe"]).model_copy(update={"name": "served"})
    pins = [Pin.of(p) for p in entry.get("pins", [])]
    base = str(entry.get("base", campaign.config.served))
    design = entry.get("design_id")
    why = (
        f"frozen at ledger step {step.seq} (adopt {step.part} on design {design})"
        if step.action == "adopt"
        else f"frozen by the adopt on design {design}, served again since ledger step {step.seq} ({step.action} {step.part})"
    )
    return Served(recipe, base, list(step.parts), step.seq, why, pins)


def _resolved_now(campaign: Campaign, step: LedgerEntry | None) -> Served:
    if step is None:
        why = "resolved from frank.toml now: no ledger step yet, the base recipe"
    elif not step.parts:
        why = f"resolved from frank.toml now: ledger step {step.seq} went back to the base recipe"
    else:
        why = f"resolved from frank.toml now: ledger step {step.seq} was written before adopt froze the served recipe"
    return Served(served_recipe(campaign), campaign.config.served, served_parts(campaign), None, why)


def disagreements(campaign: Campaign, served: Served) -> list[str]:
    """Every way frank.toml and the files on this machine now disagree with the frozen recipe."""
    out = toml_differences(campaign, served)
    why = check_arm(served.pins, served.recipe, ARM, socket.gethostname(), BY)
    return [*out, why] if why else out


def toml_differences(campaign: Campaign, served: Served) -> list[str]:
    """Every way frank.toml now resolves the served recipe differently from the frozen one."""
    out = []
    if campaign.config.served != served.base:
        out.append(
            f"frank.toml: served = {campaign.config.served!r}, but the adopted recipe was frozen on {served.base!r}"
        )
    try:
        now = campaign.recipe(served.base, served.parts)
    except ConfigError as exc:
        out.append(f"frank.toml no longer resolves {describe_parts(campaign, served.parts)}: {exc}")
    else:
        out += _field_differences(served.recipe, now)
    return out


def _field_differences(frozen: ResolvedRecipe, now: ResolvedRecipe) -> list[str]:
    diffs = frozen.launch_differences(now)
    if frozen.parts != now.parts:
        diffs.append("parts")
    return [
        f"frank.toml: the served recipe's {k} is now {_show(getattr(now, k))}, frozen {_show(getattr(frozen, k))}"
        for k in diffs
    ]


def _show(value: object) -> str:
    text = " ".join(value) if isinstance(value, list) else repr(value)
    return f"[{text}]" if isinstance(value, list) else text


def checked(campaign: Campaign, command: str, *, force: bool = False, why: str | None = None) -> Served:
    """The served recipe ``command`` may launch: refused when the campaign disagrees with it now, naming every
    difference, unless ``force`` with a reason (the override is then recorded in the chain)."""
    served = served_now(campaign)
    if not served.problems:
        return served
    text = "; ".join(served.problems)
    if not force:
        raise LedgerError(
            f"{command} refuses: the served recipe ({served.why}) is not what this campaign would launch now: "
            f"{text} (what was tested is what is served; --force --why TEXT serves the frozen recipe anyway, "
            "and is recorded)"
        )
    if not (why or "").strip():
        raise LedgerError(f"--force needs --why TEXT: a forced {command} is recorded with its reason")
    campaign.store.insert_override(command=command, why=str(why), problem=text)
    return served


def served_lines(served: Served) -> list[str]:
    """The served recipe, where it comes from, its pins and what disagrees with it (``frank served``, the note)."""
    r = served.recipe
    lines = [
        f"served: {' + '.join([served.base, *served.parts])}",
        f"  engine: {r.engine}" + (f"  binary: {r.binary}" if r.binary else ""),
        f"  model: {r.model}",
        f"  args: {' '.join(r.args) or '-'}",
    ]
    if r.env:
        lines.append("  env: " + " ".join(f"{k}={v}" for k, v in sorted(r.env.items())))
    lines.append(f"  recipe: {served.why}")
    lines += [f"  pin: {p.role} {p.path} sha256 {p.sha256[:16]}…" for p in served.pins]
    if served.frozen and not served.pins:
        lines.append("  pins: none (the design was registered before registration pinned files)")
    lines += [f"  DISAGREES: {p}" for p in served.problems]
    return lines
