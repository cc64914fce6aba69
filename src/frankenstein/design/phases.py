"""Where a start's time goes: named phases of one start, timed with a monotonic clock.

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
and the commit, a few milliseconds, are not in it); it is outside ``total_s``. The time *between*
starts (the write, the runner's checks) is the gap from one start's ``at + total_s`` to the next one's
``at`` (:func:`gaps`).

    recording() -> Phases       the current start's recorder (nested calls share the outer one)
    phase(name)                 time one phase of the current start
    add(name, seconds)          add seconds to a phase of the current start
    note(key, value)            a fact about the start's edges (stop signal, ready polls)
    current() -> Phases | None
    read(record) -> StartPhases typed read of a stored record (None for a start recorded before phases)
    gaps(records) -> list       seconds between consecutive starts
    summarize(rows, cache)      a design's TimeSummary: per arm means, per start phases, caches, prefetch
    as_json(summary)            the summary for exports (schema: docs/exports.md, "time_spent")
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
    "write": "write",
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
    write_s: float | None = None  # writing the start's rows (the store's, outside total_s)

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
        write = record.get("write_s")
        return StartPhases(
            float(record["at"]),
            float(record["total_s"]),
            phases,
            dict(record.get("notes") or {}),
            None if write is None else float(write),
        )
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


# ---------------------------------------------------------------- where a design's time went

GAP_LIMIT_S = 300.0
"""A gap between two starts longer than this is a stopped and resumed run, not the runner's own work."""


@dataclass(frozen=True)
class ArmTime:
    """One arm's starts: how many carry phases, and the mean seconds per phase and in all."""

    arm: str
    starts: int
    mean: dict[str, float]
    total_s: float


@dataclass(frozen=True)
class StartTime:
    """One start's stored phases, for exports: its id, arm, block, and the gap to the next start."""

    start_id: int
    arm: str
    block: int | None
    status: str
    phases: StartPhases
    between_s: float | None  # to the next start's beginning (None for the last one)


@dataclass(frozen=True)
class TimeSummary:
    """Where a design's wall time went, from its start rows (``StartRow.phases``)."""

    arms: tuple[ArmTime, ...]
    starts: int  # starts with phases
    without: int  # starts recorded without phases (before they were recorded)
    starts_s: float  # sum of the starts' totals
    between_s: float  # sum of the counted gaps between starts
    engine_s: float  # launch + ready + stop, summed
    resumed_gaps: int  # gaps longer than GAP_LIMIT_S, not counted
    cache: str  # the design's cache policy
    cache_empty: int  # starts whose cache folder was empty when they began
    cache_recorded: int  # starts with a cache record
    prefetch: dict[str, Any] = field(default_factory=dict)
    page_cache: tuple[float, ...] = ()  # per start that recorded it: share of its model files cached at launch
    cache_outside: dict[str, int] = field(default_factory=dict)  # variable left to the recipe's env: starts
    per_start: tuple[StartTime, ...] = ()

    @property
    def wall_s(self) -> float:
        return self.starts_s + self.between_s

    @property
    def engine_share(self) -> float | None:
        return self.engine_s / self.wall_s if self.wall_s > 0 else None


def summarize(rows: Sequence[Any], cache: str = "warm") -> TimeSummary:
    """The :class:`TimeSummary` of a design's start rows (any objects with ``arm``, ``phases`` and
    ``resources``, i.e. :class:`frankenstein.store.StartRow`), in their run order (by ``started_at``)."""
    rows = sorted(rows, key=lambda r: (getattr(read(r.phases), "at", 0.0), r.id))
    recs = [read(r.phases) for r in rows]
    gap = gaps(recs)
    per_arm: dict[str, list[dict[str, float]]] = {}
    starts_s = between_s = engine_s = 0.0
    resumed = 0
    for row, rec, g in zip(rows, recs, gap):
        if rec is None:
            continue
        seen = dict(rec.phases)
        seen["total"] = rec.total_s
        if rec.write_s is not None:
            seen["write"] = rec.write_s
        if g is not None and g <= GAP_LIMIT_S:
            between_s += g
        elif g is not None:
            resumed += 1
        per_arm.setdefault(row.arm, []).append(seen)
        starts_s += rec.total_s
        engine_s += rec.engine_start_s
    arms = []
    for arm in sorted(per_arm, key=lambda a: (a != "served", a)):
        seen_rows = per_arm[arm]
        names = {k for s in seen_rows for k in s if k != "total"}
        mean = {k: sum(s.get(k, 0.0) for s in seen_rows) / len(seen_rows) for k in names}
        arms.append(ArmTime(arm, len(seen_rows), mean, sum(s["total"] for s in seen_rows) / len(seen_rows)))
    caches = [r.resources.get("caches") for r in rows if isinstance(r.resources.get("caches"), Mapping)]
    outside: dict[str, int] = {}
    for c in caches:
        for var in c.get("left_to_recipe") or ():
            outside[str(var)] = outside.get(str(var), 0) + 1
    return TimeSummary(
        arms=tuple(arms),
        starts=sum(1 for r in recs if r is not None),
        without=sum(1 for r in recs if r is None),
        starts_s=starts_s,
        between_s=between_s,
        engine_s=engine_s,
        resumed_gaps=resumed,
        cache=cache,
        cache_empty=sum(1 for c in caches if c.get("empty_at_start")),
        cache_recorded=len(caches),
        prefetch=prefetch_summary([r.resources.get("prefetch") for r in rows]),
        page_cache=tuple(
            float(pc["resident"])
            for r in rows
            if isinstance(pc := r.resources.get("page_cache"), Mapping) and pc.get("resident") is not None
        ),
        cache_outside=outside,
        per_start=tuple(
            StartTime(r.id, r.arm, r.block, r.status, rec, g) for r, rec, g in zip(rows, recs, gap) if rec is not None
        ),
    )


def prefetch_summary(records: Sequence[Any]) -> dict[str, Any]:
    """Starts that read ahead, bytes and seconds, and the reasons others did not."""
    read_ = [r for r in records if isinstance(r, Mapping) and not r.get("skipped")]
    skipped: dict[str, int] = {}
    for r in records:
        if isinstance(r, Mapping) and r.get("skipped"):
            why = str(r["skipped"])
            skipped[why] = skipped.get(why, 0) + 1
    return {
        "starts": len(read_),
        "bytes": sum(int(r.get("bytes") or 0) for r in read_),
        "seconds": sum(float(r.get("seconds") or 0.0) for r in read_),
        "stopped": sum(1 for r in read_ if r.get("stopped")),
        "skipped": skipped,
    }


def table(summary: TimeSummary) -> tuple[list[str], list[list[str]], str]:
    """(header, rows, align) of the per-arm table: mean seconds per phase, phases no start had left out."""
    names = ordered({k for a in summary.arms for k, v in a.mean.items() if k != "write" and v > 0.0005})
    if any("write" in a.mean for a in summary.arms):
        names.append("write")
    header = ["arm", "starts", *(PHASE_WORDS.get(n, n) for n in names), "total"]
    rows = [
        [a.arm, str(a.starts), *(f"{a.mean[n]:.2f}" if n in a.mean else "-" for n in names), f"{a.total_s:.2f}"]
        for a in summary.arms
    ]
    return header, rows, "lr" + "r" * (len(names) + 1)


def duration(seconds: float) -> str:
    """'3 h 20 min', '4 min 10 s', '12.3 s'."""
    if seconds >= 3600:
        h, m = divmod(round(seconds / 60), 60)
        return f"{h} h {m} min" if m else f"{h} h"
    if seconds >= 60:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s} s" if s else f"{m} min"
    return f"{seconds:.1f} s"


def sentences(summary: TimeSummary) -> list[str]:
    """The lines under the table: the wall time and its share of engine starts, caches, prefetch."""
    out = []
    if summary.starts:
        share = summary.engine_share
        out.append(
            f"{summary.starts} starts took {duration(summary.wall_s)} in all "
            f"({duration(summary.starts_s)} in the starts, {duration(summary.between_s)} between them)"
            + (f", {share:.0%} of it starting and stopping engines (launch, ready, stop)" if share is not None else "")
        )
    if summary.without:
        out.append(f"{summary.without} start(s) were recorded without phases (before they were recorded)")
    if summary.resumed_gaps:
        out.append(f"{summary.resumed_gaps} gap(s) longer than {GAP_LIMIT_S:.0f} s (a stopped run resumed) not counted")
    policy = (
        "warm (each arm's own cache folders, kept across its starts)"
        if summary.cache == "warm"
        else "cold (an empty cache folder for every start)"
    )
    cache = f"engine caches: {policy}"
    if summary.cache_recorded:
        cache += f"; {summary.cache_empty} of {summary.cache_recorded} starts began with an empty campaign folder"
    if summary.cache_outside:
        named = ", ".join(f"{var} ({n} start(s))" for var, n in sorted(summary.cache_outside.items()))
        cache += f"; left to the recipe's own env, outside the campaign (shared by the arms, not emptied under cold): {named}"
    out.append(cache)
    if summary.page_cache:
        full = sum(1 for x in summary.page_cache if x >= 0.999)
        low = min(summary.page_cache)
        out.append(
            f"model files in the page cache when the start launched: all of them for {full} of "
            f"{len(summary.page_cache)} starts" + (f" (lowest {low:.0%})" if full < len(summary.page_cache) else "")
        )
    p = summary.prefetch
    if p.get("starts") or p.get("skipped"):
        line = "prefetch of the next start's files: " + (
            f"{p['starts']} start(s) read {p['bytes'] / 2**20:.1f} MiB in {p['seconds']:.2f} s"
            if p["starts"]
            else "none read"
        )
        if p.get("stopped"):
            line += f" ({p['stopped']} stopped when their start ended)"
        if p.get("skipped"):
            line += "; skipped: " + "; ".join(f"{why} ({n})" for why, n in sorted(p["skipped"].items()))
        out.append(line)
    return out


def time_lines(summary: TimeSummary | None) -> list[str]:
    """What ``frank analyze`` prints after the verdict: the per-arm table and its sentences."""
    if summary is None or not summary.starts:
        return []  # starts recorded before phases were: nothing to say
    lines = ["", "where the time went (mean seconds per start, per arm):"]
    header, body, align = table(summary)
    widths = [max(len(c) for c in col) for col in zip(header, *body)]
    for cells in [header, *body]:
        lines.append("  " + "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)))
    lines += [f"  {s}" for s in sentences(summary)]
    return lines


def as_json(summary: TimeSummary | None) -> dict[str, Any] | None:
    """The summary as a JSON-ready object (for exports: ``analyze --json``, ``note.json``)."""
    if summary is None:
        return None
    return {
        "starts": summary.starts,
        "starts_without_phases": summary.without,
        "wall_s": summary.wall_s,
        "starts_s": summary.starts_s,
        "between_s": summary.between_s,
        "engine_s": summary.engine_s,
        "engine_share": summary.engine_share,
        "cache": summary.cache,
        "cache_empty_at_start": summary.cache_empty,
        "cache_outside_campaign": dict(summary.cache_outside),
        "per_arm": {a.arm: {"starts": a.starts, "total_s": a.total_s, "phases": dict(a.mean)} for a in summary.arms},
        "per_start": [start_json(s) for s in summary.per_start],
        "prefetch": dict(summary.prefetch),
        "page_cache_at_launch": list(summary.page_cache),
    }


def start_json(s: StartTime) -> dict[str, Any]:
    """One start's phases for exports (``time_spent.per_start[]``)."""
    return {
        "start_id": s.start_id,
        "arm": s.arm,
        "block": None if s.block is None else s.block + 1,
        "status": s.status,
        **record_json(s.phases),
        "between_s": None if s.between_s is None else round(s.between_s, 4),
    }


def record_json(p: StartPhases | None) -> dict[str, Any]:
    """A stored phase record for exports: ``at``, ``total_s``, ``phases``, ``write_s``, ``notes``."""
    if p is None:
        return {"at": None, "total_s": None, "phases": {}, "write_s": None, "notes": {}}
    return {"at": p.at, "total_s": p.total_s, "phases": dict(p.phases), "write_s": p.write_s, "notes": dict(p.notes)}
