"""Speed designs: each start replays the workload against a fresh engine start and records the
server's own timings; the registered block rule (sign, permutation, all blocks better) decides on the
per-block log ratio of the primary metric. Secondary metrics are summarised by their geometric-mean
ratio and labelled "reported, not tested".

Per block the start-level value of each arm is the mean of that arm's ok starts in the block. A failed
or invalid start is handled by the registered failure policy: ``drop_block`` leaves its block out (and
says so), ``invalidate`` makes the verdict invalid. A curtailed run is decided on a completion of the
remaining blocks with no effect, which gives the same word as any completion would.

:class:`SpeedKind` is shared by the A/A and screen kinds, which differ only in data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design import rules, stats
from frankenstein.design.kinds.base import (
    Analysis,
    Description,
    Progress,
    Evidence,
    can_still_change,
    check_primary_metric,
    check_prediction,
    check_vetoes,
    dropped_blocks,
    metric_scope,
    veto_results,
)
from frankenstein.design.model import DesignFile, FidelityRule, MemoryRule, Registered, Slot
from frankenstein.design.rules import DataKind
from frankenstein.design.start import StartOutcome, measure_start
from frankenstein.design.table import format_family
from frankenstein.errors import DesignError
from frankenstein.measure.noise import judge_spread, resolvable_effect
from frankenstein.measure.metrics import BUILTIN, Metric
from frankenstein.measure.usermetrics import start_values
from frankenstein.workload.trace import Turn, Workload


class SpeedKind:
    name = "speed"
    adoptable = True
    measures_fidelity = False
    measures_memory = False
    uses_workload = True
    same_arms = False
    can_curtail = True
    data: DataKind = "ratio"  # what the block rule tests: per-block log ratios of the primary metric

    def check(self, design: DesignFile, path: Path) -> None:
        if design.layout == "unpaired":
            check_unpaired_rule(design, path)
        else:
            check_block_rule(design, path, self.data)
        if design.family:
            check_family(design, path)

    def check_recipes(
        self,
        design: DesignFile,
        recipes: dict[str, ResolvedRecipe | None],
        path: Path,
        table: Mapping[str, Metric] = BUILTIN,
    ) -> None:
        check_signed_primary(design, path, self.data, table)
        check_primary_metric(design, recipes, path, table)
        check_vetoes(design, path, table)
        check_prediction(design, path, table)

    def check_workload(self, turns: list[Turn], workload: Path, path: Path) -> None:
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
            raise DesignError(f"design {reg.design_id}: a {self.name} design with recipe arms needs a workload")
        out = measure_start(recipe, workload, reg.design.replay, campaign.logs, progress)
        out.metrics.update(start_values(reg.frozen.metrics, out.rows, *out.scrapes.flat()))
        return out

    def start_value(self, reg: Registered, out: StartOutcome) -> str:
        return primary_value(reg, out)

    def analyze(self, campaign: Campaign, evidence: Evidence) -> Analysis:
        if evidence.reg.design.layout == "unpaired":
            return analyze_unpaired(evidence, self.data)
        if evidence.reg.design.family:
            return analyze_family(evidence)
        return analyze_blocks(evidence)

    def describe(self, reg: Registered) -> Description:
        m = reg.design.primary_metric
        return Description(measures=f"It measures {metric_scope(m, reg.metric(m))}.", head=metric_head(reg))

    def went_wrong(self, word: str) -> bool:
        return word != "confirmed"

    def no_decision(self, word: str) -> str:
        return "not adopted" if word == "confirmed" else "no adoption asked"


def check_warmup(design: DesignFile, turns: list[Turn], path: Path) -> None:
    """Refuse warm-up turns that cover every turn a start replays (``min(len(workload), max_turns)``):
    no turn would be measured."""
    r = design.replay
    replayed = min(len(turns), r.max_turns) if r.max_turns else len(turns)
    if r.warmup_turns >= replayed:
        raise DesignError(
            f"{r.warmup_turns} warm-up turns of the {replayed} turns replayed leave no measured turn; "
            "lower warmup_turns (or use a longer workload)",
            path=path,
            field="replay.warmup_turns",
        )


def check_signed_primary(design: DesignFile, path: Path, data: DataKind, table: Mapping[str, Metric] = BUILTIN) -> None:
    """Refuse a primary metric that can be zero or negative (``signed`` in the registry) under a rule that tests
    ratios: the geometric-mean ratio and the log ratio per block of such a metric mean nothing. A kind
    whose rule tests differences (``data = "difference"``) may register it."""
    m = design.primary_metric
    metric = table.get(m)
    if metric is None or not metric.signed or data != "ratio":
        return
    raise DesignError(
        f"{m!r} can be zero or negative ({metric.meaning}), "
        f"and a {design.kind} design's rule {design.rule.kind!r} tests per-block ratios of its primary metric "
        "(log ratio, geometric mean), which mean nothing for such a metric; test a metric that is "
        f"positive (e.g. pre_ms or e2e_ms) and list {m} under secondary (reported per arm, with its percentiles)",
        path=path,
        field="primary_metric",
    )


def check_block_rule(design: DesignFile, path: Path, data: DataKind = "ratio") -> None:
    """A block rule (not the fidelity rule) whose smallest reachable p can reach its alpha in ``blocks``."""
    rule = design.rule
    if isinstance(rule, FidelityRule | MemoryRule):
        raise DesignError(f'rule "{rule.kind}" is only for {rule.kind} designs', path=path, field="rule.kind")
    shape = rule.shape_problem(design.blocks, design.order, design.failure_policy)
    if shape:
        raise DesignError(shape[1], path=path, field=shape[0])
    reason = rules.unreachable_reason(rule, design.blocks) or rules.check_computable(rule, design.blocks, data)
    if reason:
        raise DesignError(reason, path=path, field="blocks")


def check_unpaired_rule(design: DesignFile, path: Path) -> None:
    """An unpaired design's rule must be a permutation test that its starts can take to alpha."""
    rule = design.rule
    if isinstance(rule, FidelityRule | MemoryRule):
        raise DesignError(f'rule "{rule.kind}" is only for {rule.kind} designs', path=path, field="rule.kind")
    reason = rules.unpaired_reason(rule, design.starts_per_arm, design.starts_per_arm)
    if reason:
        field = "rule.kind" if rule.test_name != "permutation" else "starts_per_arm"
        raise DesignError(reason, path=path, field=field)


def check_family(design: DesignFile, path: Path) -> None:
    """A family needs a rule that looks for better, blocks enough for Holm's first level, and no curtailment."""
    if design.stopping != "none":
        raise DesignError('a family of candidates runs every block: stopping = "none"', path=path, field="stopping")
    rule = design.rule
    if isinstance(rule, FidelityRule | MemoryRule) or rule.looks_for() != "better":
        why = f"a family screens for candidates better than served; the {rule.kind} rule does not look for better"
        raise DesignError(why, path=path, field="rule.kind")
    reason = rules.family_reason(rule, design.blocks, len(design.candidates))
    if reason:
        raise DesignError(reason, path=path, field="blocks")


def analyze_family(ev: Evidence) -> Analysis:
    """Each candidate against served in the blocks where every arm has a value, Holm across the family
    (rules.decide_family); the outcome is "confirmed" when one passes, else "no candidate"."""
    reg, d = ev.reg, ev.reg.design
    values, failures = ev.values(d.primary_metric)
    bad = dropped_blocks(reg, failures)
    blocks = sorted(b for b, arms in values.items() if b not in bad and all(a in arms for a in d.arm_names))
    out = Analysis(reg=reg, verdict=None, blocks_done=len(blocks), failures=failures)
    out.dropped = [f.dropped_note() for f in failures] if d.failure_policy == "drop_block" else []
    if failures and d.failure_policy == "invalidate":
        out.invalidated = f"{len(failures)} failed start(s) and the failure policy is 'invalidate'"
    served = [values[b]["served"] for b in blocks]
    candidates = {arm: [values[b][arm] for b in blocks] for arm in d.candidates}
    family = rules.decide_family(d.rule, served, candidates, reg.frozen.direction, [b + 1 for b in blocks])  # type: ignore[arg-type]
    out.outcome, out.why = family.word, family.why
    out.lines = format_family(family, d.rule)  # type: ignore[arg-type]
    out.per_block[d.primary_metric] = values
    return out


def primary_value(reg: Registered, out: StartOutcome) -> str:
    metric = out.metrics.get(reg.design.primary_metric)
    return f" {reg.design.primary_metric}=" + ("-" if metric is None else f"{metric:.4f}")


def metric_head(reg: Registered) -> str:
    m = reg.design.primary_metric
    user = f"{reg.unit(m)}, a user metric: {reg.frozen.metrics[m].source}; " if m in reg.frozen.metrics else ""
    return f"- Primary metric: `{m}` ({user}{reg.frozen.direction} is better)."


def analyze_blocks(ev: Evidence) -> Analysis:
    """The block rule over the primary metric's per-block log ratios, and the secondary metrics beside it."""
    reg, d = ev.reg, ev.reg.design
    served, candidate, notes = ev.blocks()
    _, failures = ev.values(d.primary_metric)
    blocks = sorted(served)
    out = Analysis(reg=reg, verdict=None, blocks_done=len(blocks), dropped=notes, failures=failures)
    if failures and d.failure_policy == "invalidate":
        out.invalidated = f"{len(failures)} failed start(s) and the failure policy is 'invalidate'"
    s, c = [served[b] for b in blocks], [candidate[b] for b in blocks]
    out.verdict = rules.evaluate(d.rule, s, c, reg.frozen.direction, blocks=[b + 1 for b in blocks])  # type: ignore[arg-type]
    _curtailed(out, s, c)
    out.incomplete = _incomplete(out, len(blocks))
    for metric in [d.primary_metric, *d.secondary]:
        out.per_block[metric] = ev.values(metric)[0]
    for metric in d.secondary:
        out.secondary[metric] = _secondary(out.per_block[metric])
    out.speculation = ev.speculation()
    out.vetoes = veto_results(ev, blocks)
    spread = spread_warning(reg, s, out.verdict)
    if spread:
        out.warnings.append(spread)
    alike = order_warning(reg)
    if alike:
        out.warnings.append(alike)
    return out


def order_warning(reg: Registered) -> str | None:
    """Every block registered the same arm order (drawn independently, all five blocks served first is a 1/16
    event): an order effect cannot be told from the part's effect."""
    orders = {tuple(o) for o in reg.schedule}
    if len(reg.schedule) < 2 or len(orders) > 1:
        return None
    drawn = "independently" if reg.order == "independent" else "balanced"
    return (
        f"every block runs its arms in the same order ({', '.join(reg.schedule[0])}; drawn {drawn}): an order "
        "effect (a warmer machine, a filled page cache) would look like an effect of the part"
    )


def analyze_unpaired(ev: Evidence, data: DataKind) -> Analysis:
    """The exact two-sample test over every ok start's primary metric (rules.evaluate_unpaired).

    A failed start is left out of its arm under ``drop_block`` (the test then splits the starts that
    remain) and makes the verdict invalid under ``invalidate``."""
    reg, d = ev.reg, ev.reg.design
    rows = ev.starts
    per_arm: dict[str, list[float]] = {"served": [], "candidate": []}
    for row in rows:
        value = row.metrics.get(d.primary_metric) if row.ok else None
        if value is not None and row.arm in per_arm:
            per_arm[row.arm].append(float(value))
    _, failures = ev.values(d.primary_metric)
    done = len(rows) >= len(reg.slots())
    out = Analysis(reg=reg, verdict=None, blocks_done=int(done), failures=failures)
    out.dropped = [f"{f.arm} start {f.status} ({f.reason}); left out of its arm" for f in failures]
    if failures and d.failure_policy == "invalidate":
        out.invalidated = f"{len(failures)} failed start(s) and the failure policy is 'invalidate'"
    direction = reg.frozen.direction
    out.verdict = rules.evaluate_unpaired(d.rule, per_arm["served"], per_arm["candidate"], direction, data)  # type: ignore[arg-type]
    for metric in [d.primary_metric, *d.secondary]:
        out.per_block[metric] = ev.values(metric)[0]
    for metric in d.secondary:
        out.secondary[metric] = _secondary(out.per_block[metric])
    return out


def spread_warning(reg: Registered, served: list[float], verdict: rules.Verdict | None) -> str | None:
    """The noise guard's spread check: the served arm's start-to-start spread against the effect the
    rule resolves (its ``min_effect``, else the effect observed)."""
    threshold = reg.design.rule.min_effect if isinstance(reg.design.rule, rules.BlockRule) else None
    effect = resolvable_effect(threshold, verdict.geomean_ratio if verdict is not None else None)
    return judge_spread(served, effect, reg.design.primary_metric)


def _incomplete(out: Analysis, analysed: int) -> str | None:
    """'k of n blocks' while registered blocks remain to run and neither curtailment nor the failure policy
    has decided: the rule's word over fewer blocks is no verdict (at 2 blocks it cannot fire at all)."""
    d = out.reg.design
    remaining = rules.remaining_blocks(d.blocks, analysed, len(dropped_blocks(out.reg, out.failures)))
    curtailed = out.verdict is not None and out.verdict.reason.startswith("curtailed")
    if remaining <= 0 or curtailed or out.invalidated:
        return None
    return f"{analysed} of {d.blocks} blocks"


def _curtailed(out: Analysis, served: list[float], candidate: list[float]) -> None:
    """A curtailed run stopped because no remaining blocks could change the verdict: every completion
    of the remaining blocks gives the same word (the rule's :func:`~frankenstein.design.rules.curtailed`).
    Remaining = registered − analysed − dropped: a block the failure policy dropped never comes back."""
    d = out.reg.design
    dropped = dropped_blocks(out.reg, out.failures)
    remaining = rules.remaining_blocks(d.blocks, len(served), len(dropped))
    if d.stopping != "curtail" or remaining <= 0 or not served or out.invalidated:
        return
    if can_still_change(out.reg, served, candidate, remaining):
        return
    g = rules.gains(stats.log_ratios(served, candidate), out.reg.frozen.direction)
    dec = rules.curtailed(d.rule, g, remaining, out.reg.frozen.direction)  # type: ignore[arg-type]
    if dec is None or out.verdict is None:
        return
    also = f", {len(dropped)} dropped" if dropped else ""
    reason = (
        f"curtailed after {len(served)} of {d.blocks} blocks{also}, {remaining} not run: "
        "no remaining blocks could change the verdict"
    )
    out.verdict = out.verdict.model_copy(
        update={
            "word": dec.word,
            "says": out.verdict.rule.phrase(dec.word),
            "reason": reason,
            "p": dec.p,  # the registered test's p over every completion, not a shorter test's
            "p_bound": dec.bound,
            "p_float": None if dec.p is None else float(dec.p),
            "p_scipy": None,
        }
    )


def _secondary(vals: dict[int, dict[str, float]]) -> dict[str, Any]:
    """Geometric-mean ratio over the blocks where both arms have the metric; a metric that only one arm
    has, or that is not above zero in some block of both arms (``post_ms`` can be), is reported per arm (its
    mean over blocks) with the reason, never as a ratio."""
    pairs = [(a["served"], a["candidate"]) for a in vals.values() if "served" in a and "candidate" in a]
    pairs = [(s, c) for s, c in pairs if s > 0 and c > 0]
    if not pairs:
        per_arm = {arm: [v[arm] for v in vals.values() if arm in v] for arm in ("served", "candidate")}
        only = {arm: sum(xs) / len(xs) for arm, xs in per_arm.items() if xs}
        why = "only one arm has it" if len(only) < 2 else "a ratio needs values above zero in both arms"
        return {"blocks": 0, "geomean_ratio": None, **({"per_arm": only, "no_ratio": why} if only else {})}
    logs = [math.log(c / s) for s, c in pairs]
    return {"blocks": len(pairs), "geomean_ratio": stats.geomean_ratio(logs)}


KIND = SpeedKind()
