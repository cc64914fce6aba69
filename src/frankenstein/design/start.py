"""One *start*: engine up → ready → warm-up → replay → scrape → stop, and its row in the store.

A failed start is an outcome, not an exception: it is returned with its reason so the caller records
it (every start is recorded, failures included) and applies the design's failure policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import adapter_for
from frankenstein.errors import EngineError
from frankenstein.measure.resources import ResourceSampler
from frankenstein.store import Store, now_iso
from frankenstein.workload.replay import ReplayResult, ReplaySettings, replay
from frankenstein.workload.trace import Workload


@dataclass
class StartOutcome:
    status: str  # ok | failed | invalid
    reason: str | None
    started_at: str
    recipe: ResolvedRecipe
    engine: str = ""
    engine_version: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    capabilities: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    scrape: dict[str, float] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)
    episodes: list[dict[str, Any]] = field(default_factory=list)


def _scrape_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after if k.endswith("_total") and after[k] != before.get(k, 0.0)}


def measure_start(
    recipe: ResolvedRecipe, workload: Workload, settings: ReplaySettings, log_dir: Path,
    progress: Callable[[int, int], None] | None = None,
) -> StartOutcome:
    """Run one start; never raises for engine failures (they become a failed outcome)."""
    started = now_iso()
    engine = adapter_for(recipe, log_dir)
    out = StartOutcome(status="failed", reason=None, started_at=started, recipe=recipe, engine=engine.kind)
    sampler = ResourceSampler()
    try:
        engine.start()
        sampler.start(engine.process.proc.pid if engine.process and engine.process.proc else None)
        out.engine_version = engine.version
        out.capabilities = engine.capabilities()
        before = _metrics_or_empty(engine)
        result: ReplayResult = replay(engine, workload, settings, progress)
        out.scrape = _scrape_delta(before, _metrics_or_empty(engine))
        out.rows, out.metrics = result.rows, dict(result.metrics)
        out.status, out.reason = ("ok", None) if result.valid else ("invalid", "; ".join(result.invalid[:5]))
    except EngineError as exc:
        out.status, out.reason = "failed", str(exc)
    finally:
        out.resources = sampler.stop()
        engine.stop()
    return out


def _metrics_or_empty(engine: Any) -> dict[str, float]:
    try:
        return dict(engine.metrics())
    except EngineError:
        return {}


def record_start(store: Store, out: StartOutcome, *, design_id: str | None = None, block: int | None = None,
                 position: int | None = None, rep: int = 0, arm: str | None = None) -> int:
    """Write the start, its turns, artifacts and episodes in one transaction."""
    arts = dict(out.artifacts)
    if out.scrape:
        arts.setdefault("metrics_delta.json", json.dumps(out.scrape, sort_keys=True).encode())
    return store.insert_start(
        arm=arm or out.recipe.name, status=out.status, reason=out.reason, started_at=out.started_at,
        metrics=out.metrics, turns=out.rows, design_id=design_id, block=block, position=position, rep=rep,
        engine=out.engine, engine_version=out.engine_version, recipe=out.recipe.model_dump(),
        resources=out.resources, capabilities=out.capabilities, artifacts=arts, episodes=list(out.episodes),
    )
