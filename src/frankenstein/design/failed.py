"""The failed outcome of a start that was refused before it ran (a pinned file missing or changed, a host
that died): recorded like any failed start."""

from __future__ import annotations

from typing import Any

from frankenstein.config import ResolvedRecipe
from frankenstein.design.model import Registered, Slot
from frankenstein.design.start import StartOutcome
from frankenstein.engines import command_recipe
from frankenstein.store import now_iso


def arm_recipe(reg: Registered, arm: str) -> ResolvedRecipe:
    """The recipe a start of ``arm`` records (a command arm's is the one :mod:`design.command` records)."""
    recipe = reg.frozen.recipes[arm]
    if recipe is not None:
        return recipe
    command = reg.design.arms[arm].command or []
    return command_recipe(command)


def failed_start(reg: Registered, slot: Slot, reason: str, host: dict[str, Any] | None = None) -> StartOutcome:
    recipe = arm_recipe(reg, slot.arm)
    engine = "command" if reg.frozen.recipes[slot.arm] is None else recipe.engine
    out = StartOutcome(status="failed", reason=reason, started_at=now_iso(), recipe=recipe, engine=engine)
    out.metrics = {"harness_failure": 1.0}  # it never ran: not the part's failure (an agent design drops the block)
    if host is not None:
        out.resources["host"] = dict(host)
    return out
