"""One *start*: engine up → ready → warm-up → replay → scrape → stop, and its row in the store.

A failed start is an outcome, not an exception: it is returned with its reason so the caller records
it (every start is recorded, failures included) and applies the design's failure policy.

``watched(run)`` wraps every start of every kind (speed, fidelity, agent, screen, command arms): the
machine snapshot before it (``resources["machine"]``), the load through it (``resources["load"]``) and
the NVML sampler (device-wide where the kind did not sample its engine itself), so a start that could
not look at a GPU says "not sampled", never "no GPU".
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from frankenstein.config import ResolvedRecipe
from frankenstein.design import phases
from frankenstein.engines import Engine, adapter_for, engine_settings, traits_of
from frankenstein.engines.process import extra_env
from frankenstein.engines.prometheus import SCRAPES_ARTIFACT, Sample, Scrapes, counter_deltas
from frankenstein.errors import EngineError
from frankenstein.measure.memory import RssSampler
from frankenstein.measure.machine import MachineSnapshot, binary_sha256, differences, snapshot
from frankenstein.measure.noise import LoadRecord, LoadSampler, judge_load
from frankenstein.measure.resources import ResourceSampler, not_sampled
from frankenstein.store import StartRow, Store, now_iso
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
    scrapes: Scrapes = field(default_factory=Scrapes)  # /metrics before and after the replay
    artifacts: dict[str, bytes] = field(default_factory=dict)
    episodes: list[dict[str, Any]] = field(default_factory=list)


def measure_start(
    recipe: ResolvedRecipe,
    workload: Workload,
    settings: ReplaySettings,
    log_dir: Path,
    progress: Callable[[int, int], None] | None = None,
    rss: bool = False,
) -> StartOutcome:
    """Run one start; never raises for engine failures (they become a failed outcome). Its phases
    (launch, ready, warmup, replay, scrape, stop) go to the current :mod:`~frankenstein.design.phases` recorder.
    ``rss``: also sample the engine process tree's peak RSS (``resources["rss"]``, a memory design's starts)."""
    started = now_iso()
    engine = adapter_for(recipe, log_dir)
    out = StartOutcome(status="failed", reason=None, started_at=started, recipe=recipe, engine=engine.kind)
    sampler, rss_sampler = ResourceSampler(), RssSampler()
    try:
        start_engine(engine)
        sampler.start(engine.pid)
        if rss:
            rss_sampler.start(engine.pid)
        out.engine_version = engine.version
        out.capabilities = engine.capabilities()
        with phases.phase("scrape"):
            before = _scrape_or_empty(engine)
        result: ReplayResult = timed_replay(engine, workload, settings, progress)
        with phases.phase("scrape"):
            out.scrapes = Scrapes(before, _scrape_or_empty(engine))
        out.scrape = counter_deltas(out.scrapes)
        out.rows, out.metrics = result.rows, result.metrics
        for note in result.notes:
            phases.note("replay_note", note)
        out.status, out.reason = ("ok", None) if result.valid else ("invalid", "; ".join(result.invalid[:5]))
    except EngineError as exc:
        out.status, out.reason = "failed", str(exc)
    finally:
        out.resources = sampler.stop()
        if rss:
            out.resources["rss"] = rss_sampler.stop()
        stop_engine(engine)
    return out


def start_engine(engine: Engine) -> None:
    """``engine.start()`` timed as two phases: ``launch`` (checks, spawn) and ``ready`` (launch → ready,
    the readiness poll); a failed start still records the time it took."""
    t = time.monotonic()
    try:
        engine.start()
    finally:
        total = time.monotonic() - t
        ready = engine.ready_s
        if ready is None:  # it never became ready: the time after a launch was the wait for ready
            ready = total if engine.pid is not None else 0.0
        phases.add("launch", max(0.0, total - ready))
        phases.add("ready", ready)
        if engine.process is not None:
            phases.note("ready_polls", engine.process.ready_polls)


def stop_engine(engine: Engine) -> None:
    """``engine.stop()`` timed as the ``stop`` phase, with how the process ended (SIGTERM or SIGKILL)."""
    with phases.phase("stop"):
        engine.stop()
    process = engine.process
    if process is not None and process.stopped_by:
        phases.note("stopped_by", process.stopped_by)
        phases.note("stop_grace_s", process.grace_s)


def timed_replay(
    engine: Engine, workload: Workload, settings: ReplaySettings, progress: Callable[[int, int], None] | None
) -> ReplayResult:
    """``replay`` timed as ``warmup`` (its first ``warmup_turns`` turns, which it sends first, one at a time)
    and ``replay`` (the measured turns)."""
    turns = len(workload.turns[: settings.max_turns] if settings.max_turns else workload.turns)
    warm = min(settings.warmup_turns, turns)
    t0 = time.monotonic()
    split: list[float] = []

    def tick(done: int, n: int) -> None:
        if done == warm and not split:
            split.append(time.monotonic())
        if progress:
            progress(done, n)

    try:
        return replay(engine, workload, settings, tick)
    finally:
        end = time.monotonic()
        mid = split[0] if split else (t0 if warm == 0 else end)
        phases.add("warmup", mid - t0)
        phases.add("replay", end - mid)


def watched(run: Callable[[], StartOutcome]) -> StartOutcome:
    """Run one start with the machine recorded beside it: snapshot before, load and NVML through it,
    and its phases (``resources["phases"]``, :mod:`frankenstein.design.phases`)."""
    with phases.recording() as rec:
        machine = snapshot()
        environ, frank_sets = dict(os.environ), extra_env()  # now, while the start's cache folders are set
        with LoadSampler() as load, ResourceSampler() as sampler:
            sampler.attach(None)
            t = time.monotonic()
            out = run()
            run_s = time.monotonic() - t
        if out.resources.get("status") != "sampled":
            rss = out.resources.get("rss")  # the process tree's peak RSS (a memory design), kept
            out.resources = dict(sampler.result or not_sampled("the sampler gave no result"))
            if rss is not None:
                out.resources["rss"] = rss
        out.resources["machine"] = machine.as_dict()
        binary = engine_binary(out)
        if binary:
            out.resources["engine_binary"] = binary
        if traits_of(out.recipe.engine).launched:  # launched by frank: it inherited frank's environment
            out.resources["engine_env"] = engine_settings(out.recipe.engine, frank_sets, environ)
        if load.record is not None:
            out.resources["load"] = load.record.model_dump(mode="json")
        if out.engine == "command":
            rec.add("command", run_s)
        if rec.total_s is None:
            out.resources.update(rec.finish())
    return out


def engine_binary(out: StartOutcome) -> dict[str, str] | None:
    """The program the start ran and its sha256 (a version string cannot tell a CUDA build from a CPU
    build; for a Python engine, the interpreter's real file); None where it cannot be found."""
    try:
        path = traits_of(out.recipe.engine).program(out.recipe)
        return {"path": path, "sha256": binary_sha256(path)} if path else None
    except OSError:
        return None


def _scrape_or_empty(engine: Engine) -> list[Sample]:
    try:
        return engine.scrape()
    except EngineError:
        return []


def record_start(
    store: Store,
    out: StartOutcome,
    *,
    design_id: str | None = None,
    block: int | None = None,
    position: int | None = None,
    rep: int = 0,
    arm: str | None = None,
) -> int:
    """Write the start, its turns, artifacts and episodes in one transaction."""
    arts = dict(out.artifacts)
    if out.scrape:
        arts.setdefault("metrics_delta.json", json.dumps(out.scrape, sort_keys=True).encode())
    if out.scrapes.before or out.scrapes.after:
        arts.setdefault(SCRAPES_ARTIFACT, out.scrapes.to_json())
    return store.insert_start(
        arm=arm or out.recipe.name,
        status=out.status,
        reason=out.reason,
        started_at=out.started_at,
        metrics=out.metrics,
        turns=out.rows,
        design_id=design_id,
        block=block,
        position=position,
        rep=rep,
        engine=out.engine,
        engine_version=out.engine_version,
        recipe=out.recipe.model_dump(),
        resources=out.resources,
        capabilities=out.capabilities,
        artifacts=arts,
        episodes=list(out.episodes),
    )


# ---------------------------------------------------------------- the machine, read back from start rows


def start_label(row: StartRow) -> str:
    return f"start {row.id} (block {row.block + 1}, {row.arm})"


def own_threads(row: StartRow) -> int:
    """The CPU threads the start's engine was launched with (its adapter's thread flags), 0 if none or unknown."""
    args = (row.recipe or {}).get("args")
    if not row.engine or not isinstance(args, list):
        return 0
    return traits_of(row.engine).threads([str(a) for a in args])


def load_warnings(rows: list[StartRow], each: int = 3, *, timed: bool = True) -> list[str]:
    """The noise guard: a warning per start during which the machine was busier than its cores beyond the
    arm's own engine threads, or, when more than ``each`` starts were, one wrapped warning naming their
    blocks and arms with the busiest. None for a design whose numbers do not depend on time (``timed``
    False: fidelity, memory)."""
    if not timed:
        return []
    busy = []
    for row in rows:
        load = row.resources.get("load")
        if isinstance(load, dict):
            record = LoadRecord.model_validate(load)
            warning = judge_load(start_label(row), record, own_threads(row))
            if warning:
                busy.append((record.runnable_mean or 0.0, row, warning))
    if len(busy) <= each:
        return [w for _, _, w in busy]
    worst = max(busy, key=lambda t: t[0])
    text = (
        f"{len(busy)} of {len(rows)} starts ran while the machine was busier than its cores: "
        f"{busy_blocks([r for _, r, _ in busy])}; the busiest: {worst[2]}"
    )
    return ["\n".join(textwrap.wrap(text, WARNING_WIDTH, subsequent_indent="  ", break_on_hyphens=False))]


WARNING_WIDTH = 100  # a long warning is wrapped at this many characters, continuation lines indented


def busy_blocks(rows: list[StartRow]) -> str:
    """'block 1 (candidate), block 3 (served, candidate)': the busy starts by block, arms in start order."""
    by_block: dict[int, list[str]] = {}
    for r in rows:
        by_block.setdefault(r.block, []).append(r.arm)
    return ", ".join(f"block {b + 1} ({', '.join(arms)})" for b, arms in sorted(by_block.items()))


RESUMED = "resumed"  # resources key: the start finished a block begun before a `frank run --resume`


def resumed_warnings(rows: list[StartRow]) -> list[str]:
    """Each start a ``--resume`` ran in a block begun earlier, with its delay since the block's previous start
    ended: its block's arms did not run back to back, so an order or drift effect may sit in that block."""
    out = []
    for row in rows:
        if not row.resources.get(RESUMED):
            continue
        before = [r for r in rows if r.block == row.block and r.position < row.position]
        if not before:
            continue
        prev = max(before, key=lambda r: r.position)
        gap = seconds_between(prev.finished_at, row.started_at)
        out.append(
            f"{start_label(row)} ran after `frank run --resume`, {span(gap)} after its block's previous start "
            f"({prev.id}, {prev.arm}) ended: the block's arms did not run back to back"
        )
    return out


def seconds_between(earlier: str, later: str) -> float | None:
    """Seconds from one recorded ISO time to another; None when either is unreadable."""
    try:
        a = datetime.fromisoformat(earlier.replace("Z", "+00:00"))
        b = datetime.fromisoformat(later.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (b - a).total_seconds()


def span(seconds: float | None) -> str:
    """'4.5 s', '12 min 3 s', '2 h 5 min'; 'an unknown time' when not readable."""
    if seconds is None:
        return "an unknown time"
    if seconds < 60:
        return f"{max(seconds, 0.0):.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    return f"{minutes // 60} h {minutes % 60} min"


def machine_of(row: StartRow) -> MachineSnapshot | None:
    data = row.resources.get("machine")
    return MachineSnapshot.model_validate(data) if isinstance(data, dict) else None


def machine_cells(snap: MachineSnapshot | None, row: StartRow) -> dict[str, str]:
    """The metadata table's cells for one start (what should not move between starts)."""
    if snap is None:
        return {"host": "not recorded"}
    gpus = ", ".join(g.name for g in snap.gpus) if snap.gpus else f"{snap.gpu_status} ({snap.gpu_note})".strip()
    return {
        "host": snap.host,
        "CPU": f"{snap.cpu_model or '?'} × {snap.cpu_cores or '?'}",
        "governor": snap.cpu_governor or "not readable",
        "GPU": gpus,
        "driver / CUDA": f"{snap.driver_version or '-'} / {snap.cuda_version or '-'}",
        "engine": f"{row.engine or '-'} {row.engine_version or ''}".strip() + _sha(row),
        **({"engine env": env} if (env := inherited_words(row)) else {}),
    }


def inherited_words(row: StartRow) -> str:
    """The engine settings the start inherited from frank's environment, ``K=V, ...`` (empty if none); those a
    Ray worker had set itself are named as Ray's (``resources["ray_env"]``, cluster/worker.py)."""
    env = row.resources.get("engine_env")
    by_ray = row.resources.get("ray_env") or []
    if not isinstance(env, dict):
        return ""
    return ", ".join(f"{k}={v}{' (set by Ray on its workers)' if k in by_ray else ''}" for k, v in sorted(env.items()))


def _sha(row: StartRow) -> str:
    binary = row.resources.get("engine_binary")
    return f" (sha256 {binary['sha256'][:12]})" if isinstance(binary, dict) and binary.get("sha256") else ""


def machine_differences(rows: list[StartRow]) -> list[str]:
    """Starts whose machine differs from the design's most common one, named with what differs."""
    cells = {row.id: tuple(sorted(machine_cells(machine_of(row), row).items())) for row in rows}
    recorded = [row for row in rows if machine_of(row) is not None]
    if not recorded:
        return []
    keys = [cells[r.id] for r in recorded]
    common = max(set(keys), key=keys.count)
    ref = next(r for r in recorded if cells[r.id] == common)
    ref_snap = machine_of(ref)
    assert ref_snap is not None
    out = []
    for row in rows:
        snap = machine_of(row)
        if snap is None:
            out.append(f"{start_label(row)}: no machine recorded")
        elif cells[row.id] != common:
            diffs = differences(ref_snap, snap)
            was, now = machine_cells(ref_snap, ref)["engine"], machine_cells(snap, row)["engine"]
            if was != now:
                diffs.append(f"engine: {was} → {now}")
            env_was, env_now = inherited_words(ref), inherited_words(row)
            if env_was != env_now:
                diffs.append(f"engine env inherited: {env_was or 'none'} → {env_now or 'none'}")
            out.append(f"{start_label(row)} ran on a different machine: " + "; ".join(diffs or ["see the table"]))
    return out
