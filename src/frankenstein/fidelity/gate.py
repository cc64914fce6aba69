"""The fidelity rule and its report lines (the gate a speed design can name is in :mod:`frankenstein.gates`).

Rule (registered with the design): the candidate passes when its mean per-position KL(served ‖
candidate) ≤ ``tolerance`` **and** fewer than ``max_positions_above`` positions have KL above
``threshold``. It is reported beside the noise floor (two starts of the served recipe), which is
not part of the rule but says what "zero" looks like on this engine. Any bad engine output among the
candidate's positions (see :mod:`frankenstein.fidelity.compare`) makes the verdict ``invalid``: the
rule cannot be evaluated on positions that were not measured.
"""

from __future__ import annotations

import math
from typing import Any

from frankenstein.design.model import FidelityRule

BOUND_LABEL = "top-k union + tail bucket: a lower bound of the full-vocabulary KL"


def apply_rule(rule: FidelityRule, candidate: dict[str, Any]) -> tuple[str, str]:
    """(word, one-line reason): ``passed`` | ``failed`` | ``invalid``."""
    if not candidate.get("positions"):
        return "invalid", "no positions could be compared"
    if candidate.get("bad_total"):
        kinds = ", ".join(f"{v} {k}" for k, v in candidate["bad"].items() if v)
        return "invalid", f"bad engine output at candidate positions ({kinds}); not averaged in"
    mean, above = candidate["kl"]["mean"], candidate["above_threshold"]
    ok_mean = mean <= rule.tolerance
    ok_above = above < rule.max_positions_above
    reason = (f"mean KL {mean:.6f} {'≤' if ok_mean else '>'} {rule.tolerance:g} nats; "
              f"{above} position(s) above {rule.threshold:g} nats ({'fewer than' if ok_above else 'not fewer than'} "
              f"{rule.max_positions_above})")
    return ("passed" if ok_mean and ok_above else "failed"), reason


# ---------------------------------------------------------------- lines

def _f(x: float | None, width: int = 9) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-".rjust(width)
    return f"{x:{width}.6f}" if abs(x) < 10 else f"{x:{width}.3f}"


HEADER = (f"{'':24}{'positions':>9} {'mean':>9} {'median':>9} {'p90':>9} {'p99':>9} {'p99.9':>9} {'max':>9} "
          f"{'>thr':>5} {'top-1 agree':>11}")


def summary_row(label: str, s: dict[str, Any] | None) -> str:
    if not s or not s.get("positions"):
        return f"{label:24}{0:>9} " + "(nothing compared)"
    k = s["kl"]
    return (f"{label:24}{s['positions']:>9} {_f(k['mean'])} {_f(k['median'])} {_f(k['p90'])} {_f(k['p99'])} "
            f"{_f(k['p99_9'])} {_f(k['max'])} {s['above_threshold']:>5} {s['top1_agreement'] * 100:>10.1f}%")


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
        f"top-k: requested {k.get('requested', '-')}, used " + ", ".join(f"{a} {v}" for a, v in k.get("used", {}).items()),
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
        lines.append(f"recorded token: mean |Δp| {_f(dp['mean_abs']).strip()}, max |Δp| {_f(dp['max_abs']).strip()} "
                     f"({dp['unknown']} positions where one engine did not list it)")
        lines.append(f"captured mass (served probability in shared bins): mean {_f(cand['captured_mass_mean']).strip()}, "
                     f"min {_f(cand['captured_mass_min']).strip()}")
    lines.append("bad engine output (counted, left out of the numbers above):")
    lines += [_bad_line("noise floor", noise), _bad_line("candidate", cand)]
    for e in (cand.get("bad_examples") or [])[:5]:
        lines.append(f"    {e}")
    if summary.get("skipped"):
        lines.append(f"turns not forced: {len(summary['skipped'])} (e.g. {summary['skipped'][0]})")
    return lines
