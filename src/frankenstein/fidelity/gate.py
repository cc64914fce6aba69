"""The fidelity rule and its report lines (the gate a speed design can name is in :mod:`frankenstein.gates`).

What is measured is a **lower bound** of KL(served ‖ candidate) per position (top-k union + one tail
bucket, :mod:`frankenstein.fidelity.kl`): a divergence inside the tail is invisible to it (identical
top-64 lists with the tails rearranged give a bound of 0.0 while the full KL is nats). So the rule
decides in this order, and the reason names the part that decided:

1. **invalid: no positions** or **bad engine output** at a candidate position (not averaged in).
2. **invalid: captured mass** — the served probability held by the shared bins (what the bound can
   see) is below ``min_captured_mass`` at some position, or below ``min_captured_mass_mean`` on average.
3. **invalid: noise floor** — the served recipe against itself (A vs A′) already has a mean KL above
   ``tolerance``: the engine's own run-to-run noise is larger than the change the rule is meant to see.
   Without a noise floor (one served start in all) the reason says it was not compared.
4. With a registered ``margin``: **invalid: starts** with fewer than 3 ok starts per arm, or fewer than
   2 turns compared (no bound on the excess can be had).
5. **passed** when mean KL ≤ ``tolerance`` **and** fewer than ``max_positions_above`` positions have KL
   above ``threshold`` **and**, with a margin, the one-sided upper bound of the excess KL over the noise
   floor is below the margin (:mod:`frankenstein.fidelity.equivalence`); otherwise **failed** (the reason
   shows which did not hold). With a margin the reason begins with the floor and the candidate as ranges
   over start pairs, and the excess with its upper bound (the analysis prints them for every design).

The captured-mass floors (defaults 0.9 per position, 0.99 on average) refuse identical top-64 lists
whose tails differ at a captured mass of 0.92-0.97 (the audit's case: full KL 0.58-1.47 nats, a bound
of 0). What remains unseen is a divergence inside the last 1 % of the served mass on average.

The tail floor: tail masses below ``TAIL_FLOOR`` (1e-5) are float rounding, not mass, and are raised to
it, so a divergence confined to less than 1e-5 of the served mass at a position contributes nothing.
"""

from __future__ import annotations

import math
from typing import Any

from frankenstein.design.model import FidelityRule
from frankenstein.fidelity.equivalence import MIN_STARTS, Excess
from frankenstein.fidelity.kl import TAIL_FLOOR

BOUND_LABEL = "top-k union + tail bucket: a lower bound of the full-vocabulary KL"


def apply_rule(
    rule: FidelityRule,
    candidate: dict[str, Any],
    noise: dict[str, Any] | None = None,
    excess: Excess | None = None,
    starts: dict[str, int] | None = None,
) -> tuple[str, str]:
    """(word, one-line reason): ``passed`` | ``failed`` | ``invalid``; see the module docstring for the order.

    ``excess``: the floor and candidate ranges and the excess bound over every start pair (None: no pairs
    of both kinds); ``starts``: ok starts per arm (the margin needs MIN_STARTS of each)."""
    word, why = _apply(rule, candidate, noise, excess, starts or {})
    if rule.margin is None or excess is None or word == "invalid" and not why.startswith("starts:"):
        return word, why  # a rule without a margin keeps the reason it was registered with
    return word, f"{excess.ranges()}; {excess.bound()}; {why}"


def _apply(
    rule: FidelityRule,
    candidate: dict[str, Any],
    noise: dict[str, Any] | None,
    excess: Excess | None,
    starts: dict[str, int],
) -> tuple[str, str]:
    if not candidate.get("positions"):
        return "invalid", "no positions could be compared"
    if candidate.get("bad_total"):
        kinds = ", ".join(f"{v} {k}" for k, v in candidate["bad"].items() if v)
        return "invalid", f"bad engine output at candidate positions ({kinds}); not averaged in"
    blind = captured_reason(rule, candidate)
    if blind:
        return "invalid", blind
    noisy = noise_reason(rule, noise)
    if noisy:
        return "invalid", noisy
    short = starts_reason(rule, excess, starts)
    if short:
        return "invalid", short
    mean, above = candidate["kl"]["mean"], candidate["above_threshold"]
    ok_mean = mean <= rule.tolerance
    ok_above = above < rule.max_positions_above
    ok_excess = rule.margin is None or (excess is not None and excess.passed)
    reason = (
        f"mean KL {mean:.6f} {'≤' if ok_mean else '>'} {rule.tolerance:g} nats; "
        f"{above} position(s) above {rule.threshold:g} nats ({'fewer than' if ok_above else 'not fewer than'} "
        f"{rule.max_positions_above})"
    )
    return ("passed" if ok_mean and ok_above and ok_excess else "failed"), reason


def starts_reason(rule: FidelityRule, excess: Excess | None, starts: dict[str, int]) -> str | None:
    """Why a rule with a margin cannot test the excess here (too few starts or turns), or None."""
    if rule.margin is None:
        return None
    have = {arm: starts.get(arm, 0) for arm in ("served", "candidate")}
    if min(have.values()) < MIN_STARTS:
        return (
            f"starts: the excess test needs at least {MIN_STARTS} ok starts per arm; "
            f"served {have['served']}, candidate {have['candidate']}"
        )
    if excess is None or excess.turns < 2 or excess.upper != excess.upper:
        turns = 0 if excess is None else excess.turns
        return f"starts: {turns} turn(s) compared by both kinds of pair; the excess bound needs at least 2"
    return None


def captured_reason(rule: FidelityRule, candidate: dict[str, Any]) -> str | None:
    """Why the bound cannot be trusted here (too little served mass in the shared bins), or None."""
    mean, low = candidate.get("captured_mass_mean"), candidate.get("captured_mass_min")
    if mean is None or low is None or math.isnan(mean) or math.isnan(low):
        return "captured mass: not reported, so the lower bound's coverage is unknown"
    if low < rule.min_captured_mass:
        n = candidate.get("below_captured_floor")
        which = f"{n} position(s)" if n else "a position"
        return (
            f"captured mass: {which} below the registered {rule.min_captured_mass:g} of the served mass in the "
            f"shared top-k bins (lowest {low:.4f}); the bound is blind to the rest there"
        )
    if mean < rule.min_captured_mass_mean:
        return (
            f"captured mass: the shared top-k bins hold {mean:.4f} of the served mass on average, below the "
            f"registered {rule.min_captured_mass_mean:g}; the bound is blind to the rest"
        )
    return None


def noise_reason(rule: FidelityRule, noise: dict[str, Any] | None) -> str | None:
    """Why the noise floor alone makes the rule meaningless (its mean KL above the tolerance), or None."""
    if not noise or not noise.get("positions"):
        return None
    mean = noise["kl"]["mean"]
    if mean > rule.tolerance:
        return (
            f"noise floor: the served recipe against itself already has mean KL {mean:.6f} > the "
            f"{rule.tolerance:g} nats tolerance; the rule cannot tell the candidate from run-to-run noise"
        )
    return None


def rule_line(rule: FidelityRule) -> str:
    """The registered rule, in one line, as the analysis and the note print it."""
    excess = (
        ""
        if rule.margin is None
        else f"the one-sided {(1 - rule.alpha) * 100:g}% upper bound of the excess KL over the noise floor "
        f"(every served-vs-candidate pair over every served-vs-served pair, per turn) < {rule.margin:g} nats, "
    )
    return (
        f"rule (registered): {excess}mean KL ≤ {rule.tolerance:g} nats and fewer than {rule.max_positions_above} "
        f"position(s) above {rule.threshold:g} nats; valid only where the shared top-k bins hold ≥ "
        f"{rule.min_captured_mass:g} of the served mass at every position and ≥ {rule.min_captured_mass_mean:g} "
        f"on average, and the noise floor's mean KL is ≤ the tolerance; tail masses below {TAIL_FLOOR:g} count "
        "as rounding (a divergence within them is not seen)"
    )


def decided_by(word: str, reason: str) -> str:
    """Which part of the rule decided, for the note."""
    over, tested = " ≥ margin " in reason, " ≥ margin " in reason or " < margin " in reason
    reason = _rule_part(reason)
    for prefix in ("captured mass", "noise floor", "starts"):
        if reason.startswith(prefix + ":"):
            return prefix
    if word == "invalid":
        return "the measurement (" + reason.split(";")[0] + ")"
    if word == "passed":
        both = "the excess bound, mean KL and positions above threshold (all held)"
        return both if tested else "mean KL and positions above threshold (both held)"
    parts = [
        name
        for name, bad in (
            ("the excess over the noise floor", over),
            ("mean KL", " > " in reason.split(";")[0]),
            ("positions above threshold", "not fewer than" in reason),
        )
        if bad
    ]
    return " and ".join(parts) or "the rule"


def _rule_part(reason: str) -> str:
    """The reason without its leading ranges and excess (:func:`apply_rule`: three '; ' parts)."""
    if not reason.startswith("two starts of the served engine"):
        return reason
    parts = reason.split("; ", 3)
    return parts[3] if len(parts) == 4 else reason


# ---------------------------------------------------------------- lines


def _f(x: float | None, width: int = 9) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-".rjust(width)
    return f"{x:{width}.6f}" if abs(x) < 10 else f"{x:{width}.3f}"


HEADER = (
    f"{'':24}{'positions':>9} {'mean':>9} {'median':>9} {'p90':>9} {'p99':>9} {'p99.9':>9} {'max':>9} "
    f"{'>thr':>5} {'top-1 agree':>11}"
)


def summary_row(label: str, s: dict[str, Any] | None) -> str:
    if not s or not s.get("positions"):
        return f"{label:24}{0:>9} " + "(nothing compared)"
    k = s["kl"]
    return (
        f"{label:24}{s['positions']:>9} {_f(k['mean'])} {_f(k['median'])} {_f(k['p90'])} {_f(k['p99'])} "
        f"{_f(k['p99_9'])} {_f(k['max'])} {s['above_threshold']:>5} {s['top1_agreement'] * 100:>10.1f}%"
    )


def _bad_line(label: str, s: dict[str, Any] | None) -> str:
    if not s:
        return f"  {label}: -"
    kinds = ", ".join(f"{v} {k}" for k, v in s["bad"].items() if v)
    return f"  {label}: {kinds or 'none'}"


def format_summary(summary: dict[str, Any]) -> list[str]:
    """Lines for a fidelity summary (``frank analyze`` and ``frank fidelity check`` both print these)."""
    noise, cand = summary.get("noise_floor"), summary["candidate"]
    k = summary.get("k", {})
    lines = [
        f"KL(served ‖ candidate) per position, nats — {BOUND_LABEL}",
        f"path measured: {summary.get('path', '-')}",
        f"top-k: requested {k.get('requested', '-')}, used "
        + ", ".join(f"{a} {v}" for a, v in k.get("used", {}).items()),
        f"threshold for counting a position: {cand.get('threshold', '-')} nats",
        HEADER,
        summary_row("noise floor (A vs A′)", noise),
        summary_row("candidate (A vs B)", cand),
    ]
    if cand.get("positions"):
        lines.append("mean KL by served top-1 probability (candidate):")
        for b in cand["by_confidence"]:
            lines.append(f"  {b['bucket']:<12} {b['positions']:>7} positions  mean KL {_f(b['mean_kl']).strip()}")
        dp = cand["recorded_token_dp"]
        lines.append(
            f"recorded token: mean |Δp| {_f(dp['mean_abs']).strip()}, max |Δp| {_f(dp['max_abs']).strip()} "
            f"({dp['unknown']} positions where one engine did not list it)"
        )
        lines.append(
            f"captured mass (served probability in shared bins): mean {_f(cand['captured_mass_mean']).strip()}, "
            f"min {_f(cand['captured_mass_min']).strip()}"
        )
    lines.append("bad engine output (counted, left out of the numbers above):")
    lines += [_bad_line("noise floor", noise), _bad_line("candidate", cand)]
    for e in (cand.get("bad_examples") or [])[:5]:
        lines.append(f"    {e}")
    if summary.get("skipped"):
        lines.append(f"turns not forced: {len(summary['skipped'])} (e.g. {summary['skipped'][0]})")
    return lines
