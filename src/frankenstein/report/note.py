"""The progress note: Markdown written like a careful lab's, from a campaign's store.

Sections: a summary (one bullet per decision), one section per design (hypothesis, the block table with
blocks as columns, the rule and what it said, secondary metrics "reported, not tested", plots, and what
the result does and does not show), what didn't work, verification overridden (only when a command went on
under ``--force --why`` past a failed verification), and credits of the served parts. A campaign that fails
verification as the note is written gets a warning line under the title, naming the first broken record.

Every formatter returns a list of lines and reads nothing: :func:`collect` gathers the data first. The
note prints no clock time but those stored with the records, so the same store gives the same text.

    write_report(campaign, out_dir, since=None) -> Path     note.md and its PNGs in out_dir

The block plot labels each point with when its arm ran in its block, from the recorded starts (their
``started_at``, then start id), not from the registered schedule: a resumed or retried block says how it ran.
With ``since`` the observational section (:mod:`.observed`) keeps the ledger steps at or after it too.
"""

from __future__ import annotations

from datetime import date, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.config import Provenance
from frankenstein.design.kinds import kind_of
from frankenstein.design.kinds.agent import quota_line
from frankenstein.design.kinds.base import speculation_lines
from frankenstein.design.model import FidelityRule
from frankenstein.design.rules import Verdict, loss_words
from frankenstein.design.percentiles import PERCENTILE_CAPTION, PERCENTILE_HEADER, percentile_rows
from frankenstein.design.table import descriptive_label, describe_rule, format_p, harm_text, p_text
from frankenstein.fidelity.gate import rule_line
from frankenstein.report import plots as P
from frankenstein.part_status import STATUS_ACTIONS, PartStatus
from frankenstein.report.collect import DesignReport, NoteData, collect
from frankenstein.report.export import dumps, note_doc
from frankenstein.report.facts import stated_limits, what_it_shows
from frankenstein.report.html import note_html
from frankenstein.report.hosts import host_row, hosts_sentence
from frankenstein.report.observed import draw_lines, observed_lines
from frankenstein.report.phases import format_time_spent
from frankenstein.report.markdown import capture_tables, code, difference, md_table, num, pct, row_nums, slug, unit
from frankenstein.scope import adopted_for, scope_words
from frankenstein.store import LedgerEntry, Override, Refusal, StartRow

NOTE_NAME = "note.md"
NOTE_HTML = "note.html"  # the same note as one file, plots inline (report/html.py)
NOTE_JSON = "note.json"  # every table of the note, machine-readable (report/export.py, docs/exports.md)
Plots = dict[str, dict[str, str]]  # design id -> {"blocks" | "kl" | "passes": file name}


# ---------------------------------------------------------------- results in one phrase


_BOUND_SIGN = {"at most": "<=", "at least": ">="}


def _p_text(p: Fraction | str | None, bound: str | None = None) -> str:
    """'p = 1/32 = 0.03125'; a curtailed verdict's bound over the completions: 'p <= 11/1024 = 0.01074'."""
    if p is None:
        return "p not computed"
    return f"p {_BOUND_SIGN.get(bound or '', '=')} {format_p(Fraction(p))}"


def result_phrase(d: DesignReport) -> str:
    """'metric ratio 0.8248 (-17.52%), 6 of 6 blocks in its favour, p = 1/64 = 0.01562, verdict confirmed'."""
    a = d.analysis
    if a is None:
        return d.error or "no analysis"
    v = a.verdict
    if v is None and a.fidelity is not None:
        return fidelity_phrase(a.fidelity, a.word)
    if v is None and a.why and kind_of(d.reg.design.kind).measures_memory:
        return f"{a.why}, verdict {a.word}"
    if v is None or v.n_blocks == 0:
        return f"verdict {a.word}"
    metric = d.reg.design.primary_metric
    if v.data == "difference":
        est = f"{metric} mean difference {num(v.mean_difference)}"
    elif v.geomean_ratio:
        est = f"{metric} ratio {v.geomean_ratio:.4f} ({pct(v.geomean_ratio - 1)}; {ratio_difference(v, metric)})"
    else:
        est = metric
    return f"{est}, {v.in_favour} of {v.n_blocks} blocks in its favour, {p_text(v)}, verdict {d.says}"


def mean_block_difference(v: Verdict) -> float | None:
    """Mean of candidate − served over the analysed blocks: the absolute difference beside a ratio."""
    diffs = [r.candidate - r.served for r in v.rows if r.candidate is not None and r.served is not None]
    return sum(diffs) / len(diffs) if diffs else None


def ratio_difference(v: Verdict, metric: str) -> str:
    """'candidate − served -0.70 ms per step on average': the ratio's absolute counterpart in the metric's unit."""
    return f"candidate − served {difference(mean_block_difference(v), metric)} on average"


def fidelity_phrase(summary: dict[str, Any], word: str) -> str:
    """'mean KL 0.0051 nats (noise floor 0), 0 position(s) above 0.5 nats, verdict passed' (top-k lower bounds)."""

    def mean(s: Any) -> str:
        return f"{s['kl']['mean']:.4g}" if isinstance(s, dict) and s.get("positions") else "not measured"

    cand = summary.get("candidate") or {}
    above = cand.get("above_threshold")
    rule = summary.get("rule") or {}
    tail = f", {above} position(s) above {rule.get('threshold', '-')} nats" if above is not None else ""
    return (
        f"mean KL {mean(cand)} nats (top-k lower bound; noise floor {mean(summary.get('noise_floor'))}){tail}, "
        f"verdict {word}"
    )


def scope_phrase(scope: dict[str, Any], d: DesignReport | None = None) -> str:
    """The same phrase from what the ledger recorded at adoption (the absolute difference from the design's
    analysis, where the note has it)."""
    g = scope.get("geomean_ratio")
    v = d.analysis.verdict if d is not None and d.analysis is not None else None
    diff = f"; {ratio_difference(v, str(scope.get('metric')))}" if v is not None and v.data == "ratio" else ""
    est = f"{scope.get('metric')} ratio {g:.4f} ({pct(g - 1)}{diff})" if g else str(scope.get("metric"))
    return (
        f"{est}, {scope.get('in_favour')} of {scope.get('blocks')} blocks in its favour, {_p_text(scope.get('p'), scope.get('p_bound'))}, "
        f"verdict {scope.get('verdict')}"
    )


# ---------------------------------------------------------------- summary


def format_summary(data: NoteData) -> list[str]:
    """One bullet per decision (ledger steps and refused adoptions, in time order), then one per design
    that no decision used."""
    by_id = {d.design_id: d for d in data.designs}
    forced_past = step_overrides(data.steps, data.overrides)
    events: list[tuple[str, int, Any]] = [(e.at, 0, e) for e in data.steps]
    events += [(r.at, 1, r) for r in data.refusals if r.what == "adopt"]
    bullets = [
        _step_bullet(x, by_id, forced_past.get(x.seq)) if isinstance(x, LedgerEntry) else _refusal_bullet(x, by_id)
        for _, _, x in sorted(events, key=lambda t: (t[0], t[1], t[2].seq))
    ]
    used = {e.design_id for e in data.steps} | {r.name for r in data.refusals if r.what == "adopt"}
    for d in data.designs:
        if d.design_id not in used:
            bullets.append(
                f"- design {code(d.design_id)} ({d.reg.design.kind}, {_part(d)}): {result_phrase(d)}; "
                f"{_no_decision(d)}."
            )
    return ["## Summary", "", *(bullets or ["- Nothing recorded yet."])]


def _part(d: DesignReport) -> str:
    return f"part {code(d.part)}" if d.reg.frozen.recipes.get("candidate") is not None and " " not in d.part else d.part


def _no_decision(d: DesignReport) -> str:
    return kind_of(d.reg.design.kind).no_decision(d.word)


def step_overrides(steps: list[LedgerEntry], overrides: list[Override]) -> dict[int, Override]:
    """Ledger step seq -> the verification override its own command recorded just before it: the first
    step of the same action and reason at or after the override."""
    out: dict[int, Override] = {}
    for o in overrides:
        if o.command not in ("adopt", "revert"):
            continue
        e = next(
            (e for e in steps if e.action == o.command and e.why == o.why and e.at >= o.at and e.seq not in out), None
        )
        if e is not None:
            out[e.seq] = o
    return out


def _verification_phrase(o: Override) -> str:
    return f"a failed verification ({o.problem.rstrip('.')}; override {o.seq})"


def _status_bullet(e: LedgerEntry) -> str:
    """'- **parked** `claim` (step 3, rests on `claim-bench-1`): why.'"""
    designs = ", ".join(code(d) for d in e.scope.get("designs") or [])
    rests = f", rests on {designs}" if designs else ""
    return f"- **{e.scope.get('status', e.action)}** {code(e.part)} (step {e.seq}{rests}): {e.why}."


def _step_bullet(e: LedgerEntry, by_id: dict[str, DesignReport], forced_past: Override | None = None) -> str:
    if e.action in STATUS_ACTIONS:
        return _status_bullet(e)
    if e.action == "revert":
        why = f"; why: {e.why}" if e.why else ""
        head = "**re-applied**" if e.scope.get("undoes_action") == "revert" else "**reverted**"
        past = f"; forced past {_verification_phrase(forced_past)}" if forced_past is not None else ""
        return (
            f"- {head} {code(e.part)} (step {e.seq}, undoes step {e.scope.get('undoes')}: "
            f"{e.scope.get('undoes_action')}){why}{past}; served parts after it: {_parts(e.parts)}."
        )
    head = "**adopted by force**" if e.forced else "**adopted**"
    phrase = scope_phrase(e.scope, by_id.get(e.design_id or ""))
    text = f"- {head} {code(e.part)} (step {e.seq}, design {code(e.design_id or '-')}): {phrase}"
    if e.forced:
        overrode = list(e.scope.get("overridden") or [])
        if forced_past is not None:
            overrode.append(_verification_phrase(forced_past))
        text += f"; forced because: {e.why}; it overrode: {'; '.join(overrode) or 'nothing'}"
    if scope_words(adopted_for(e)):
        text += f"; adopted for {scope_words(adopted_for(e))}"
    return text + "."


def _refusal_bullet(r: Refusal, by_id: dict[str, DesignReport]) -> str:
    d = by_id.get(r.name)
    res = f": {result_phrase(d)}" if d is not None else ""
    return f"- **refused** {code(r.part or '-')} (design {code(r.name)}){res}; refused because {r.reason}."


def _parts(parts: list[str]) -> str:
    return ", ".join(code(p) for p in parts) if parts else "none (the base recipe)"


# ---------------------------------------------------------------- one design


def format_design(d: DesignReport, base: str, plots: dict[str, str]) -> list[str]:
    design = d.reg.design
    lines = [f"## Design {code(d.design_id)}: {design.name} ({design.kind})", ""]
    lines += _design_head(d, base)
    lines += ["", *format_block_table(d)]
    lines += ["", *format_rule(d)]
    lines += format_vetoes(d)
    lines += format_predictions(d)
    lines += format_secondary(d)
    lines += format_percentiles(d)
    if d.episodes:
        lines += ["", *format_pass_matrix(d), "", quota_line(d.episodes)]
    for key, label in (
        ("blocks", f"{design.primary_metric} per block, paired"),
        ("kl", "KL per position against the noise floor"),
        ("passes", "pass matrix"),
    ):
        if key in plots:
            lines += ["", f"![{label}]({plots[key]})"]
    if kind_of(design.kind).measures_fidelity and "kl" not in plots:
        lines += ["", "No KL plot: the fidelity module gave no per-position KL for this design."]
    lines += [
        "",
        "### What this does and does not show",
        "",
        *(f"- {s}" for s in what_it_shows(d.facts, d.description.measures, d.description.concurrency)),
        *(f"- {s}" for s in stated_limits(d.reg.design.kind, d.says, d.reg.design.limits, _harm(d))),
    ]
    lines += format_machines(d)
    lines += format_time_spent(d)
    return lines


def _harm(d: DesignReport) -> str | None:
    """The largest harm a harm rule's data exclude, in words (agent designs: passes per start)."""
    v = d.analysis.verdict if d.analysis is not None else None
    return harm_text(v, "pass/passes per start") if v is not None else None


MACHINE_COLUMNS = ("host", "CPU", "governor", "GPU", "driver / CUDA", "engine")
ENV_COLUMN = "engine env"  # only when some start inherited engine settings from frank's environment


ENV_VALUE_CHARS = 32  # an inherited setting's value longer than this is cut in the table (NVIDIA_REQUIRE_CUDA)


def cut_env(words: str) -> str:
    """``K=V, ...`` with each value longer than :data:`ENV_VALUE_CHARS` cut to its start and '…'."""

    def cut(item: str) -> str:
        key, eq, value = item.partition("=")
        return item if not eq or len(value) <= ENV_VALUE_CHARS else f"{key}={value[: ENV_VALUE_CHARS - 1]}…"

    return ", ".join(cut(item) for item in words.split(", "))


def format_machines(d: DesignReport) -> list[str]:
    """The metadata table (one row per distinct machine, with the starts it ran), the starts whose
    machine differs, and the noise guard's warnings (starts run on a busy machine, a large spread)."""
    warnings = d.analysis.warnings if d.analysis is not None else list(d.facts.load_warnings)
    tail = [f"- Warning: {w}" for w in warnings]
    if not d.facts.machines:
        return ["", "### Machine", "", *tail] if tail else []
    if all(cells.get("host") == "not recorded" for _, cells in d.facts.machines):
        return ["", "### Machine", "", f"- Not recorded for any of the {len(d.facts.machines)} starts.", *tail]
    columns: tuple[str, ...] = MACHINE_COLUMNS
    if any(cells.get(ENV_COLUMN) for _, cells in d.facts.machines):  # engine settings inherited from the shell
        columns = (*MACHINE_COLUMNS, ENV_COLUMN)
    groups: dict[tuple[str, ...], list[str]] = {}
    for label, cells in d.facts.machines:
        key = tuple(cut_env(cells.get(c, "none")) if c == ENV_COLUMN else cells.get(c, "—") for c in columns)
        groups.setdefault(key, []).append(label)
    rows = [[*key, str(len(labels))] for key, labels in groups.items()]
    lines = ["", "### Machine", "", *md_table([*columns, "starts"], rows, "l" * len(columns) + "r")]
    lines += [f"- Differs: {flag}" for flag in d.facts.machine_flags]
    return lines + tail


def _design_head(d: DesignReport, base: str) -> list[str]:
    reg, design = d.reg, d.reg.design
    s, c = reg.frozen.recipes["served"], reg.frozen.recipes.get("candidate")
    if design.family:
        tests = f"{_part(d)}; served and {len(design.candidates)} candidates in the same blocks"
    elif s is None or c is None:
        tests = _part(d) if d.part == "command arms" else f"{_part(d)}; command arms"
    else:
        arms = f"served = {code(' + '.join([base, *s.parts]))}, candidate = {code(' + '.join([base, *c.parts]))}"
        tests = f"{_part(d)}; {arms}"
    return [
        f"- Tests: {tests}.",
        f"- Registered {reg.registered_at}, design hash {code(reg.design_hash[:16])}; {design.blocks} blocks, "
        f"{design.starts_per_arm} start(s) per arm per block, arm order per block drawn from the registered seed.",
        f"- Hypothesis: {design.hypothesis or 'none written'}",
        d.description.head,
    ]


def _arm_values(d: DesignReport, metric: str) -> dict[int, dict[str, float]]:
    a = d.analysis
    return dict(a.per_block.get(metric, {})) if a is not None else {}


def format_block_table(d: DesignReport) -> list[str]:
    """Blocks as columns: each arm's value and ratio − 1 (or the difference) per block, then the mean."""
    a = d.analysis
    if a is None:
        return [d.error or "No analysis."]
    v = a.verdict
    if v is None:
        return ["```text", *(a.lines or [f"verdict: {a.word}"]), "```"]
    rows = {r.block: r for r in v.rows}
    metric = d.reg.design.primary_metric
    vals = _arm_values(d, metric)
    header, rel = ["block"], [("difference" if v.data == "difference" else "ratio − 1")]
    values: dict[str, list[float | None]] = {"served": [], "candidate": []}
    analysed: dict[str, list[float | None]] = {"served": [], "candidate": []}
    for b in range(d.reg.design.blocks):
        r = rows.get(str(b + 1))
        header.append(str(b + 1))
        got = vals.get(b, {})
        s = r.served if r and r.served is not None else got.get("served")
        c = r.candidate if r and r.candidate is not None else got.get("candidate")
        values["served"].append(s)
        values["candidate"].append(c)
        if r is not None:
            analysed["served"].append(s)
            analysed["candidate"].append(c)
        status = d.block_status.get(b, "not run")
        if r is None:
            rel.append(status if status != "complete" else "—")
        else:
            rel.append(num(r.difference) if v.data == "difference" else pct(r.ratio_minus_one))
    header.append("mean")
    served = ["served", *row_nums(values["served"], [_mean(analysed["served"])])]
    cand = ["candidate", *row_nums(values["candidate"], [_mean(analysed["candidate"])])]
    rel.append(
        num(v.mean_difference) if v.data == "difference" else pct(v.geomean_ratio - 1 if v.geomean_ratio else None)
    )
    diff_row = _difference_row(v, d.reg.design.blocks, metric) if v.data == "ratio" else []
    table = md_table(
        header, [served, cand, rel, *([diff_row] if diff_row else []), *host_row(d)], "l" + "r" * (len(header) - 1)
    )
    note = (
        "The mean column gives each arm's arithmetic mean over the blocks analysed and, for ratio − 1, the "
        "geometric-mean ratio − 1: the estimate the rule tests."
        if v.data == "ratio"
        else "The mean column gives each arm's arithmetic mean and the mean difference (candidate − served)."
    )
    return [*table, "", note + _dropped(d) + hosts_sentence(d)]


def _difference_row(v: Verdict, blocks: int, metric: str) -> list[str]:
    """Candidate − served per block and on average, in the metric's unit, beside the ratio row."""
    by_block = {r.block: r for r in v.rows}
    diffs: list[float | None] = []
    for b in range(blocks):
        r = by_block.get(str(b + 1))
        diffs.append(None if r is None or r.served is None or r.candidate is None else r.candidate - r.served)
    return [f"candidate − served ({unit(metric)})", *row_nums(diffs, [mean_block_difference(v)], sign=True)]


def _mean(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return sum(ys) / len(ys) if ys else None


def _dropped(d: DesignReport) -> str:
    a = d.analysis
    notes = list(a.dropped) if a is not None else []
    return (" " + " ".join(n[0].upper() + n[1:] + "." for n in notes)) if notes else ""


def format_rule(d: DesignReport) -> list[str]:
    """The registered rule in words, and what it said with its exact p."""
    a = d.analysis
    rule = d.reg.design.rule
    if a is not None and a.verdict is None and isinstance(rule, FidelityRule):
        decided = (a.fidelity or {}).get("decided_by")
        return [
            f"**Rule:** {code('fidelity')}: {rule_line(rule).removeprefix('rule (registered): ')}.",
            "",
            f"**It said:** {a.word} ({a.why or ''})." + (f" Decided by: {decided}." if decided else ""),
        ]
    if a is None or a.verdict is None:
        return [f"**Verdict:** {d.word}" + (f" ({a.why})." if a is not None and a.why else ".")]
    v = a.verdict
    said = (
        f"**It said:** {d.says} ({v.reason}). {v.in_favour} of {_units(v)} favour the candidate, "
        f"{v.against} the served arm, {v.ties} tie(s); {p_text(v)}"
    )
    if v.ci is not None:
        said += (
            f"; {v.ci.level * 100:g}% CI for the {v.ci.estimand}: [{v.ci.low:.5g}, {v.ci.high:.5g}] "
            f"(exact coverage {format_p(v.ci.coverage)}){descriptive_label(v)}"
        )
    harm = harm_text(v, "pass/passes per start" if d.reg.design.kind == "agent" else "")
    said += f". Largest harm excluded: {harm}." if harm else "."
    loss = loss_words(v)
    if loss:
        said += f" A clear loss: {loss}."
    if a.invalidated:
        said += f" Overridden to invalid: {a.invalidated}."
    return [f"**Rule:** {code(v.rule.kind)}: {describe_rule(v.rule)}.", "", said]


def _units(v: Verdict) -> str:
    """What the counts count: blocks, or (unpaired) pairs of one start of each arm."""
    if v.layout == "unpaired":
        return f"{v.in_favour + v.against + v.ties} pairs of one served and one candidate start"
    return f"{v.n_blocks} blocks"


def format_vetoes(d: DesignReport) -> list[str]:
    """The design's registered vetoes, each checked on the same starts as its primary metric."""
    if d.analysis is None or not d.analysis.vetoes:
        return []
    head = "Vetoes (registered with the design, checked on the same starts; adoption needs every one passed):"
    return ["", head, "", *(f"- {v.sentence()}." for v in d.analysis.vetoes)]


def format_predictions(d: DesignReport) -> list[str]:
    """Earlier designs' predictions for this part, against what this design observed (ratio and difference)."""
    if d.analysis is None or not d.analysis.predictions:
        return []
    metric = d.reg.design.primary_metric
    return ["", *(f"**Predicted:** {code(metric)}: {p.sentence()}." for p in d.analysis.predictions)]


def format_secondary(d: DesignReport) -> list[str]:
    """Secondary metrics per block as ratio − 1, and their geometric-mean ratio: reported, not tested."""
    a = d.analysis
    if a is None or not (a.secondary or a.speculation):
        return []
    header = ["metric (ratio − 1)", *(str(b + 1) for b in range(d.reg.design.blocks)), "geometric mean"]
    rows = []
    for m, summary in a.secondary.items():
        per = a.per_block.get(m, {})
        cells = [code(m)]
        for b in range(d.reg.design.blocks):
            s, c = per.get(b, {}).get("served"), per.get(b, {}).get("candidate")
            cells.append(pct(c / s - 1) if s and c else "—")
        g = summary.get("geomean_ratio")
        only = summary.get("per_arm") if g is None else None
        if only and len(only) == 2:
            per_arm = ", ".join(f"{arm} {num(v)}" for arm, v in only.items())
            cells.append(f"no ratio (not above zero): {per_arm}")
        else:
            cells.append(
                "only " + ", ".join(f"{arm} {num(v)}" for arm, v in only.items()) if only else pct(g - 1 if g else None)
            )
        rows.append(cells)
    lines = (
        ["", "Secondary metrics (reported, not tested):", "", *md_table(header, rows, "l" + "r" * (len(header) - 1))]
        if rows
        else []
    )
    if a.speculation:
        lines += [
            "",
            "Speculation per arm (summed over the turns that drafted; not a ratio between arms): "
            + "; ".join(speculation_lines(a.speculation))
            + ".",
        ]
    return lines


def format_percentiles(d: DesignReport) -> list[str]:
    """n and p50/p90/p99 per arm of TTFT, TPOT, ITL (pooled chunk gaps), end-to-end time, pre_ms and post_ms
    (:mod:`frankenstein.design.percentiles`): secondary, not tested."""
    if not d.percentiles:
        return []
    rows = percentile_rows(d.percentiles)
    return [
        "",
        f"{PERCENTILE_CAPTION[0].upper()}{PERCENTILE_CAPTION[1:]}:",
        "",
        *md_table(PERCENTILE_HEADER, rows, "llrrrr"),
    ]


def pass_matrix(d: DesignReport) -> tuple[list[str], list[str], list[list[bool | None]]]:
    """(rows: task and draw, columns: block and arm, cells: passed or None) from the episodes table."""
    cols = sorted({(e.block, e.arm) for e in d.episodes}, key=lambda c: (c[0], c[1] != "served", c[1]))
    rows = sorted({(e.task_id, e.draw) for e in d.episodes})
    got = {(e.task_id, e.draw, e.block, e.arm): e.passed for e in d.episodes}
    cells = [[got.get((t, dr, b, arm)) for b, arm in cols] for t, dr in rows]
    return ([f"{t} #{dr + 1}" for t, dr in rows], [f"{b + 1} {arm[0].upper()}" for b, arm in cols], cells)


def format_pass_matrix(d: DesignReport) -> list[str]:
    rows, cols, cells = pass_matrix(d)
    body = [[r, *("✓" if v else "✗" if v is not None else "—" for v in row)] for r, row in zip(rows, cells)]
    head = ["Pass matrix (✓ pass, ✗ fail; columns: block and arm, S served, C candidate):", ""]
    return [*head, *md_table(["task #draw", *cols], body, "l" + "r" * len(cols))]


# ---------------------------------------------------------------- what didn't work, credits


def went_wrong(d: DesignReport) -> bool:
    if d.word == "unavailable":
        return False
    return kind_of(d.reg.design.kind).went_wrong(d.word)


def vetoed(d: DesignReport) -> bool:
    """A design whose primary rule held but a registered veto did not: it cannot be adopted."""
    return d.analysis is not None and bool(d.analysis.failed_vetoes)


def vetoed_phrase(d: DesignReport) -> str:
    """'confirmed on its primary metric (...), but its veto '...' failed: ...; not adopted.'"""
    assert d.analysis is not None
    stops = "; ".join(v.sentence() for v in d.analysis.failed_vetoes)
    return f"{d.says} on its primary metric ({result_phrase(d)}), but its {stops}. Not adopted."


def format_didnt_work(data: NoteData) -> list[str]:
    """Not-confirmed, stopped and refused designs, with their numbers; failed starts too."""
    out = []
    for d in data.designs:
        head = f"- {code(d.design_id)} ({d.reg.design.kind}, {_part(d)}): "
        if d.facts.stopped:
            out.append(
                head + f"stopped after {d.facts.blocks_run} of {d.facts.blocks} blocks ({d.facts.stopped}); "
                f"over the blocks run: {result_phrase(d)}."
            )
        elif went_wrong(d):
            out.append(head + f"{d.says}: {result_phrase(d)}.")
        elif vetoed(d):
            out.append(head + vetoed_phrase(d))
        if d.facts.starts_failed:
            out.append(head + f"{d.facts.starts_failed} failed or invalid start(s){_failures(d)}.")
    out += [
        f"- {code(p.part)}: {p.status}{_status_reason(p)}." for p in data.parts if p.status in ("parked", "stopped")
    ]
    for r in data.refusals:
        if r.what == "registration":
            where = f" ({code(Path(r.path).name)})" if r.path else ""
            out.append(f"- registration of design {code(r.name)}{where} refused: {r.reason.rstrip('.')}.")
        else:
            out.append(f"- adoption of {code(r.part or '-')} on design {code(r.name)} refused: {r.reason.rstrip('.')}.")
    return [
        "## What didn't work",
        "",
        *(out or ["- Nothing: no design in this note failed, stopped short or was refused."]),
    ]


def _status_reason(p: PartStatus) -> str:
    designs = f"; rests on {', '.join(code(d) for d in p.designs)}" if p.designs else ""
    return f" (step {p.step}): {p.why}{designs}" if p.step is not None else ""


def format_part_statuses(data: NoteData) -> list[str]:
    """Every part by status (served, parked, stopped, tested, never tested), with its reason; written once a
    part has a status step (park, stop, unpark) in the ledger."""
    if not any(e.action in STATUS_ACTIONS for e in data.steps) and not any(
        p.status in ("parked", "stopped") for p in data.parts
    ):
        return []
    rows = [
        [code(p.part), p.status, p.why or "—", ", ".join(code(d) for d in p.designs) or "—", str(p.step or "—")]
        for p in data.parts
    ]
    return ["", "## Parts by status", "", *md_table(["part", "status", "why", "designs", "step"], rows, "lllll")]


def _failures(d: DesignReport) -> str:
    a = d.analysis
    if a is None or not a.failures:
        return ""
    return ": " + "; ".join(f"block {f.block + 1} {f.arm} {f.status} ({f.reason})" for f in a.failures[:5])


def format_overrides(data: NoteData) -> list[str]:
    """Every command that went on under ``--force --why`` past a failed verification: none, no section."""
    if not data.overrides:
        return []
    rows = [[str(o.seq), code(o.command), o.why, o.problem, o.at] for o in data.overrides]
    return [
        "## Verification overridden",
        "",
        f"{len(data.overrides)} command(s) went on under `--force --why` although the campaign failed "
        "verification (every override recorded, not only those in this note's period); what they read or "
        "wrote rests on evidence that had been changed:",
        "",
        *md_table(["override", "command", "why", "what failed", "at"], rows, "lllll"),
    ]


def format_verification(data: NoteData) -> list[str]:
    """The line under the title when the campaign fails verification as the note is written."""
    if data.verification is None:
        return []
    last = data.overrides[-1] if data.overrides and data.overrides[-1].command == "report" else None
    forced = f" under `--force --why` {last.why!r} (override {last.seq})" if last is not None else ""
    return [
        f"**Warning: this campaign fails verification** ({data.verification.rstrip('.')}). This note was "
        f"written{forced} all the same: numbers that rest on the broken record are not the ones recorded.",
        "",
    ]


def format_served(data: NoteData) -> list[str]:
    """The recipe `frank serve` launches, as adopt froze it, with its pinned files and anything that now
    disagrees with it; nothing for a campaign with nothing frozen (the base recipe, or steps from before)."""
    s = data.served_recipe
    if s is None or not s.frozen:
        return []
    r = s.recipe
    lines = [
        "## Served recipe",
        "",
        f"What `frank serve` launches: {code(' + '.join([s.base, *s.parts]))}, {s.why}; engine {code(r.engine)}, "
        f"model {code(r.model)}, args {code(' '.join(r.args) or '-')}.",
    ]
    if s.pins:
        lines += ["", "Its pinned files, each checked by sha256 before `frank serve` launches it:", ""]
        lines += [f"- {p.role} {code(Path(p.path).name)} sha256 {code(p.sha256[:16])}" for p in s.pins]
    if s.problems:
        lines += ["", "**frank.toml or a pinned file now disagrees with it** (`frank serve` refuses):", ""]
        lines += [f"- {p}" for p in s.problems]
    return lines


def format_credits(data: NoteData) -> list[str]:
    if not data.credits:
        return [
            "## Credits",
            "",
            f"No parts served: the served recipe is the base recipe {code(data.base)}.",
            *format_piece_credits(data),
        ]
    rows = [
        [
            code(c.part) + (f" ({c.credit})" if c.credit else ""),
            c.fork or "not given",
            c.commit or "not given",
            c.author or "not given",
            c.licence or "not given",
            f"step {c.step}" if c.step else "base recipe",
        ]
        for c in data.credits
    ]
    return [
        "## Credits",
        "",
        "Parts in the served recipe now, with their provenance from `frank.toml`:",
        "",
        *md_table(["part", "fork", "commit", "author", "licence", "adopted"], rows, "llllll"),
        *format_piece_credits(data),
    ]


def format_piece_credits(data: NoteData) -> list[str]:
    """The served base recipe, the models, engines and weight formats `frank.toml` credits, as given."""
    given = [p for p in data.pieces if p.provenance != Provenance()]
    if not given:
        return []
    rows = [
        [
            p.kind,
            code(p.name),
            p.provenance.credit or "not given",
            *(v or "not given" for v in (p.provenance.fork, p.provenance.commit, p.provenance.author)),
            p.provenance.licence or "not given",
        ]
        for p in given
    ]
    return [
        "",
        "The recipe, model, engine and formats, with their provenance from `frank.toml`:",
        "",
        *md_table(["piece", "name", "for", "source", "commit or version", "author", "licence"], rows, "lllllll"),
    ]


# ---------------------------------------------------------------- the note


def render_note(data: NoteData, plots: Plots) -> list[str]:
    since = f"since {data.since}" if data.since else "since the campaign began"
    lines = [
        f"# {data.header.title or f'Progress note: {data.campaign}'}",
        "",
        *format_byline(data),
        *format_verification(data),
        f"Served recipe now: {code(' + '.join([data.base, *data.served]))}. This note covers the designs "
        f"registered, ledger steps and refusals {since}: {len(data.designs)} design(s), {len(data.steps)} "
        "ledger step(s). Every number comes from the campaign's store, analysed under each design's registered rule.",
        "",
        *format_summary(data),
    ]
    for d in data.designs:
        lines += ["", *format_design(d, data.base, plots.get(d.design_id, {}))]
    lines += ["", *format_didnt_work(data)]
    lines += format_part_statuses(data)
    if data.overrides:
        lines += ["", *format_overrides(data)]
    served = format_served(data)
    if served:
        lines += ["", *served]
    lines += ["", *format_credits(data)]
    if data.header.assistance:
        lines += ["", "## Assistance and method", "", data.header.assistance.strip()]
    return lines


def format_byline(data: NoteData) -> list[str]:
    """frank.toml's ``[note]`` series and authors under the title, as given."""
    h = data.header
    words = [h.series.strip()] if h.series.strip() else []
    if h.authors:
        words.append("By " + _and(h.authors) + ".")
    return [" ".join(w if w.endswith((".", "!", "?")) else w + "." for w in words), ""] if words else []


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def plan_plots(data: NoteData) -> Plots:
    """Which PNGs the note shows, by design: paired blocks where there are values, KL where the fidelity
    module gave it, the pass matrix where episodes were recorded."""
    out: Plots = {}
    for d in data.designs:
        p: dict[str, str] = {}
        if (
            d.analysis is not None
            and d.analysis.verdict is not None
            and d.analysis.verdict.data == "ratio"
            and _arm_values(d, d.reg.design.primary_metric)
        ):
            p["blocks"] = f"{slug(d.design_id)}-blocks.png"
        if d.analysis is not None and d.analysis.kl and d.analysis.kl.get("candidate"):
            p["kl"] = f"{slug(d.design_id)}-kl.png"
        if d.episodes:
            p["passes"] = f"{slug(d.design_id)}-passes.png"
        if p:
            out[d.design_id] = p
    return out


def run_orders(starts: list[StartRow], blocks: int) -> list[list[str]]:
    """Per block (0-based), the arms of its recorded starts in the order they ran: by ``started_at``, then by
    start id (the order they were written). A resumed or retried block, or one run out of the registered order,
    is labelled as it ran, not as it was scheduled; a block with no recorded start has an empty order."""
    out: list[list[StartRow]] = [[] for _ in range(blocks)]
    for r in starts:
        if 0 <= r.block < blocks:
            out[r.block].append(r)
    return [[r.arm for r in sorted(rs, key=lambda r: (r.started_at, r.id))] for rs in out]


def draw_plots(
    data: NoteData, plots: Plots, out_dir: Path, orders: dict[str, list[list[str]]] | None = None
) -> list[Path]:
    """The PNGs of :func:`plan_plots`; ``orders``: design id -> the recorded run order per block
    (:func:`run_orders`), which labels each block plot's points (none given: no run-order labels)."""
    written = []
    by_id = {d.design_id: d for d in data.designs}
    for did, files in plots.items():
        d = by_id[did]
        metric = d.reg.design.primary_metric
        if "blocks" in files:
            vals = _arm_values(d, metric)
            blocks = list(range(d.reg.design.blocks))
            written.append(
                P.plot_paired_blocks(
                    out_dir / files["blocks"],
                    [str(b + 1) for b in blocks],
                    [vals.get(b, {}).get("served") for b in blocks],
                    [vals.get(b, {}).get("candidate") for b in blocks],
                    d.reg.label(metric),
                    f"{did}: {metric} per block",
                    orders=(orders or {}).get(did),
                )
            )
        if "kl" in files and d.analysis is not None and d.analysis.kl:
            f = d.analysis.kl
            written.append(
                P.plot_kl(
                    out_dir / files["kl"],
                    f["candidate"],
                    f.get("noise"),
                    tolerance=f.get("tolerance"),
                    threshold=f.get("threshold"),
                    title=f"{did}: KL per position",
                )
            )
        if "passes" in files:
            rows, cols, cells = pass_matrix(d)
            written.append(P.plot_pass_matrix(out_dir / files["passes"], rows, cols, cells, f"{did}: pass matrix"))
    return written


def since_text(since: date | datetime | str | None) -> str | None:
    """An ISO date or timestamp prefix, compared as text with the stored UTC timestamps."""
    if since is None or isinstance(since, str):
        return since
    if isinstance(since, datetime):
        return since.strftime("%Y-%m-%dT%H:%M:%S")
    return since.isoformat()


def write_report(campaign: Campaign, out_dir: str | Path, since: date | datetime | str | None = None) -> Path:
    """Write ``note.md``, ``note.json`` (its tables, machine-readable), its PNG plots and ``note.html`` (the
    same note as one file, plots inline) into ``out_dir``; returns the note's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = collect(campaign, since_text(since))
    plots = plan_plots(data)
    orders = {  # the block plots' run-order labels, as recorded
        d.design_id: run_orders(campaign.store.starts_of(d.design_id), d.reg.design.blocks)
        for d in data.designs
        if "blocks" in plots.get(d.design_id, {})
    }
    draw_plots(data, plots, out, orders)
    with capture_tables() as tables:
        lines = render_note(data, plots) + observed_lines(campaign, data.since) + draw_lines(campaign, data.since)
    note = out / NOTE_NAME
    note.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / NOTE_JSON).write_text(dumps(note_doc(data, tables, lines)), encoding="utf-8")
    images = {name: (out / name).read_bytes() for files in plots.values() for name in files.values()}
    (out / NOTE_HTML).write_text(note_html(lines, images), encoding="utf-8")
    return note
