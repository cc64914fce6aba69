"""The store's typed rows, and how each is encoded into and decoded from its SQLite row and JSON columns."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from frankenstein.chain import Link

TURN_KEYS = ("idx", "turn_id", "warmup", "error")  # columns; every other key of a turn row is a metric
LEGACY_TURN_METRICS = (
    "prompt_tokens",
    "cached_tokens",
    "generated_tokens",
    "prompt_ms",
    "decode_ms",
    "target_steps",
    "drafted",
    "accepted",
    "ttft_ms",
    "e2e_ms",
)


def now_iso() -> str:
    """UTC timestamp with milliseconds, sortable as text."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


@dataclass(frozen=True)
class StartRow:
    id: int
    design_id: str | None
    block: int
    position: int
    arm: str
    rep: int
    status: str  # ok | failed | invalid
    reason: str | None
    started_at: str
    finished_at: str
    engine: str | None
    engine_version: str | None
    recipe: dict[str, Any] | None
    metrics: dict[str, Any]
    resources: dict[str, Any]
    capabilities: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def phases(self) -> dict[str, Any]:
        """Where the start's time went (:mod:`frankenstein.design.phases`), kept in ``resources["phases"]``
        (no new column: the evidence chain digests every column of a start): ``at``, ``total_s``,
        ``phases`` {name: seconds}, ``notes``; {} for a start recorded before phases were."""
        found = self.resources.get("phases")
        return dict(found) if isinstance(found, dict) else {}


@dataclass(frozen=True)
class EpisodeRow:
    start_id: int
    block: int
    arm: str
    task_id: str
    draw: int
    task_hash: str
    status: str
    passed: bool
    grader_rc: int | None
    turns: int
    detail: dict[str, Any]


@dataclass(frozen=True)
class RegistryRow:
    seq: int
    design_id: str
    kind: str
    name: str
    canonical: str
    design_hash: str
    seed: str
    schedule: str
    registered_at: str
    tool_version: str
    prev_hash: str
    row_hash: str


@dataclass(frozen=True)
class LedgerEntry:
    seq: int
    action: str  # adopt | revert | park | stop | unpark
    part: str
    design_id: str | None
    scope: dict[str, Any]
    forced: bool
    why: str | None
    parts: list[str]
    at: str


RefusalWhat = Literal["registration", "adopt"]


@dataclass(frozen=True)
class Refusal:
    seq: int
    what: RefusalWhat
    name: str
    part: str | None
    path: str | None
    reason: str
    at: str


@dataclass(frozen=True)
class ServedRequest:
    """One request ``frank serve`` answered: when, the ledger step served (None: no step yet), the route
    (count_tokens, chat, ...), the HTTP status sent, milliseconds from request to the last byte sent,
    and whether the engine failed it (a 5xx from the engine or no answer)."""

    at: str
    step: int | None
    route: str
    status: int
    ms: float
    engine_error: bool
    seq: int | None = None
    outside_scope: str | None = None  # outside the served recipe's adopted scope, in words; None: within it


@dataclass(frozen=True)
class ObservedDraw:
    """One agent draw (every task once) run outside any design: when, the ledger step served (None: no step
    yet), the draw number, its episodes, how many passed, how many the engine failed (``engine_error``) and
    how many ended in another error (format, grader)."""

    at: str
    step: int | None
    draw: int
    episodes: int
    passed: int
    engine_errors: int
    episode_errors: int
    seq: int | None = None


@dataclass(frozen=True)
class Override:
    seq: int
    command: str
    why: str
    problem: str
    at: str


def _turn_row(start_id: int, t: Mapping[str, Any]) -> dict[str, Any]:
    """A turn as its row reads back (the fixed metric columns of 0001 stay NULL: metrics are one JSON object)."""
    values = {k: v for k, v in t.items() if k not in TURN_KEYS}
    row = {"start_id": start_id, "idx": t["idx"], "turn_id": t["turn_id"], "warmup": int(t["warmup"])}
    return {**row, **dict.fromkeys(LEGACY_TURN_METRICS), "error": t.get("error"), "metrics": _dumps(values)}


def _episode_row(start_id: int, e: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "start_id": start_id,
        "task_id": e["task_id"],
        "draw": e["draw"],
        "task_hash": e["task_hash"],
        "status": e["status"],
        "passed": int(e["passed"]),
        "grader_rc": e.get("grader_rc"),
        "turns": e["turns"],
        "detail": _dumps(e.get("detail", {})),
    }


def _link(r: sqlite3.Row) -> Link:
    return Link(
        seq=r["seq"],
        kind=r["kind"],
        ref=r["ref"],
        label=r["label"],
        digest=r["digest"],
        prev_hash=r["prev_hash"],
        row_hash=r["row_hash"],
    )


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


def _loads(text: str | None) -> dict[str, Any]:
    """A stored JSON object; anything unreadable or not an object reads as empty (absent, never invented)."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _start(r: sqlite3.Row) -> StartRow:
    recipe = json.loads(r["recipe"]) if r["recipe"] else None
    return StartRow(
        id=r["id"],
        design_id=r["design_id"],
        block=r["block"],
        position=r["position"],
        arm=r["arm"],
        rep=r["rep"],
        status=r["status"],
        reason=r["reason"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        engine=r["engine"],
        engine_version=r["engine_version"],
        recipe=recipe,
        metrics=_loads(r["metrics"]),
        resources=_loads(r["resources"]),
        capabilities=_loads(r["capabilities"]),
    )


def _registry(r: sqlite3.Row) -> RegistryRow:
    return RegistryRow(**{k: r[k] for k in RegistryRow.__dataclass_fields__})


def _ledger(r: sqlite3.Row) -> LedgerEntry:
    return LedgerEntry(
        seq=r["seq"],
        action=r["action"],
        part=r["part"],
        design_id=r["design_id"],
        scope=json.loads(r["scope"]),
        forced=bool(r["forced"]),
        why=r["why"],
        parts=json.loads(r["parts"]),
        at=r["at"],
    )
