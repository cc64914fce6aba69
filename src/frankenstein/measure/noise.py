"""The noise guard: was the machine busy during a start, and is the served arm's spread too large
for the effect the rule can resolve?

Why: on a shared machine the served arm of one design swung 13 → 285 ms/token across blocks with no
warning. The 1-minute load average lags a start of a few seconds by far, so ``LoadSampler`` also
samples the kernel's instantaneous run queue (``procs_running`` in /proc/stat) through the start; a
mean run queue above the core count means runnable threads waited for a CPU while we timed.

Public API:
- ``LoadSampler``: context manager around any start (speed, fidelity, agent, screen) → ``LoadRecord``.
- ``judge_load(label, record, own_threads)`` → a warning naming the start, or None; the arm's own engine
  threads are expected load, not a busy machine.
- ``judge_spread(values, resolvable, metric)`` → a warning when the served arm's start-to-start spread
  (sd of ln) exceeds the effect the rule can resolve, or None.
- ``resolvable_effect(threshold, geomean_ratio)``: the effect to compare against.
- ``other_engines(names, exclude)`` and ``quiet_lines(snapshot, engines)``: what ``frank doctor`` can say.
- ``suggested_threads(cores)``: engine threads that leave a core for the client and the OS.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from pydantic import BaseModel, ConfigDict

from frankenstein.measure.machine import MachineSnapshot, load_avg


class LoadRecord(BaseModel):
    """Load seen through one start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cores: int
    wall_s: float
    samples: int
    runnable_mean: float | None
    runnable_max: int | None
    loadavg_before: tuple[float, float, float] | None
    loadavg_after: tuple[float, float, float] | None

    @property
    def overloaded(self) -> bool:
        """More runnable threads than cores on average, or a 1-minute load average above the cores."""
        return self.overloaded_beyond(0)

    def overloaded_beyond(self, own_threads: int) -> bool:
        """Overloaded once the start's own expected load (its engine's ``own_threads``) is taken off: the
        run queue, or the 1-minute load average, above the cores by more than the arm's own threads."""
        limit = self.cores + own_threads
        by_queue = self.runnable_mean is not None and self.runnable_mean > limit
        by_avg = self.loadavg_after is not None and self.loadavg_after[0] > limit
        return by_queue or by_avg


def procs_running() -> int | None:
    """Runnable threads now (the kernel's run queue, all CPUs), not counting the reader itself."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return max(int(line.split()[1]) - 1, 0)
    except (OSError, ValueError):
        pass
    return None


class LoadSampler:
    """``with LoadSampler() as s: <start>`` then ``s.record``; samples the run queue in a thread."""

    def __init__(self, interval_s: float = 0.2, cores: int | None = None) -> None:
        self.interval_s = interval_s
        self.cores = cores or os.cpu_count() or 1
        self._stop = threading.Event()
        self._queue: list[int] = []
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._before: tuple[float, float, float] | None = None
        self.record: LoadRecord | None = None

    def __enter__(self) -> LoadSampler:
        self._t0 = time.monotonic()
        self._before = load_avg()
        self._thread = threading.Thread(target=self._loop, name="load-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            n = procs_running()
            if n is not None:
                self._queue.append(n)
            self._stop.wait(self.interval_s)

    @property
    def samples(self) -> int:
        """How many run-queue samples the window holds so far."""
        return len(self._queue)

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        n = procs_running()  # the window's end too: a start shorter than one interval still has two samples
        if n is not None:
            self._queue.append(n)
        q = self._queue
        self.record = LoadRecord(
            cores=self.cores,
            wall_s=time.monotonic() - self._t0,
            samples=len(q),
            runnable_mean=sum(q) / len(q) if q else None,
            runnable_max=max(q) if q else None,
            loadavg_before=self._before,
            loadavg_after=load_avg(),
        )


def judge_load(label: str, record: LoadRecord, own_threads: int = 0) -> str | None:
    """A one-line warning naming the start when the machine was busier than its cores beyond the start's
    own ``own_threads`` (its engine's CPU threads: a ``--threads 2`` arm on 2 cores is not a busy machine),
    else None."""
    if not record.overloaded_beyond(own_threads):
        return None
    queue = "n/a" if record.runnable_mean is None else f"mean {record.runnable_mean:.1f}, max {record.runnable_max}"
    la = "n/a"
    if record.loadavg_before and record.loadavg_after:
        la = f"{record.loadavg_before[0]:.2f} → {record.loadavg_after[0]:.2f}"
    own = f" and the arm's own {own_threads} engine threads" if own_threads else ""
    return (
        f"{label}: the machine was busier than its {record.cores} cores{own} during this start "
        f"(run queue {queue}; 1-min load average {la}); its timings may include waiting for a CPU"
    )


def resolvable_effect(threshold: float | None, geomean_ratio: float | None) -> float | None:
    """The effect (as a ratio − 1) a design claims to resolve: its practical threshold if it registered
    one, else the geometric-mean effect it observed."""
    if threshold:
        return abs(threshold)
    if geomean_ratio is not None and geomean_ratio > 0:
        return abs(geomean_ratio - 1.0)
    return None


def log_spread(values: Sequence[float]) -> float | None:
    """Sample standard deviation of ln(value): start-to-start spread on the scale the analysis uses."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return statistics.stdev(logs) if len(logs) >= 2 else None


def judge_spread(values: Sequence[float], resolvable: float | None, metric: str) -> str | None:
    """Warn when the served arm's spread (sd of ln across its starts) exceeds ln(1 + resolvable)."""
    spread = log_spread(values)
    if spread is None or resolvable is None or resolvable <= 0:
        return None
    limit = math.log1p(resolvable)
    if spread <= limit:
        return None
    varies, effect = share_pair(math.expm1(spread), resolvable)
    return (
        f"served arm's {metric} varies {varies} start to start (sd of ln over "
        f"{len(values)} starts), more than the {effect} effect the rule resolves here; "
        "a quieter machine or more blocks would tell them apart"
    )


def share_pair(larger: float, smaller: float) -> tuple[str, str]:
    """Two shares as percentages, each to two significant digits (so neither reads '0%' or '0.0%')."""
    return share(larger), share(smaller)


def share(x: float) -> str:
    """A share as a percentage to two significant digits: 0.00023 -> '0.023%', 0.0147 -> '1.5%'."""
    value = abs(x) * 100
    places = max(0, 1 - math.floor(math.log10(value))) if value > 0 else 1
    return f"{x * 100:.{places}f}%"


def other_engines(names: Sequence[str], exclude: Sequence[int] = ()) -> list[tuple[int, str]]:
    """(pid, command) of engine processes running now, except ``exclude``: those whose first two command words
    hold one of ``names`` (every adapter's ``process_names``: :func:`frankenstein.engines.process_names`)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) in exclude:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        head = " ".join(cmd.split()[:2])
        if any(name in head for name in names):
            out.append((int(p.name), cmd[:120]))
    return sorted(out)


def quiet_lines(snap: MachineSnapshot, engines: Sequence[tuple[int, str]]) -> list[str]:
    """What ``frank doctor`` says about noise: one line per concern, or one line saying it looks quiet."""
    cores = snap.cpu_cores or 1
    lines = []
    if snap.load_avg is not None and snap.load_avg[0] > 0.5 * cores:
        lines.append(f"busy: 1-min load average {snap.load_avg[0]:.2f} on {cores} cores")
    if snap.cpu_governor is not None and snap.cpu_governor != "performance":
        lines.append(f"CPU governor is {snap.cpu_governor!r}, not 'performance': clocks may vary between starts")
    for pid, cmd in engines:
        lines.append(f"another engine is running: pid {pid}: {cmd}")
    if not lines:
        gov = snap.cpu_governor or "not readable"
        la = "n/a" if snap.load_avg is None else f"{snap.load_avg[0]:.2f}"
        lines.append(f"machine looks quiet: load {la} on {cores} cores, governor {gov}, no other engines")
    return lines


def suggested_threads(cores: int | None = None) -> int:
    """Engine threads that do not oversubscribe: one core left for the client, the sampler and the OS."""
    n = cores or os.cpu_count() or 1
    return max(1, n - 1)
