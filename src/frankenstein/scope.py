"""What an adoption is for, as data: ``frank adopt --scope concurrency=1 --scope "note=..."``.

    parse_scope(["concurrency=1", "note=single stream only"]) -> AdoptedScope
    scope_words({"concurrency": 1, "note": "..."})            -> "concurrency 1 (one request at a time); note: ..."
    served_scope(steps)                                       -> the smallest concurrency the served parts hold
    served_adoptions(steps)                                   -> the adopt step of each served part
    with_design_concurrency(scope, 4)                         -> concurrency=4 when the user gave none

The keys are fixed (:class:`AdoptedScope`, ``extra="forbid"``): ``concurrency`` (requests at once),
``context`` (tokens), ``gpus``, ``workload``, ``engine_version`` and a free-text ``note``. The ledger keeps
the scope in the adopt step's ``scope["adopted_for"]``; ``frank served``, the note's summary and ``frank
serve`` read it back from there. ``frank serve`` holds the served recipe's ``concurrency`` (queue or refuse
past it); the other keys are printed, not enforced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, ValidationError

from frankenstein.errors import ConfigError
from frankenstein.store import LedgerEntry
from frankenstein.validation import UserFile, field_error

OPTION = "--scope"
KEY = "adopted_for"  # where an adopt step's scope keeps it


class AdoptedScope(UserFile):
    """Where an adopted part is meant to be served; every key optional."""

    concurrency: int | None = Field(default=None, ge=1, description="requests served at once")
    context: int | None = Field(default=None, ge=1, description="context length, tokens")
    gpus: int | None = Field(default=None, ge=1, description="GPUs the recipe serves on")
    workload: str | None = Field(default=None, min_length=1, description="the workload it is for")
    engine_version: str | None = Field(default=None, min_length=1, description="the engine version it is for")
    note: str | None = Field(default=None, min_length=1, description="free text, printed as given")

    def recorded(self) -> dict[str, Any]:
        """The keys given, for the ledger step (none given: empty)."""
        return self.model_dump(exclude_none=True)


def parse_scope(items: Sequence[str]) -> AdoptedScope:
    """``KEY=VALUE`` strings (one per ``--scope``) as an :class:`AdoptedScope`; a bad one is one
    :class:`ConfigError` naming the option and the key."""
    given: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(
                f"{item!r}: expected KEY=VALUE (keys: {', '.join(AdoptedScope.model_fields)})", field=OPTION
            )
        if key in given:
            raise ConfigError(f"{key} given twice", field=f"{OPTION} {key}")
        given[key] = value.strip()
    try:
        return AdoptedScope.model_validate(given)
    except ValidationError as exc:
        err = field_error(None, exc)
        keys = f" (keys: {', '.join(AdoptedScope.model_fields)})" if "unknown field" in str(err) else ""
        raise ConfigError(f"{err}{keys}", field=OPTION) from exc


def with_design_concurrency(scope: AdoptedScope, ran_at: int) -> AdoptedScope:
    """The scope an adopt records: as given, plus ``concurrency`` = the design's ``replay.concurrency`` when none
    was given and the design ran above one request at a time (a design at concurrency 1 records it only when
    given, as before: ``frank serve`` then keeps serving such campaigns as it did)."""
    if scope.concurrency is not None or ran_at <= 1:
        return scope
    return scope.model_copy(update={"concurrency": ran_at})


def scope_words(scope: dict[str, Any]) -> str:
    """The adopted scope in words: 'concurrency 1 (one request at a time); context 32768 tokens; note: ...'."""
    words = []
    if (n := scope.get("concurrency")) is not None:
        words.append("concurrency 1 (one request at a time)" if n == 1 else f"concurrency up to {n}")
    for key, label, tail in (
        ("context", "context", " tokens"),
        ("gpus", "GPUs", ""),
        ("workload", "workload", ""),
        ("engine_version", "engine version", ""),
    ):
        if scope.get(key) is not None:
            words.append(f"{label} {scope[key]}{tail}")
    if scope.get("note"):
        words.append(f"note: {scope['note']}")
    return "; ".join(words)


def adopted_for(step: LedgerEntry) -> dict[str, Any]:
    """The scope an adopt step was adopted for (empty: none given)."""
    value = step.scope.get(KEY) if step.action == "adopt" else None
    return dict(value) if isinstance(value, dict) else {}


def served_adoptions(steps: Sequence[LedgerEntry]) -> list[LedgerEntry]:
    """The adopt step that brought in each part served after the last step (its last adopt), in served order."""
    if not steps:
        return []
    last = max(steps, key=lambda e: e.seq)
    adopts: dict[str, LedgerEntry] = {}
    for e in sorted(steps, key=lambda e: e.seq):
        if e.action == "adopt":
            adopts[e.part] = e
    return [adopts[p] for p in last.parts if p in adopts]


def served_scope(steps: Sequence[LedgerEntry], key: str = "concurrency") -> tuple[int | None, list[LedgerEntry]]:
    """(the smallest ``key`` (concurrency, context, gpus) any served part was adopted for, the adopt steps that set
    it): each part served after the last step counts with the adopt step that brought it in last. (None, [])
    without one."""
    limits: list[tuple[int, LedgerEntry]] = []
    for e in served_adoptions(steps):
        n = adopted_for(e).get(key)
        if isinstance(n, int):
            limits.append((n, e))
    if not limits:
        return None, []
    least = min(n for n, _ in limits)
    return least, [e for n, e in limits if n == least]
