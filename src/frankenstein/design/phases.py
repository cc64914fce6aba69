"""Where a start's time goes: the recorder of one start's named phases, timed with a monotonic clock.
Ground floor: it imports nothing of ours, so any room that runs part of a start can time it.

:func:`frankenstein.design.start.watched` opens one recorder per start (every kind, command arms
included); the code that runs the start times its phases with ``with phase("replay"): ...`` or
``add("ready", seconds)``, which record into the current start's recorder (and do nothing where no
start is being recorded). The record is stored with the start as ``resources["phases"]``:

    {"at": <epoch seconds when the start began>, "total_s": <seconds>,
     "phases": {"launch": s, "ready": s, "warmup": s, "replay": s, "scrape": s, "stop": s, "other": s},
     "notes": {...}}

``other`` is the part of the total no phase claimed (the machine snapshot, bookkeeping). The store adds
``"write_s"`` as it writes the start (:meth:`frankenstein.store.Store.insert_start`): the seconds from
the call to write it until its rows are inserted, measured before its chain link is computed (the link
and the commit, a few milliseconds, are not in it); it is outside ``total_s``. Reading stored records
and a design's per-arm summary are :mod:`frankenstein.design.timespent`; the words for people are
:mod:`frankenstein.report.phases`.

    recording() -> Phases       the current start's recorder (nested calls share the outer one)
    phase(name)                 time one phase of the current start
    add(name, seconds)          add seconds to a phase of the current start
    note(key, value)            a fact about the start's edges (stop signal, ready polls)
    current() -> Phases | None
    PHASE_ORDER, ordered(names) display order of the phase names
    ENGINE_START                the phases that are the price of a fresh engine per start
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
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


def ordered(names: Sequence[str] | set[str]) -> list[str]:
    return sorted(names, key=_order)
