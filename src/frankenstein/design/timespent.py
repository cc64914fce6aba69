"""Where a design's time went, from its stored start rows: the typed read of a start's
``resources["phases"]`` (written by the recorder, :mod:`frankenstein.design.phases`), the gaps between
starts (from one start's ``at + total_s`` to the next one's ``at``: the write, the runner's checks), the
per-arm :class:`TimeSummary` analyze and the note print, and its JSON for exports.

    read(record) -> StartPhases typed read of a stored record (None for a start recorded before phases)
    gaps(records) -> list       seconds between consecutive starts
    summarize(rows, cache)      a design's TimeSummary: per arm means, per start phases, caches, prefetch
    as_json(summary)            the summary for exports (schema: docs/exports.md, "time_spent")
    duration(seconds)           '3 h 20 min', '4 min 10 s', '12.3 s' (the plan's wall-time lines use it too)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from frankenstein.design.phases import ENGINE_START


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


def duration(seconds: float) -> str:
    """'3 h 20 min', '4 min 10 s', '12.3 s'."""
    if seconds >= 3600:
        h, m = divmod(round(seconds / 60), 60)
        return f"{h} h {m} min" if m else f"{h} h"
    if seconds >= 60:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s} s" if s else f"{m} min"
    return f"{seconds:.1f} s"


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
