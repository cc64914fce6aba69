"""The planner: the spread seen in a pilot, and how many blocks a rule needs to detect an effect.

Model (an assumption, stated wherever a plan is printed): the per-block log ratios are independent
and normal with mean d (the effect on the log scale) and standard deviation sd (the spread of a
block's log ratio, estimated from an A/A pilot). Under it:

- all_blocks_better and sign tests have exact power: a block favours the candidate with probability
  q = Phi(d / sd), and power = P(Binomial(n, q) >= the critical count);
- permutation tests (and any rule with min_effect) are simulated with a fixed seed, through the same
  ``rules.decide`` that gives verdicts, exactly up to EXACT_SIM_BLOCKS blocks and with the normal
  limit of the sign-flip distribution beyond (labelled so).

    pilot_spread(log_ratios)                        -> Spread
    effect_gain(effect, direction, worse=False)     an effect (0.05 = 5%) on the log-gain scale
    power(rule, n, sd, effect, direction, ...)      -> Power at n blocks
    plan_blocks(rule, sd, effect, direction, ...)   -> PlanRow: the fewest blocks reaching the target
    make_plan(rules, sd, effect, direction, ...)    -> Plan
    plan_from_options(kinds, pilot=..., sd=..., ...) what `frank plan` runs (reads the pilot CSV)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

import numpy as np

from frankenstein.design import stats
from frankenstein.design.blockcsv import read_blocks_csv
from frankenstein.design.phases import ENGINE_START
from frankenstein.design.timespent import TimeSummary, duration
from frankenstein.design.rules import (
    BlockRule,
    Direction,
    can_change,
    decide,
    effect_thresholds,
    min_blocks,
    parse_rule,
    smallest_p,
)
from frankenstein.errors import AnalysisError

EXACT_SIM_BLOCKS = 24
UPPER_BOUND_LEVEL = 0.90
SIM_BOUND_LEVEL = 0.95  # a simulated power reaches the target only when this lower bound does


@dataclass(frozen=True)
class Spread:
    """What an A/A pilot says about noise. ``sd`` is of the block log ratio; a start's own spread
    is about sd / sqrt(2), since a block's log ratio is the difference of two starts."""

    n_blocks: int
    mean_log_ratio: float
    sd: float
    sd_upper: float  # one-sided UPPER_BOUND_LEVEL bound (chi-square, normal model)
    start_sd: float
    aa_p: Fraction | None  # exact two-sided sign-flip p that the A/A arms differ (None: too many blocks)


@dataclass(frozen=True)
class Power:
    """Power at n blocks; ``low``: for a simulated power, its one-sided SIM_BOUND_LEVEL lower confidence
    bound (Clopper-Pearson over the simulated designs), None when the power is exact."""

    value: float
    method: str
    low: float | None = None

    @property
    def assured(self) -> float:
        """What a plan may count on: the exact power, or the simulation's lower bound."""
        return self.value if self.low is None else self.low


@dataclass(frozen=True)
class PlanRow:
    rule: BlockRule
    blocks: int | None  # None: no block count up to max_blocks reaches the target
    power: float  # at ``blocks``, or the best seen when blocks is None
    best_blocks: int | None
    method: str
    power_low: float | None = None  # a simulated power's lower confidence bound (None: exact)


@dataclass(frozen=True)
class Plan:
    sd: float
    effect: float
    direction: Direction
    target: float
    max_blocks: int
    rows: list[PlanRow]
    spread: Spread | None = None
    upper_rows: list[PlanRow] = field(default_factory=list)  # at spread.sd_upper

    @property
    def recommended(self) -> list[PlanRow]:
        """The rows to act on: at the pilot sd's upper confidence bound when there is a pilot (a plan
        at the pilot's own sd reaches its power in only about half of such pilots), else at the sd given."""
        return self.upper_rows or self.rows


def pilot_spread(log_ratios: Sequence[float]) -> Spread:
    """Mean and sd of A/A block log ratios, a chi-square upper bound on sd, and whether the arms differ."""
    n = len(log_ratios)
    if n < 2:
        raise AnalysisError(f"a pilot needs at least 2 blocks to estimate a spread, found {n}")
    x = np.asarray(log_ratios, dtype=float)
    sd = float(np.std(x, ddof=1))
    if sd == 0:
        raise AnalysisError("the pilot's log ratios are all equal: no spread to plan with")
    from scipy import stats as sps  # ~1.4 s to import: only where a plan needs it, never in frank run

    upper = sd * math.sqrt((n - 1) / sps.chi2.ppf(1 - UPPER_BOUND_LEVEL, n - 1))
    aa_p = stats.sign_flip_p(list(x), "two-sided") if n <= stats.MAX_ENUMERATED_BLOCKS else None
    return Spread(n, float(x.mean()), sd, upper, sd / math.sqrt(2), aa_p)


def effect_gain(effect: float, direction: Direction, worse: bool = False) -> float:
    """The effect as a positive log gain: 5% better is ln(1/0.95) when lower is better (times),
    ln(1.05) when higher is better (throughput); ``worse`` swaps the two."""
    if effect <= 0:
        raise AnalysisError(f"effect must be positive (0.05 = 5%), got {effect:g}")
    shrink = (direction == "lower") != worse
    if shrink and effect >= 1:
        raise AnalysisError(f"an effect of {effect:g} would make the metric zero or negative")
    return -math.log1p(-effect) if shrink else math.log1p(effect)


def _harm_target(rule: BlockRule) -> bool:
    return rule.looks_for() == "worse"


def power(
    rule: BlockRule,
    n: int,
    sd: float,
    effect: float,
    direction: Direction,
    *,
    simulations: int = 2000,
    seed: int = 1,
    draws: np.ndarray | None = None,
) -> Power:
    """Probability that the rule fires (confirmed, or harm shown for harm rules) with n blocks when
    the true effect is ``effect`` in the direction the rule looks for."""
    if smallest_p(rule, n) > stats.exact_fraction(rule.alpha):
        return Power(0.0, "unreachable")
    gain = effect_gain(effect, direction, worse=_harm_target(rule))
    from scipy import stats as sps  # ~1.4 s to import: only where a plan needs it, never in frank run

    exact = rule.exact_power(n, float(sps.norm.cdf(gain / sd)))
    if exact is not None:
        return Power(exact, "exact (normal model)")
    if draws is None:
        draws = np.random.default_rng(seed).standard_normal((simulations, n))
    g = (gain + sd * draws[:, :n]) * (-1 if _harm_target(rule) else 1)
    return _simulated_power(rule, g, direction, seed)


def _simulated_power(rule: BlockRule, g: np.ndarray, direction: Direction, seed: int) -> Power:
    sims, n = g.shape
    want = "harm shown" if _harm_target(rule) else "confirmed"
    if n <= EXACT_SIM_BLOCKS:
        hits = sum(decide(rule, list(row), direction).word == want for row in g)
        return Power(hits / sims, f"simulation: {sims} designs, seed {seed}", _lower_bound(hits, sims))
    hits = int(_normal_limit_fires(rule, g, direction, want).sum())
    return Power(
        hits / sims,
        f"simulation: {sims} designs, seed {seed}; normal limit of the sign-flip test above {EXACT_SIM_BLOCKS} blocks",
        _lower_bound(hits, sims),
    )


def _lower_bound(hits: int, sims: int) -> float:
    """One-sided SIM_BOUND_LEVEL Clopper-Pearson lower bound of a simulated proportion."""
    if hits == 0:
        return 0.0
    from scipy import stats as sps  # ~1.4 s to import: only where a plan needs it, never in frank run

    return float(sps.beta.ppf(1 - SIM_BOUND_LEVEL, hits, sims - hits + 1))


def _normal_limit_fires(rule: BlockRule, g: np.ndarray, direction: Direction, want: str) -> np.ndarray:
    """The sign-flip sum has mean 0 and variance sum(g**2) under the null: p from its normal limit."""
    z = g.sum(axis=1) / np.sqrt((g**2).sum(axis=1))
    alpha = rule.alpha
    if rule.test_side() == "two-sided":
        alpha /= 2
    better_side = want == "confirmed"
    from scipy import stats as sps  # ~1.4 s to import: only where a plan needs it, never in frank run

    fires = (sps.norm.sf(z) <= alpha) if better_side else (sps.norm.cdf(z) <= alpha)
    better, worse = effect_thresholds(rule, direction, "ratio")
    mean = g.mean(axis=1)
    if rule.min_effect is not None:
        fires &= (mean >= better) if better_side else (mean <= -worse)
    return fires


def plan_blocks(
    rule: BlockRule,
    sd: float,
    effect: float,
    direction: Direction,
    *,
    target: float = 0.8,
    max_blocks: int = 40,
    simulations: int = 2000,
    seed: int = 1,
) -> PlanRow:
    """The fewest blocks (up to ``max_blocks``) whose power reaches ``target``: an exact power, or a
    simulated power's lower confidence bound (a simulation that happens to land at 80.4 % of a true
    79.997 % does not count); the same random draws serve every block count, so power curves are
    smooth and the result is reproducible."""
    if sd <= 0:
        raise AnalysisError(f"the spread sd must be positive, got {sd:g}")
    draws = np.random.default_rng(seed).standard_normal((simulations, max_blocks))
    return _first_reaching(
        rule,
        lambda n: power(rule, n, sd, effect, direction, simulations=simulations, seed=seed, draws=draws),
        target,
        max_blocks,
    )


def _first_reaching(rule: BlockRule, power_at: Callable[[int], Power], target: float, max_blocks: int) -> PlanRow:
    """The fewest blocks whose power (exact, or a simulation's lower bound) reaches ``target``."""
    best_n, best, method, low = None, -1.0, "", None
    for n in range(min_blocks(rule), max_blocks + 1):
        refused = rule.computable(n, "ratio")
        if refused is not None:  # registration would refuse it, so the planner never recommends it
            why = f"{method or 'unreachable'}; not above {n - 1} blocks: {refused}"
            return PlanRow(rule, None, max(best, 0.0), best_n, why, low)
        pw = power_at(n)
        if pw.value > best:
            best_n, best, method, low = n, pw.value, pw.method, pw.low
        if pw.assured >= target:
            return PlanRow(rule, n, pw.value, n, pw.method, pw.low)
    return PlanRow(rule, None, max(best, 0.0), best_n, method or "unreachable", low)


def make_plan(
    rules: Sequence[BlockRule],
    sd: float | None,
    effect: float,
    direction: Direction,
    *,
    pilot_log_ratios: Sequence[float] | None = None,
    target: float = 0.8,
    max_blocks: int = 40,
    simulations: int = 2000,
    seed: int = 1,
) -> Plan:
    """Plan each rule at the given sd, or at a pilot's sd and again at its upper bound."""
    if (sd is None) == (pilot_log_ratios is None):
        raise AnalysisError("give either a pilot or a spread sd, not both or neither")
    spread = pilot_spread(pilot_log_ratios) if pilot_log_ratios is not None else None
    use_sd = spread.sd if spread else float(sd)  # type: ignore[arg-type]
    kw = dict(target=target, max_blocks=max_blocks, simulations=simulations, seed=seed)
    rows = [plan_blocks(r, use_sd, effect, direction, **kw) for r in rules]  # type: ignore[arg-type]
    upper = [plan_blocks(r, spread.sd_upper, effect, direction, **kw) for r in rules] if spread else []  # type: ignore[arg-type]
    return Plan(use_sd, effect, direction, target, max_blocks, rows, spread, upper)


def harm_plan_from_options(
    *,
    harm: float,
    pilot: Path | None,
    sd: float | None,
    alpha: float = 0.05,
    target: float = 0.8,
    max_blocks: int = 40,
    simulations: int = 2000,
    seed: int = 1,
) -> HarmPlan:
    """What ``frank plan --harm`` does: read a pilot of per-block differences (block,difference) or take --sd."""
    if not 0 < target < 1:
        raise AnalysisError(f"--power must be between 0 and 1, got {target:g}")
    if not 1 <= max_blocks <= 1000 or simulations < 1:
        raise AnalysisError("--max-blocks must be 1..1000 and --simulations at least 1")
    diffs = None
    if pilot is not None:
        data = read_blocks_csv(pilot)
        if data.data != "difference":
            raise AnalysisError(f"{pilot}: a harm plan's pilot gives per-block differences: block,difference")
        diffs = data.differences
    rule = parse_rule("harm", alpha=alpha)
    kw = dict(target=target, max_blocks=max_blocks, simulations=simulations, seed=seed)
    return plan_harm(rule, harm, sd=sd, pilot_differences=diffs, **kw)  # type: ignore[arg-type]


def plan_from_options(
    kinds: Sequence[str],
    *,
    pilot: Path | None,
    sd: float | None,
    effect: float,
    direction: Direction,
    alpha: float = 0.05,
    target: float = 0.8,
    max_blocks: int = 40,
    simulations: int = 2000,
    seed: int = 1,
) -> Plan:
    """What ``frank plan`` does: check the options, read the pilot CSV (block,served,candidate), plan."""
    if (pilot is None) == (sd is None):
        raise AnalysisError("give either --pilot FILE.csv or --sd, not both or neither")
    if not 0 < target < 1:
        raise AnalysisError(f"--power must be between 0 and 1, got {target:g}")
    if not 1 <= max_blocks <= 1000 or simulations < 1:
        raise AnalysisError("--max-blocks must be 1..1000 and --simulations at least 1")
    rules = [parse_rule(k, alpha=alpha) for k in kinds]
    logs = None
    if pilot is not None:
        data = read_blocks_csv(pilot)
        if data.data != "ratio":
            raise AnalysisError(f"{pilot}: a pilot needs start-level values per arm: block,served,candidate")
        logs = stats.log_ratios(data.served, data.candidate)
    return make_plan(
        rules,
        sd,
        effect,
        direction,
        pilot_log_ratios=logs,
        target=target,
        max_blocks=max_blocks,
        simulations=simulations,
        seed=seed,
    )


# ---------------------------------------------------------------- harm: blocks needed to exclude a given harm


@dataclass(frozen=True)
class HarmPlan:
    """Blocks an agent (difference) design needs so that, with no true difference, its harm bound excludes
    a loss of ``harm`` (the non-inferiority test at that margin fires) with ``target`` probability."""

    harm: float
    sd: float
    target: float
    max_blocks: int
    row: PlanRow
    pilot_blocks: int | None = None
    sd_upper: float | None = None  # the pilot sd's UPPER_BOUND_LEVEL upper bound
    upper_row: PlanRow | None = None

    @property
    def recommended(self) -> PlanRow:
        return self.upper_row or self.row


def non_inferiority_probe(rule: BlockRule) -> BlockRule:
    """The test a harm bound inverts, as a rule that looks for "better": the harm rule's own test at its alpha."""
    kind = "permutation" if rule.test_name == "permutation" else "sign"
    return parse_rule(kind, alpha=rule.alpha)


def harm_power(
    rule: BlockRule,
    n: int,
    sd: float,
    harm: float,
    *,
    simulations: int = 2000,
    seed: int = 1,
    draws: np.ndarray | None = None,
) -> Power:
    """P(the data exclude a loss of ``harm``) with n blocks of independent normal differences of mean 0 and
    sd ``sd``: the registered test of the differences shifted by ``harm`` (side better) at alpha."""
    probe = non_inferiority_probe(rule)
    if smallest_p(probe, n) > stats.exact_fraction(probe.alpha):
        return Power(0.0, "unreachable")
    from scipy import stats as sps  # ~1.4 s to import: only where a plan needs it, never in frank run

    exact = probe.exact_power(n, float(sps.norm.cdf(harm / sd)))
    if exact is not None:
        return Power(exact, "exact (normal model)")
    if draws is None:
        draws = np.random.default_rng(seed).standard_normal((simulations, n))
    return _simulated_power(probe, harm + sd * draws[:, :n], "higher", seed)


def plan_harm(
    rule: BlockRule,
    harm: float,
    *,
    sd: float | None = None,
    pilot_differences: Sequence[float] | None = None,
    target: float = 0.8,
    max_blocks: int = 40,
    simulations: int = 2000,
    seed: int = 1,
) -> HarmPlan:
    """The fewest blocks to exclude a loss of ``harm`` at the rule's level, at a given sd or a pilot's (and
    at the pilot sd's upper bound, the recommendation)."""
    if harm <= 0 or not math.isfinite(harm):
        raise AnalysisError(f"--harm must be a positive number (a loss in the data's units), got {harm:g}")
    if (sd is None) == (pilot_differences is None):
        raise AnalysisError("give either --pilot FILE.csv (block,difference) or --sd, not both or neither")
    spread = pilot_spread(pilot_differences) if pilot_differences is not None else None
    use = spread.sd if spread else float(sd)  # type: ignore[arg-type]
    if use <= 0:
        raise AnalysisError(f"the spread sd must be positive, got {use:g}")
    draws = np.random.default_rng(seed).standard_normal((simulations, max_blocks))

    def row(at: float) -> PlanRow:
        kw = dict(simulations=simulations, seed=seed, draws=draws)
        return _first_reaching(rule, lambda n: harm_power(rule, n, at, harm, **kw), target, max_blocks)  # type: ignore[arg-type]

    if spread is None:
        return HarmPlan(harm, use, target, max_blocks, row(use))
    return HarmPlan(harm, use, target, max_blocks, row(use), spread.n_blocks, spread.sd_upper, row(spread.sd_upper))


# ---------------------------------------------------------------- wall time, from the phases of an earlier design

CURTAIL_SIMULATIONS = 400


@dataclass(frozen=True)
class WallTime:
    """The expected wall time of a design of ``blocks`` blocks, from the start times of an earlier one."""

    blocks: int
    arms: int
    starts: int
    seconds: float
    engine_seconds: float
    curtailed_blocks: float | None = None  # expected blocks run under stopping = "curtail", at the effect
    null_blocks: float | None = None  # the same at no effect
    per_block_s: float = 0.0

    @property
    def engine_share(self) -> float:
        return self.engine_seconds / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """'10 blocks × 2 arms: about 3 h 20 min, 71 % of it engine starts'."""
        return (
            f"{self.blocks} blocks × {self.arms} arms: about {duration(self.seconds)}, "
            f"{self.engine_share:.0%} of it engine starts"
        )

    def curtailed_line(self) -> str | None:
        if self.curtailed_blocks is None:
            return None
        at_null = (
            f"; {self.null_blocks:.1f} blocks, about {duration(self.null_blocks * self.per_block_s)} at no effect"
            if self.null_blocks is not None
            else ""
        )
        return (
            f'curtailed (stopping = "curtail"): {self.curtailed_blocks:.1f} of {self.blocks} blocks expected, '
            f"about {duration(self.curtailed_blocks * self.per_block_s)} at the planned effect{at_null}"
        )


def per_arm_times(summary: TimeSummary) -> tuple[dict[str, float], dict[str, float], float]:
    """(mean seconds per start, mean engine-start seconds per start, per arm; mean seconds between starts)."""
    if not summary.starts:
        raise AnalysisError("the design has no starts with recorded phases to estimate wall time from")
    total = {a.arm: a.total_s for a in summary.arms}
    engine = {a.arm: sum(a.mean.get(p, 0.0) for p in ENGINE_START) for a in summary.arms}
    gaps = [a.mean["write"] * a.starts for a in summary.arms if "write" in a.mean]
    counted = sum(a.starts for a in summary.arms if "write" in a.mean)
    return total, engine, (sum(gaps) / counted if counted else 0.0)


def wall_time(summary: TimeSummary, blocks: int, starts_per_arm: int = 1) -> WallTime:
    """``blocks`` × every arm of the earlier design × ``starts_per_arm``: mean start time plus the
    mean time between starts, and the engine-start share of it."""
    total, engine, between = per_arm_times(summary)
    per_block = starts_per_arm * sum(t + between for t in total.values())
    engine_block = starts_per_arm * sum(engine.values())
    return WallTime(
        blocks=blocks,
        arms=len(total),
        starts=blocks * starts_per_arm * len(total),
        seconds=blocks * per_block,
        engine_seconds=blocks * engine_block,
        per_block_s=per_block,
    )


def expected_curtailed_blocks(
    rule: BlockRule,
    blocks: int,
    sd: float,
    gain: float,
    *,
    simulations: int = CURTAIL_SIMULATIONS,
    seed: int = 1,
) -> float:
    """Mean blocks a curtailing runner runs before the verdict can no longer change (``rules.can_change``,
    the runner's own test), when each block's gain is normal(``gain``, ``sd``)."""
    rng = np.random.default_rng(seed)
    runs = []
    for row in gain + sd * rng.standard_normal((simulations, blocks)):
        n = next((k for k in range(1, blocks) if not can_change(rule, list(row[:k]), blocks - k)), blocks)
        runs.append(n)
    return float(np.mean(runs))


def plan_wall_times(
    plan: Plan,
    summary: TimeSummary,
    *,
    blocks: int | None = None,
    starts_per_arm: int = 1,
    simulations: int = CURTAIL_SIMULATIONS,
) -> list[tuple[BlockRule, WallTime]]:
    """For each planned rule: the wall time at its planned blocks (or ``blocks``), and under curtailment
    the expected blocks at the planned effect and at no effect."""
    out = []
    for row in plan.rows:
        n = blocks or row.blocks or row.best_blocks
        if not n:
            continue
        w = wall_time(summary, n, starts_per_arm)
        gain = effect_gain(plan.effect, plan.direction, worse=_harm_target(row.rule)) * (
            -1 if _harm_target(row.rule) else 1
        )
        at = expected_curtailed_blocks(row.rule, n, plan.sd, gain, simulations=simulations)
        null = expected_curtailed_blocks(row.rule, n, plan.sd, 0.0, simulations=simulations)
        out.append((row.rule, replace(w, curtailed_blocks=at, null_blocks=null)))
    return out


def wall_time_lines(plan: Plan, summary: TimeSummary, source: str, **kw: int | None) -> list[str]:
    """What ``frank plan --timing-from`` prints under the plan."""
    lines = ["", f"wall time, from the phases of {source} ({summary.starts} starts; mean per arm):"]
    for rule, w in plan_wall_times(plan, summary, **kw):  # type: ignore[arg-type]
        lines.append(f"  {rule.kind}: {w.line()}")
        curtailed = w.curtailed_line()
        if curtailed:
            lines.append(f"    {curtailed}")
    return lines
