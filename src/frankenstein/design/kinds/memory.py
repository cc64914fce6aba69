"""Memory designs: each start runs an arm (an engine replaying the workload, e.g. a long-context one, or a
command arm) and records its peak memory: the peak RSS of the engine's (or command's) process tree
(:mod:`frankenstein.measure.memory`), and each GPU's peak memory where the NVML sampler saw a GPU
(:mod:`frankenstein.measure.resources`). A memory design decides no adoption; a speed design cites it as a
gate (``[gates] memory = "ID"``), and ``adopt`` then needs its verdict ``passed``.

The rule (``[rule] kind = "memory"``, ``max_increase_mib``): per measure (RSS; GPU i), each arm's peak is the
largest over its ok starts, and the increase is the candidate's peak − the served arm's. ``passed`` when the
largest increase over the measures is at most ``max_increase_mib``; ``failed`` above it; ``invalid`` when an
arm has no ok start with a figure (absent is never zero).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.kinds.base import (
    Analysis,
    Description,
    Evidence,
    Failure,
    Progress,
    check_no_vetoes,
    check_stopping,
)
from frankenstein.design.kinds.speed import SpeedKind
from frankenstein.design.model import ARMS, DesignFile, MemoryRule, Registered, Slot
from frankenstein.design.start import StartOutcome, measure_start
from frankenstein.errors import DesignError
from frankenstein.measure.metrics import BUILTIN, Metric
from frankenstein.store import StartRow
from frankenstein.workload.trace import Workload

Peaks = dict[str, dict[str, float]]  # measure ("RSS", "GPU 0", ...) -> arm -> largest peak over ok starts (MiB)


def start_peaks(resources: dict[str, Any]) -> dict[str, float]:
    """A start's peak memory per measure, from its resources record: RSS, and each GPU the sampler saw."""
    out = {}
    rss = resources.get("rss")
    if isinstance(rss, dict) and rss.get("rss_mib_peak") is not None:
        out["RSS"] = float(rss["rss_mib_peak"])
    for g in resources.get("gpu") or []:
        if isinstance(g, dict) and g.get("memory_mib_peak") is not None:
            out[f"GPU {g['index']}"] = float(g["memory_mib_peak"])
    return out


def arm_peaks(rows: list[StartRow]) -> Peaks:
    """Per measure and arm, the largest peak over the arm's ok starts."""
    peaks: Peaks = {}
    for row in rows:
        if not row.ok:
            continue
        for measure, mib in start_peaks(row.resources).items():
            arm = peaks.setdefault(measure, {})
            arm[row.arm] = max(arm.get(row.arm, 0.0), mib)
    return peaks


def increases(peaks: Peaks) -> dict[str, float]:
    """candidate − served per measure both arms have (MiB)."""
    return {m: a["candidate"] - a["served"] for m, a in peaks.items() if all(arm in a for arm in ARMS)}


class MemoryKind(SpeedKind):
    name = "memory"
    adoptable = False
    measures_memory = True
    can_curtail = False

    def check(self, design: DesignFile, path: Path) -> None:
        if not isinstance(design.rule, MemoryRule):
            raise DesignError(
                'a memory design needs rule.kind = "memory" with max_increase_mib', path=path, field="rule.kind"
            )
        check_stopping(self.name, design, path)
        check_no_vetoes(self.name, design, path)

    def check_recipes(
        self,
        design: DesignFile,
        recipes: dict[str, ResolvedRecipe | None],
        path: Path,
        table: Mapping[str, Metric] = BUILTIN,
    ) -> None:
        return None

    def start(
        self,
        campaign: Campaign,
        reg: Registered,
        slot: Slot,
        recipe: ResolvedRecipe,
        workload: Workload | None,
        progress: Progress | None,
    ) -> StartOutcome:
        if workload is None:
            raise DesignError(f"design {reg.design_id}: a memory design with recipe arms needs a workload")
        return measure_start(recipe, workload, reg.design.replay, campaign.logs, progress, rss=True)

    def start_value(self, reg: Registered, out: StartOutcome) -> str:
        peaks = start_peaks(out.resources)
        return "".join(f" {m.replace(' ', '')}_peak_mib={v:.1f}" for m, v in peaks.items()) or " peak memory: -"

    def analyze(self, campaign: Campaign, evidence: Evidence) -> Analysis:
        reg, rows = evidence.reg, evidence.starts
        failures = [Failure(r.block, r.arm, r.status, r.reason) for r in rows if not r.ok]
        blocks = len({r.block for r in rows if r.ok})
        out = Analysis(reg=reg, verdict=None, blocks_done=blocks, failures=failures)
        peaks = arm_peaks(rows)
        out.outcome, out.why = memory_verdict(reg, peaks)
        out.lines = memory_lines(reg, peaks, out.outcome, out.why)
        return out

    def describe(self, reg: Registered) -> Description:
        return Description(
            measures="It measures peak memory per arm (the engine process tree's RSS, and each GPU's peak where "
            "a GPU was sampled), not speed: it is a gate for a speed design.",
            head="- Measured: peak memory per arm, the largest over each arm's ok starts.",
        )

    def went_wrong(self, word: str) -> bool:
        return word != "passed"

    def no_decision(self, word: str) -> str:
        return "a memory gate"


def memory_verdict(reg: Registered, peaks: Peaks) -> tuple[str, str]:
    """(passed | failed | invalid, why) under the registered memory rule."""
    rule = reg.design.rule
    assert isinstance(rule, MemoryRule)
    inc = increases(peaks)
    if not inc:
        return "invalid", "no memory figure recorded for both arms (RSS not sampled, no GPU seen by both)"
    measure, mib = max(inc.items(), key=lambda t: t[1])
    ok = mib <= rule.max_increase_mib
    return ("passed" if ok else "failed"), (
        f"the largest increase of peak memory is {mib:+.1f} MiB ({measure}), "
        f"{'within' if ok else 'over'} the {rule.max_increase_mib:g} MiB allowed"
    )


def memory_lines(reg: Registered, peaks: Peaks, word: str, why: str) -> list[str]:
    """Per measure: each arm's peak and the increase; then the verdict."""
    lines = ["peak memory per arm (largest over its ok starts, MiB):"]
    for measure, arms in sorted(peaks.items()):
        cells = ", ".join(f"{arm} {arms[arm]:.1f}" if arm in arms else f"{arm} -" for arm in ARMS)
        inc = increases({measure: arms}).get(measure)
        lines.append(f"  {measure}: {cells}" + ("" if inc is None else f", increase {inc:+.1f}"))
    rule = reg.design.rule
    assert isinstance(rule, MemoryRule)
    lines += [
        f"rule: memory (candidate at most {rule.max_increase_mib:g} MiB above served)",
        f"verdict: {word} ({why})",
    ]
    return lines


KIND = MemoryKind()
