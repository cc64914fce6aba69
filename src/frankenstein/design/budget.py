"""``frank plan DESIGN.toml [--budget 2h] --pilot DESIGN_ID``: a design file planned before registration.

Reads the design (arms, starts per arm, blocks, the workload's turns after ``max_turns``, rule, stopping)
and a pilot design of the same recipes run in the campaign: its start phases give the time of a start,
with the replay phase scaled by the new workload's turns over the pilot's (a start of a 22-turn workload
replays longer than one of 4); its blocks' primary-metric log ratios give the spread (or ``--sd``). For
the design's rule and the other block rules it prints: blocks (registered, and needed for the target
power at the planned effect), power at the planned effect, expected wall time (fixed, and curtailed at
the planned effect), and the smallest effect the budget can detect.

    budget_plan(campaign, design_path, pilot_id, ...) -> BudgetPlan
    budget_lines(plan) -> list[str]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from frankenstein.campaign import Campaign
from frankenstein.design import stats
from frankenstein.design.kinds.base import block_values
from frankenstein.design.model import DesignFile, load_design
from frankenstein.design.plan import (
    effect_gain,
    expected_curtailed_blocks,
    per_arm_times,
    pilot_spread,
    plan_blocks,
    power,
)
from frankenstein.design.registry import get
from frankenstein.design.rules import BlockRule, Direction, parse_rule
from frankenstein.design.timespent import TimeSummary, duration, summarize
from frankenstein.errors import AnalysisError
from frankenstein.measure import metrics
from frankenstein.shipped import expand
from frankenstein.workload.trace import load_trace

OTHER_RULES = ("all_blocks_better", "sign", "permutation")
SEARCH_SIMULATIONS = 400  # per power evaluation while searching the smallest detectable effect
SEARCH_BLOCKS = 200  # the smallest detectable effect is searched at no more blocks than this


@dataclass(frozen=True)
class StartTime:
    """Seconds per start of the new design, from the pilot: its total with the replay phase scaled."""

    seconds: float
    engine_seconds: float
    pilot_turns: int
    turns: int
    pilot_starts: int
    scale: float  # measured turns (after the warm-up) over the pilot's: what the replay phase is scaled by


@dataclass(frozen=True)
class BudgetRow:
    rule: BlockRule
    registered: bool  # the design's own rule
    needed: int | None  # blocks reaching the target power at the effect (None: not within max_blocks)
    power: float  # at the design's blocks
    seconds: float  # the design's blocks, fixed
    curtailed_blocks: float | None  # expected blocks under stopping = "curtail" at the effect
    smallest_effect: float | None  # the smallest effect detected with the target power within the budget


@dataclass(frozen=True)
class BudgetPlan:
    design: DesignFile
    path: Path
    pilot_id: str
    start: StartTime
    sd: float
    sd_source: str
    effect: float
    direction: Direction
    target: float
    budget_s: float | None
    rows: list[BudgetRow]

    @property
    def starts_per_block(self) -> int:
        return len(self.design.arms) * self.design.starts_per_arm

    @property
    def block_seconds(self) -> float:
        return self.start.seconds * self.starts_per_block

    @property
    def affordable(self) -> int | None:
        """Blocks that fit the budget."""
        return None if self.budget_s is None else int(self.budget_s // self.block_seconds)

    @property
    def searched(self) -> int | None:
        """Blocks the smallest detectable effect is computed at: those that fit, at most SEARCH_BLOCKS."""
        return None if self.affordable is None else min(self.affordable, SEARCH_BLOCKS)


def workload_turns(campaign: Campaign, design: DesignFile) -> int:
    """Turns a start replays: the workload's, cut at ``replay.max_turns``."""
    if design.workload is None:
        raise AnalysisError("the design names no workload: nothing to scale the pilot's replay time by")
    wl = Path(expand(design.workload))
    n = len(load_trace(wl if wl.is_absolute() else campaign.root / wl).turns)
    return min(n, design.replay.max_turns or n)


def measured(turns: int, design: DesignFile) -> int:
    """Turns the replay phase times: those after the warm-up (timed as its own phase)."""
    return max(1, turns - design.replay.warmup_turns)


def start_time(summary: TimeSummary, pilot: tuple[int, int], new: tuple[int, int]) -> StartTime:
    """Mean seconds of a start (over the pilot's arms): its replay phase and the gap after it (the store writing
    the start's turn rows) scaled by the measured turns; ``pilot`` and ``new``: (turns, measured turns)."""
    total, engine, between = per_arm_times(summary)
    scale = new[1] / pilot[1]
    replay = {a.arm: a.mean.get("replay", 0.0) for a in summary.arms}
    per_arm = [total[a] + replay[a] * (scale - 1) + between * scale for a in total]  # the gap writes each turn's rows
    return StartTime(
        sum(per_arm) / len(per_arm), sum(engine.values()) / len(engine), pilot[0], new[0], summary.starts, scale
    )


def pilot_sd(campaign: Campaign, pilot_id: str) -> tuple[float, str]:
    """The sd of the pilot's block log ratios (primary metric), at its one-sided 90% upper bound."""
    served, candidate, _ = block_values(campaign, get(campaign, pilot_id))
    blocks = sorted(set(served) & set(candidate))
    spread = pilot_spread(stats.log_ratios([served[b] for b in blocks], [candidate[b] for b in blocks]))
    return spread.sd_upper, f"pilot {pilot_id}: sd {spread.sd:.4g} over {spread.n_blocks} blocks, 90% upper bound"


def smallest_effect(rule: BlockRule, n: int, sd: float, direction: Direction, target: float) -> float | None:
    """The smallest effect (0.05 = 5%) with power >= target at n blocks, by bisection; None when even 50% is not."""
    if n < 1 or power(rule, n, sd, 0.5, direction, simulations=SEARCH_SIMULATIONS).value < target:
        return None
    lo, hi = 0.0, 0.5
    for _ in range(14):
        mid = (lo + hi) / 2
        if power(rule, n, sd, mid, direction, simulations=SEARCH_SIMULATIONS).value >= target:
            hi = mid
        else:
            lo = mid
    return hi


def _row(
    plan_kw: dict[str, float], rule: BlockRule, registered: bool, d: DesignFile, affordable: int | None
) -> BudgetRow:
    sd, effect, target, block_s = plan_kw["sd"], plan_kw["effect"], plan_kw["target"], plan_kw["block_s"]
    direction: Direction = "higher" if plan_kw["higher"] else "lower"
    needed = plan_blocks(rule, sd, effect, direction, target=target, max_blocks=max(40, d.blocks)).blocks
    gain = effect_gain(effect, direction)
    return BudgetRow(
        rule=rule,
        registered=registered,
        needed=needed,
        power=power(rule, d.blocks, sd, effect, direction).value,
        seconds=d.blocks * block_s,
        curtailed_blocks=expected_curtailed_blocks(rule, d.blocks, sd, gain) if d.blocks > 1 else None,
        smallest_effect=smallest_effect(rule, affordable, sd, direction, target) if affordable else None,
    )


def budget_plan(
    campaign: Campaign,
    design_path: Path,
    pilot_id: str,
    *,
    effect: float,
    budget_s: float | None = None,
    sd: float | None = None,
    target: float = 0.8,
) -> BudgetPlan:
    d = load_design(design_path)
    if not isinstance(d.rule, BlockRule):
        raise AnalysisError(f"{design_path}: rule {d.rule.kind!r} is not a block rule: frank plan plans block rules")
    pilot = get(campaign, pilot_id)
    starts = campaign.store.starts_of(pilot_id)
    if starts and not any(s.ok for s in starts):
        raise AnalysisError(
            f"--pilot: none of design {pilot_id}'s {len(starts)} starts ran, so it times nothing "
            f"(the first: {first_line(starts[0].reason)})"
        )
    summary = summarize(starts)
    if not summary.starts:
        raise AnalysisError(f"--pilot: design {pilot_id} has no start with recorded phases to time a start from")
    pilot_n, n = workload_turns(campaign, pilot.design), workload_turns(campaign, d)
    st = start_time(summary, (pilot_n, measured(pilot_n, pilot.design)), (n, measured(n, d)))
    use_sd, source = (sd, "--sd") if sd is not None else pilot_sd(campaign, pilot_id)
    direction = d.direction or metrics.direction(d.primary_metric)
    plan = BudgetPlan(d, design_path, pilot_id, st, use_sd, source, effect, direction, target, budget_s, [])
    kw = {"sd": use_sd, "effect": effect, "target": target, "block_s": plan.block_seconds}
    kw["higher"] = float(direction == "higher")
    others = [*OTHER_RULES, "order_adjusted"] if d.layout == "paired" and d.order != "independent" else OTHER_RULES
    rules = [(d.rule, True)] + [(parse_rule(k, alpha=d.rule.alpha), False) for k in others if k != d.rule.kind]
    rows = [_row(kw, r, own, d, plan.searched) for r, own in rules]
    return BudgetPlan(d, design_path, pilot_id, st, use_sd, source, effect, direction, target, budget_s, rows)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def budget_lines(p: BudgetPlan) -> list[str]:
    d, st = p.design, p.start
    lines = [
        f"design {p.path}: {len(d.arms)} arms × {d.starts_per_arm} start(s), {d.blocks} blocks, "
        f"{st.turns} turns per start, rule {d.rule.kind}, stopping {d.stopping}",
        f"a start: about {duration(st.seconds)} ({duration(st.engine_seconds)} engine start), from pilot {p.pilot_id}'s "
        f"{st.pilot_starts} starts of {st.pilot_turns} turns, replay scaled ×{st.scale:.2f} (turns after the warm-up); "
        f"a block: about {duration(p.block_seconds)}",
        f"spread: sd {p.sd:.4g} of the block log ratio ({p.sd_source}); planned effect {p.effect:.1%}, "
        f"power target {p.target:.0%}",
    ]
    if p.budget_s is not None:
        at = f" (smallest effect computed at {p.searched})" if p.searched != p.affordable else ""
        lines.append(f"budget {duration(p.budget_s)}: {p.affordable} blocks fit{at}")
    lines.append("")
    head = f"{'rule':<26} {'blocks':>6} {'needed':>6} {'power':>6} {'wall (fixed)':>14} {'curtailed':>22}"
    lines.append(head + ("  smallest effect in budget" if p.budget_s is not None else ""))
    for r in p.rows:
        name = r.rule.kind + (" (registered)" if r.registered else "")
        curtailed = (
            "-"
            if r.curtailed_blocks is None
            else f"{r.curtailed_blocks:.1f} blocks, {duration(r.curtailed_blocks * p.block_seconds)}"
        )
        needed = "-" if r.needed is None else str(r.needed)
        line = f"{name:<26} {d.blocks:>6} {needed:>6} {r.power:>6.0%} {duration(r.seconds):>14} {curtailed:>22}"
        lines.append(line + (f"  {_pct(r.smallest_effect)}" if p.budget_s is not None else ""))
    lines += _curtail_advice(p)
    lines.append("Model: independent normal block log ratios (docs/statistics.md); times: the pilot's phases.")
    return lines


def _curtail_advice(p: BudgetPlan) -> list[str]:
    """Recommend stopping = "curtail" where the registered rule can stop early (it never changes the verdict)."""
    own = p.rows[0]
    if p.design.stopping == "curtail" or own.curtailed_blocks is None or own.curtailed_blocks >= p.design.blocks - 0.05:
        return []
    saved = (p.design.blocks - own.curtailed_blocks) * p.block_seconds
    return [
        f'recommended: stopping = "curtail" (same verdict, same error rates): about {duration(saved)} '
        f"saved at the planned effect ({own.curtailed_blocks:.1f} of {p.design.blocks} blocks expected)"
    ]


def first_line(reason: str | None) -> str:
    """A failed start's reason, its first line (an engine's log tail follows it)."""
    return (reason or "no reason recorded").splitlines()[0]


def parse_budget(text: str) -> float:
    """'2h', '30m', '90s', '1h30m' -> seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    total, number = 0.0, ""
    for ch in text.strip().lower():
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in units and number:
            total += float(number) * units[ch]
            number = ""
        else:
            raise AnalysisError(f"--budget {text!r}: expected a duration like 2h, 30m, 90s or 1h30m")
    if number or not math.isfinite(total) or total <= 0:
        raise AnalysisError(f"--budget {text!r}: expected a duration like 2h, 30m, 90s or 1h30m")
    return total
