"""The note's "Observations after adoption": what ``frank serve`` saw of its traffic before and after
each ledger step, always labelled as observational.

``frank serve`` keeps one row per answered request, tagged with the ledger step it served
(:mod:`frankenstein.regioncache.observe`, ``Store.served_requests``). For each ledger step this section
puts side by side, per route (``count_tokens``, ``chat``, ...), the requests served under the step
before it and under the step itself: how many, the median milliseconds, how many got an error status
(4xx/5xx) and how many the engine failed; and how many requests fell outside the scope the served recipe
was adopted for (a prompt longer than its ``context``). Those are **different occasions**: other traffic, other
prompts, another machine load. It is never a verdict (the registered designs are) and says so in
every section.

With ``since`` (``frank report --since``) the section keeps the ledger steps at or after it, like the rest of
the note. A step's two sides are not cut at that date: its "before" side is every request served under the step
before it, even when that step (and so some or all of its traffic) came before ``since``, because that is what
the step replaced; its "after" side is every request served under the step itself. A step before ``since``
gets no section of its own. Without any ledger step, the base recipe's requests are counted (those at or after
``since``).

    observed_lines(campaign, since=None) -> list[str]      Markdown; empty when there is nothing to show
    draw_lines(campaign, since=None) -> list[str]          agent draws run outside designs, per ledger step

Agent draws run outside any design (``frank tasks draw --campaign``, ``Store.observed_draws``) get their own
section, "Agent draws outside designs (observational)": per ledger step served when they ran, the draws,
episodes, passes, engine errors and other episode errors, and one sentence ("5 draws since step 1, 30
episodes, 25 passed; no engine or episode error"); never set beside a design's result.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

from frankenstein.campaign import Campaign
from frankenstein.report.markdown import code, md_table, num
from frankenstein.store import LedgerEntry, ObservedDraw, ServedRequest

LABEL = "different occasions, not a controlled comparison"
HEADER = (
    "route",
    "before: requests",
    "before: median ms",
    "before: error status",
    "before: engine errors",
    "after: requests",
    "after: median ms",
    "after: error status",
    "after: engine errors",
)


def by_step(rows: list[ServedRequest]) -> dict[int | None, dict[str, list[ServedRequest]]]:
    """{ledger step seq (None: before any step): {route: requests}}."""
    out: dict[int | None, dict[str, list[ServedRequest]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        out[r.step][r.route].append(r)
    return out


def _cells(rows: list[ServedRequest]) -> list[str]:
    if not rows:
        return ["0", "—", "—", "—"]
    return [
        str(len(rows)),
        num(median(r.ms for r in rows)),
        str(sum(1 for r in rows if r.status >= 400)),
        str(sum(1 for r in rows if r.engine_error)),
    ]


def _step_title(e: LedgerEntry) -> str:
    design = f", design {code(e.design_id)}" if e.design_id else ""
    return f"Step {e.seq}: {e.action} {code(e.part)}{design} ({e.at[:16].replace('T', ' ')} UTC)"


def observed_lines(campaign: Campaign, since: str | None = None) -> list[str]:
    """The section (module docstring); ``since`` is an ISO date or timestamp prefix (inclusive). No section when
    ``frank serve`` recorded no request, or none on either side of a step at or after ``since``."""
    rows = campaign.store.served_requests()
    if not rows:
        return []
    lower = since or ""
    every = campaign.store.ledger_steps()
    served = by_step(rows)
    pairs: list[tuple[LedgerEntry, int | None]] = []  # (step at or after since, the step it follows)
    previous: int | None = None
    for e in every:
        if e.at >= lower and (served.get(previous) or served.get(e.seq)):
            pairs.append((e, previous))
        previous = e.seq
    base = [r for rs in served.get(None, {}).values() for r in rs if r.at >= lower] if not every else []
    if not pairs and not base:
        return []
    shown = {s for e, p in pairs for s in (p, e.seq)}
    total = len(base) + sum(len(v) for s in shown for v in served.get(s, {}).values())
    period = f" at or after {since}" if since else ""
    counted = f", on the two sides of the ledger steps{period}" if since and pairs else ""
    lines = [
        "",
        "## Observations after adoption (observational)",
        "",
        f"Requests `frank serve` answered, by the ledger step that was served ({total} in all{counted}). These are "
        f"{LABEL}: the traffic, its prompts and the machine's load differ between the two sides, so a "
        "difference here is not evidence that a step changed anything (the registered designs above are). "
        "Milliseconds run from the request line to the last byte sent; an engine error is a 5xx from the "
        "engine or no answer.",
    ]
    for e, prev in pairs:
        before, after = served.get(prev, {}), served.get(e.seq, {})
        was = "the base recipe (before any step)" if prev is None else f"step {prev}"
        lines += ["", f"### {_step_title(e)}", ""]
        lines.append(f"Before: served under {was}; after: served under step {e.seq}. Observational: {LABEL}.")
        lines.append("")
        routes = sorted(set(before) | set(after))
        table = [[r, *_cells(before.get(r, [])), *_cells(after.get(r, []))] for r in routes]
        lines += md_table(HEADER, table, "lrrrrrrrr")
        lines += outside_lines(e.seq, after)
    if base:
        lines += [
            "",
            f"No ledger step yet: {len(base)} request(s) served{period} under the base recipe, nothing to set "
            "them beside.",
        ]
    return lines


def outside_lines(seq: int, after: dict[str, list[ServedRequest]]) -> list[str]:
    """How many requests served under step ``seq`` fell outside the scope the served recipe was adopted for
    (``adopt --scope``; ``frank serve`` keeps how), with the first such; nothing when none did."""
    outside = sorted((r for rs in after.values() for r in rs if r.outside_scope), key=lambda r: r.at)
    if not outside:
        return []
    return [
        "",
        f"Outside the adopted scope: {len(outside)} request(s) served under step {seq} (first: "
        f"{outside[0].outside_scope}). Observational: the scope says where the part was shown to hold, not "
        "what happened to these requests.",
    ]


DRAW_HEADER = ("served", "draws", "episodes", "passed", "engine errors", "episode errors")


def draw_lines(campaign: Campaign, since: str | None = None) -> list[str]:
    """The agent-draw section (module docstring): draws at or after ``since``; none, no section."""
    draws = [d for d in campaign.store.observed_draws() if d.at >= (since or "")]
    if not draws:
        return []
    steps = {e.seq: e for e in campaign.store.ledger_steps()}
    groups: dict[int | None, list[ObservedDraw]] = defaultdict(list)
    for d in draws:
        groups[d.step].append(d)
    order = sorted(groups, key=lambda s: -1 if s is None else s)
    rows = [[_served(steps, s), *_draw_cells(groups[s])] for s in order]
    return [
        "",
        "## Agent draws outside designs (observational)",
        "",
        f"Agent-task draws run against the served recipe outside any design (`frank tasks draw --campaign`), by "
        f"the ledger step served when they ran. These are {LABEL}, and no design's result rests on them.",
        "",
        *(f"- {draw_sentence(_served(steps, s), groups[s])}" for s in order),
        "",
        *md_table(DRAW_HEADER, rows, "lrrrrr"),
    ]


def _served(steps: dict[int, LedgerEntry], seq: int | None) -> str:
    if seq is None:
        return "the base recipe"
    e = steps.get(seq)
    return f"step {seq}" + (f" ({e.action} {code(e.part)})" if e is not None else "")


def _draw_cells(draws: list[ObservedDraw]) -> list[str]:
    sums = (
        sum(d.episodes for d in draws),
        sum(d.passed for d in draws),
        sum(d.engine_errors for d in draws),
        sum(d.episode_errors for d in draws),
    )
    return [str(len(draws)), *(str(n) for n in sums)]


def draw_sentence(served: str, draws: list[ObservedDraw]) -> str:
    """'Under step 1 (adopt `draft`): 5 draws, 30 episodes, 25 passed; no engine or episode error.'"""
    episodes = sum(d.episodes for d in draws)
    passed = sum(d.passed for d in draws)
    engine, other = sum(d.engine_errors for d in draws), sum(d.episode_errors for d in draws)
    errors = (
        "no engine or episode error"
        if not engine and not other
        else f"{engine} engine error(s), {other} other episode error(s)"
    )
    return f"Under {served}: {len(draws)} draw(s), {episodes} episodes, {passed} passed; {errors}."
