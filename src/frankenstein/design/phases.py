"""Where a start's time goes: named phases of one start, timed with a monotonic clock.

:func:`frankenstein.design.start.watched` opens one recorder per start (every kind, command arms
included); the code that runs the start times its phases with ``with phase("replay"): ...`` or
``add("ready", seconds)``, which record into the current start's recorder (and do nothing where no
start is being recorded). The record is stored with the start as ``resources["phases"]``:

    {"at": <epoch seconds when the start began>, "total_s": <seconds>,
     "phases": {"launch": s, "ready": s, "warmup": s, "replay": s, "scrape": s, "stop": s, "other": s},
     "notes": {...}}

``other`` is the part of the total no phase claimed (the machine snapshot, bookkeeping); the time
*between* starts (writing a start's record, the runner's checks) is the gap from one start's
``at + total_s`` to the next one's ``at`` (:func:`gaps`), since a row cannot hold the time of its own write.

    recording() -> Phases       the current start's recorder (nested calls share the outer one)
    phase(name)                 time one phase of the current start
    add(name, seconds)          add seconds to a phase of the current start
    note(key, value)            a fact about the start's edges (stop signal, ready polls)
    current() -> Phases | None
    read(record) -> StartPhases typed read of a stored record (None for a start recorded before phases)
    gaps(records) -> list       seconds between consecutive starts
    PHASE_ORDER                 display order of the phase names
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

PHASE_ORDER = (
    "caches",
    "launch",
    "ready",
    "warmup",
    "replay",
    "prepare",
    "force",
    "tasks",
    "command",
    "scrape",
    "stop",
    "other",
)
PHASE_WORDS = {
    "caches": "cache folders",
    "launch": "launch",
    "ready": "launch → ready",
    "warmup": "warm-up",
    "replay": "replay",
    "prepare": "prepare (tokenize)",
    "force": "forced decode",
    "tasks": "agent tasks",
    "command": "command",
    "scrape": "scrape",
    "stop": "stop",
    "other": "other",
    "write": "write + between starts",
}
ENGINE_START = ("launch", "ready", "stop")
"""The phases that are the price of a fresh engine per start (what a plan calls "engine starts")."""


class Phases:
    """One start's phases. ``after(name, fn)`` runs ``fn`` once when phase ``name`` ends (the prefetch
    of the next start's files begins when this one is ready); ``attach(key, fn)`` puts ``fn()`` into the
    start's ``resources[key]`` when the start ends."""

    def __init__(self) -> None:
        self.at = time.time()
        self.t0 = time.monotonic()
        self.seconds: dict[str, float] = {}
        self.notes: dict[str, Any] = {}
        self.total_s: float | None = None
        self._after: dict[str, list[Callable[[], None]]] = {}
        self._attached: dict[str, Callable[[], dict[str, Any]]] = {}
        self.depth = 0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)
        for fn in self._after.pop(name, []):
            fn()

    def after(self, name: str, fn: Callable[[], None]) -> None:
        self._after.setdefault(name, []).append(fn)

    def attach(self, key: str, fn: Callable[[], dict[str, Any]]) -> None:
        self._attached[key] = fn

    def finish(self) -> dict[str, dict[str, Any]]:
        """Close the recorder: the total, ``other``, and the attached records by key (``phases`` among them)."""
        out = {key: fn() for key, fn in self._attached.items()}
        self.total_s = time.monotonic() - self.t0
        claimed = sum(self.seconds.values())
        phases = dict(self.seconds)
        phases["other"] = phases.get("other", 0.0) + max(0.0, self.total_s - claimed)
        out["phases"] = {
            "at": round(self.at, 3),
            "total_s": round(self.total_s, 4),
            "phases": {k: round(v, 4) for k, v in sorted(phases.items(), key=lambda kv: _order(kv[0]))},
            "notes": dict(self.notes),
        }
        return out


_CURRENT: ContextVar[Phases | None] = ContextVar("frank_phases", default=None)


@contextmanager
def recording() -> Iterator[Phases]:
    """The current start's recorder; a new one unless one is open (then the outer one is shared)."""
    rec = _CURRENT.get()
    token = None
    if rec is None:
        rec = Phases()
        token = _CURRENT.set(rec)
    rec.depth += 1
    try:
        yield rec
    finally:
        rec.depth -= 1
        if token is not None:
            _CURRENT.reset(token)


def current() -> Phases | None:
    return _CURRENT.get()


@contextmanager
def phase(name: str) -> Iterator[None]:
    rec = _CURRENT.get()
    if rec is None:
        yield
        return
    with rec.phase(name):
        yield


def add(name: str, seconds: float) -> None:
    rec = _CURRENT.get()
    if rec is not None:
        rec.add(name, seconds)


def note(key: str, value: Any) -> None:
    rec = _CURRENT.get()
    if rec is not None:
        rec.notes[key] = value


def _order(name: str) -> int:
    return PHASE_ORDER.index(name) if name in PHASE_ORDER else len(PHASE_ORDER)


# ---------------------------------------------------------------- reading stored records


@dataclass(frozen=True)
class StartPhases:
    """A stored start's phases: when it began (epoch seconds), its total, seconds per phase."""

    at: float
    total_s: float
    phases: dict[str, float]
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def engine_start_s(self) -> float:
        return sum(self.phases.get(p, 0.0) for p in ENGINE_START)


def read(record: Any) -> StartPhases | None:
    """A start's ``resources["phases"]`` as :class:`StartPhases`; None where it holds none (a start
    recorded before phases were, or a malformed record)."""
    if not isinstance(record, Mapping):
        return None
    try:
        phases = {str(k): float(v) for k, v in dict(record.get("phases") or {}).items()}
        return StartPhases(float(record["at"]), float(record["total_s"]), phases, dict(record.get("notes") or {}))
    except (KeyError, TypeError, ValueError):
        return None


def gaps(records: Sequence[StartPhases | None]) -> list[float | None]:
    """Seconds from the end of each start to the beginning of the next (its record's write and the
    runner's own work); None for the last start and where either side has no phases."""
    out: list[float | None] = []
    for a, b in zip(records, [*records[1:], None]):
        out.append(None if a is None or b is None else max(0.0, b.at - (a.at + a.total_s)))
    return out


def ordered(names: Sequence[str] | set[str]) -> list[str]:
    return sorted(names, key=_order)
