"""Text formatting of verdicts and plans. Every formatter returns a list of lines (no printing), so
tests compare strings exactly and the CLI, the report and the runner share one rendering.

    format_p(p)                 '1/32 = 0.03125': the exact fraction beside its decimal
    p_text(verdict)             'p = 1/32 = 0.03125', or a curtailed verdict's bound 'p <= 11/1024 = ...'
    harm_text(verdict, unit)    'a loss of more than 1 pass per start is excluded at one-sided 95%'
    describe_rule(rule)         one line naming the test, its side, alpha and min_effect
    format_block_table(verdict) blocks as rows: served, candidate, ratio - 1, log ratio, favours
    format_summary(verdict)     counts, geometric mean, exact CI, p, verdict
    format_verdict(verdict)     table + blank line + summary
    format_plan(plan, pilot)    spread, effect, blocks needed per rule, warnings
    render_table(header, rows, align)  plain aligned columns
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from frankenstein.design.plan import SIM_BOUND_LEVEL, UPPER_BOUND_LEVEL, HarmPlan, Plan, PlanRow
from frankenstein.design.rules import (
    AllBlocksBetter,
    Family,
    HarmRule,
    PermutationRule,
    Rule,
    SignRule,
    Verdict,
    format_difference,
    loss_words,
)
from frankenstein.design.stats import MAX_ENUMERATED_BLOCKS


def format_p(p: Fraction) -> str:
    """The exact fraction and its decimal, e.g. '1/32 = 0.03125'."""
    if p.denominator == 1:
        return str(p.numerator)
    return f"{p} = {float(p):.4g}"


_BOUND_WORDS = {
    "at most": ("<=", "the largest over every completion of the blocks not run"),
    "at least": (">=", "the smallest over every completion of the blocks not run"),
}


def p_text(v: Verdict) -> str:
    """The registered test's p: 'p = 1/32 = 0.03125'; a curtailed verdict's bound over the completions
    of the blocks not run: 'p <= 11/1024 = 0.01074 (the largest over every completion ...)'."""
    if v.p is None:
        return "p not computed"
    if v.p_bound == "exact":
        return f"p = {format_p(v.p)}"
    sign, why = _BOUND_WORDS[v.p_bound]
    return f"p {sign} {format_p(v.p)} ({why})"


def harm_text(v: Verdict, unit: str = "") -> str | None:
    """The largest harm the data exclude at the rule's one-sided level, in words (harm rules only):
    'a loss of more than 1 pass per start is excluded at one-sided 95% (the permutation test inverted)'.
    ``unit`` names the data's unit in the singular and plural, e.g. 'pass/passes per start'."""
    b = v.harm_bound
    if b is None or v.word == "invalid":
        return None
    level = f"one-sided {(1 - v.rule.alpha) * 100:g}%"
    how = f"the {v.rule.test_name} test inverted"
    if v.data == "ratio":
        lower = v.direction == "lower"
        if (b <= 1) if lower else (b >= 1):
            bound = f"at {'most' if lower else 'least'} {b:.4g}"
            return f"every harm is excluded at {level}: the candidate/served ratio is {bound} ({how})"
        worse = "above" if lower else "below"
        return f"a candidate/served ratio {worse} {b:.4g} ({_pct(b - 1)}) is excluded at {level} ({how})"
    loss = -b if v.direction == "higher" else b
    word = "a loss" if v.direction == "higher" else "an increase"
    if loss <= 0:
        return f"every {word.split()[-1]} is excluded at {level} (candidate - served bound {_amount(b, v.n_blocks)}; {how})"
    return f"{word} of more than {_amount(loss, v.n_blocks)}{_unit(loss, unit)} is excluded at {level} ({how})"


def _amount(x: float, n: int) -> str:
    """A bound as read: exact for a subset mean of whole numbers ('1', '4/3 = 1.333'), else 4 digits."""
    f = Fraction(x).limit_denominator(max(1, n))
    if abs(float(f) - x) > 1e-9 * max(1.0, abs(x)):
        return f"{x:.4g}"
    return str(f.numerator) if f.denominator == 1 else f"{f} = {float(f):.4g}"


def _unit(x: float, unit: str) -> str:
    if not unit:
        return ""
    one, _, many = unit.partition("/")
    many = many or one
    rest = ""
    if " " in many:
        many, rest = many.split(" ", 1)
        rest = " " + rest
    return f" {one if x == 1 else many}{rest}"


def _pct(x: float) -> str:
    return f"{x * 100:+.2f}%"


def _power(x: float) -> str:
    # Rounded down, so a power just short of the target never prints as the target.
    return f"{math.floor(x * 1000 + 1e-9) / 10:.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def describe_rule(rule: Rule) -> str:
    """One line: the test, which side it looks at, alpha, and the practical threshold if any."""
    if isinstance(rule, AllBlocksBetter):
        text = "all blocks better (false-positive rate 1/2^n)"
    elif isinstance(rule, PermutationRule):
        side = {
            "better": "one-sided, candidate better",
            "worse": "one-sided, candidate worse",
            "two-sided": "two-sided",
        }[rule.side]
        text = f"paired sign-flip permutation test over all 2^n assignments, {side}"
    elif isinstance(rule, HarmRule):
        test = "sign test" if rule.test == "sign" else "paired sign-flip permutation test"
        text = f"harm: {test}, one-sided, candidate worse"
    elif isinstance(rule, SignRule):
        text = "sign test, one-sided, candidate better, ties count against"
    else:  # a rule registered elsewhere describes itself
        text = rule.describe()
    text += f"; alpha = {rule.alpha:g}"
    if rule.min_effect is not None:
        text += f"; practical threshold min_effect = {rule.min_effect:g}"
    return text


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """Columns padded to their widest cell; ``align`` has one 'l' or 'r' per column."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)]
        return "  ".join(parts).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def format_block_table(v: Verdict) -> list[str]:
    """One row per block. Ratio data: served, candidate, ratio - 1, log ratio; differences: the
    difference (candidate - served). 'favours' says which arm the block's evidence points to."""
    if v.layout == "unpaired":  # one row per start: there are no blocks
        rows = [[r.block, _num(r.served), _num(r.candidate)] for r in v.rows]
        return render_table(["start", "served", "candidate"], rows, "lrr")
    if v.data == "difference":
        rows = [[r.block, _num(r.difference), r.favours or "-"] for r in v.rows]
        return render_table(["block", "difference", "favours"], rows, "lrl")
    rows = [
        [
            r.block,
            _num(r.served),
            _num(r.candidate),
            "-" if r.ratio_minus_one is None else _pct(r.ratio_minus_one),
            "-" if r.log_ratio is None else f"{r.log_ratio:+.4f}",
            r.favours or "-",
        ]
        for r in v.rows
    ]
    return render_table(["block", "served", "candidate", "ratio - 1", "log ratio", "favours"], rows, "lrrrrl")


def format_summary(v: Verdict, incomplete: str | None = None) -> list[str]:
    """Rule, direction, counts, estimate, exact CI, exact p, and the verdict with its reason; a run still
    short of its registered blocks (``incomplete``, e.g. '2 of 5 blocks') says so instead of a verdict."""
    lines = [
        f"rule: {v.rule.kind} ({describe_rule(v.rule)})",
        f"direction: {v.direction} is better for the candidate",
        _counts(v),
    ]
    if v.geomean_ratio is not None:
        lines.append(f"geometric-mean ratio (candidate/served): {v.geomean_ratio:.4f} ({_pct(v.geomean_ratio - 1)})")
    if v.mean_difference is not None:
        mean = v.mean_exact if v.mean_exact is not None else v.mean_difference
        lines.append(f"mean difference (candidate - served): {format_difference(mean)}")
    lines += _ci_lines(v)
    harm = harm_text(v)
    if harm:
        lines.append(f"harm bound: {harm}")
    if v.p is not None:
        check = "" if v.p_scipy is None else f" (scipy, the same test: {v.p_scipy:.6g})"
        lines.append(f"{p_text(v)}{check}")
    if incomplete:
        return [*lines, *incomplete_lines(v, incomplete)]
    lines.append(f"verdict: {v.rule.phrase(v.word)} ({v.reason})")
    loss = loss_words(v)
    return [*lines, f"  a clear loss: {loss}"] if loss else lines


def incomplete_lines(v: Verdict, incomplete: str) -> list[str]:
    """No verdict yet: the rule decides over the registered blocks; what it reads so far, when it reads anything."""
    lines = [f"verdict: incomplete ({incomplete}); the registered rule decides when every block is run"]
    if v.word != "invalid":
        lines.append(f"  over the blocks run so far it reads: {v.rule.phrase(v.word)} ({v.reason})")
    return lines


def _counts(v: Verdict) -> str:
    if v.layout == "unpaired":
        n_c = sum(1 for r in v.rows if r.candidate is not None)
        return (
            f"starts: served {v.n_blocks - n_c}, candidate {n_c} (unpaired, one random order); pairs of one start "
            f"of each arm favouring the candidate: {v.in_favour}, the served arm: {v.against}, ties: {v.ties}"
        )
    return f"blocks: {v.n_blocks}; favour the candidate: {v.in_favour}, the served arm: {v.against}, ties: {v.ties}"


def _ci_lines(v: Verdict) -> list[str]:
    if v.word == "invalid":
        return []
    if v.ci is None:
        return [f"confidence interval: none ({v.ci_note})"] if v.ci_note else []
    c = v.ci
    text = (
        f"{c.level * 100:g}% CI for the {c.estimand}: [{c.low:.6g}, {c.high:.6g}] "
        f"(exact coverage {format_p(c.coverage)}){descriptive_label(v)}"
    )
    return [text] + ([f"  note: {v.ci_note}"] if v.ci_note else [])


def descriptive_label(v: Verdict) -> str:
    """'; descriptive: ...' when the rule does not decide on its interval (all_blocks_better)."""
    if v.ci is None or not v.ci.descriptive:
        return ""
    return f"; descriptive only: the {v.rule.kind} rule decides on the blocks, not on this interval"


def format_verdict(v: Verdict, incomplete: str | None = None) -> list[str]:
    """The block table, a blank line, and the summary (see :func:`format_summary` for ``incomplete``)."""
    return [*format_block_table(v), "", *format_summary(v, incomplete)]


def format_family(family: Family, rule: Rule) -> list[str]:
    """The ranked table of a family of candidates, each one's reason, and the family's outcome."""
    cells = []
    for r in family.rows:
        v = r.verdict
        estimate = (
            _pct(v.geomean_ratio - 1)
            if v.geomean_ratio is not None
            else "-"
            if v.mean_difference is None
            else format_difference(v.mean_difference)
        )
        p = "-" if v.p is None else format_p(v.p)
        level = "-" if r.level is None else format_p(r.level)
        family_word = "passes" if r.passes else "no"
        cells.append([str(r.rank), r.arm, estimate, f"{v.in_favour} of {v.n_blocks}", p, level, v.says, family_word])
    header = ["rank", "candidate", "estimate", "blocks in favour", "p", "Holm level", "rule says", "passes"]
    lines = [f"rule: {rule.kind} ({describe_rule(rule)}), each candidate against served in the same blocks"]
    lines += ["", *render_table(header, cells, "llrrrrll"), ""]
    lines += [f"{r.arm}: {r.verdict.reason}" for r in family.rows]
    return [*lines, "", f"outcome: {family.word} ({family.why})"]


def format_plan(plan: Plan, pilot: str | None = None) -> list[str]:
    """The pilot's spread (if any), the effect asked for, and blocks needed per rule; says plainly
    when no block count up to the cap reaches the target power."""
    lines: list[str] = []
    s = plan.spread
    if s is not None:
        lines += [
            f"pilot: {pilot or 'A/A blocks'}: {s.n_blocks} blocks",
            f"  mean log ratio: {s.mean_log_ratio:+.4f} ({_aa_test(s.aa_p)})",
            f"  spread of the block log ratio: sd {s.sd:.4f} ({UPPER_BOUND_LEVEL * 100:g}% upper bound {s.sd_upper:.4f})",
            f"  start-to-start spread: about {s.start_sd * 100:.2f}% per start (sd / sqrt 2)",
        ]
    else:
        lines.append(f"spread of the block log ratio: sd {plan.sd:.4f} (given)")
    better = "lower" if plan.direction == "lower" else "higher"
    lines.append(
        f"effect: {plan.effect * 100:g}% ({better} is better); target power {plan.target * 100:g}%; "
        f"at most {plan.max_blocks} blocks; model: independent normal block log ratios"
    )
    lines += ["", *_plan_table(plan.rows, plan.max_blocks, plan.target)]
    if s is not None:
        lines += [
            "",
            f"at the {UPPER_BOUND_LEVEL * 100:g}% upper bound of the spread (sd {s.sd_upper:.4f}):",
            *_plan_table(plan.upper_rows, plan.max_blocks, plan.target),
        ]
    lines += _recommendation(plan)
    lines += _plan_warnings(plan)
    return lines


def format_harm_plan(hp: HarmPlan, pilot: str | None = None) -> list[str]:
    """``frank plan --harm``: blocks needed so that, with no true difference, the harm bound excludes the harm."""
    r = hp.recommended
    lines = [
        f"pilot: {pilot}: {hp.pilot_blocks} blocks; sd of the block difference {hp.sd:.4g} "
        f"({UPPER_BOUND_LEVEL * 100:g}% upper bound {hp.sd_upper:.4g})"
        if pilot and hp.sd_upper is not None
        else f"sd of the block difference: {hp.sd:.4g} (given)",
        f"harm to exclude: a loss of more than {hp.harm:g} per block, at one-sided {(1 - r.rule.alpha) * 100:g}% "
        f"(the {r.rule.test_name} test inverted); target power {hp.target * 100:g}% with no true difference; "
        f"at most {hp.max_blocks} blocks; model: independent normal block differences",
        "",
        *_plan_table([hp.row], hp.max_blocks, hp.target),
    ]
    if hp.upper_row is not None:
        lines += [
            "",
            f"at the {UPPER_BOUND_LEVEL * 100:g}% upper bound of the pilot's sd ({hp.sd_upper:.4g}):",
            *_plan_table([hp.upper_row], hp.max_blocks, hp.target),
        ]
    if r.blocks is not None:
        at = "the pilot sd's upper bound" if hp.upper_row is not None else "the sd given"
        lines += ["", f"recommended: {r.blocks} blocks (planned at {at})"]
    return lines


def _recommendation(plan: Plan) -> list[str]:
    """What to register, said once: at the pilot sd's upper bound (stated) when there is a pilot."""
    s = plan.spread
    if s is None:
        return []
    picks = [f"{r.rule.kind}: {r.blocks} blocks" for r in plan.recommended if r.blocks is not None]
    if not picks:
        return []
    return [
        "",
        f"recommended: {'; '.join(picks)} (planned at the {UPPER_BOUND_LEVEL * 100:g}% upper confidence "
        f"bound of the pilot's sd, {s.sd_upper:.4f}, so that a pilot that saw too little noise does not "
        "leave the design short of power)",
    ]


def _aa_test(p: Fraction | None) -> str:
    if p is None:
        return f"A/A arms differ? not tested above {MAX_ENUMERATED_BLOCKS} blocks"
    return f"A/A arms differ? two-sided sign-flip p = {format_p(p)}"


def _plan_table(rows: Sequence[PlanRow], max_blocks: int, target: float) -> list[str]:
    cells = []
    for r in rows:
        blocks = str(r.blocks) if r.blocks is not None else f"> {max_blocks}"
        low = "" if r.power_low is None else f" (>= {_power(r.power_low)})"
        cells.append([r.rule.kind, f"{r.rule.alpha:g}", blocks, _power(r.power) + low, r.method])
    table = render_table(["rule", "alpha", "blocks", "power", "method"], cells, "lrrrl")
    if any(r.power_low is not None for r in rows):
        table.append(
            f"(>= x%): a simulated power's one-sided {SIM_BOUND_LEVEL * 100:g}% lower confidence bound; "
            "a block count is chosen only when it reaches the target"
        )
    for r in rows:
        if r.blocks is None:
            where = f" (best: {_power(r.power)} at {r.best_blocks} blocks)" if r.best_blocks else ""
            table.append(
                f"no block count up to {max_blocks} gives the {r.rule.kind} rule {target * 100:g}% power{where}"
            )
    return table


def _plan_warnings(plan: Plan) -> list[str]:
    s = plan.spread
    out = []
    if s is not None and s.n_blocks < 5:
        out.append(f"warning: a spread from {s.n_blocks} blocks is rough; prefer the plan at the upper bound")
    if s is not None and s.aa_p is not None and s.aa_p <= Fraction(1, 20):
        out.append(
            f"warning: the A/A arms differ (p = {format_p(s.aa_p)}): look for order or warm-up "
            "effects before trusting any plan"
        )
    return out
