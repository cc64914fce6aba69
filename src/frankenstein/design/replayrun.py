"""``frank replay``'s use case: one start of a recipe over a workload, outside any design, recorded in the
campaign with its phases, cache folders, machine and load as a design's start has them; and the lines it
prints. The CLI parses, opens the progress display, calls these and prints.

    replay_recipe(campaign, name, parts, url) -> (recipe, unapplied)
                          the recipe to replay: ``served`` is the served recipe's name; without a URL its engine
                          is checked before anything starts (naming frank.toml), with one it is the running
                          server's (engine external) and ``unapplied`` names what of the launch that server lacks
    replay_start(campaign, recipe, workload, settings, progress) -> Replayed
                          run, measure and record the start (the frank.toml [metrics.NAME] a replay can give
                          added to its metrics)
    replay_lines(replayed, workload, url) -> list[str]
                          the start's status, metrics, reproduction, prompt-count note and latency percentiles
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design import phases
from frankenstein.design.caches import folder_applied
from frankenstein.design.percentiles import percentile_lines, rows_percentiles
from frankenstein.design.start import StartOutcome, measure_start, record_start, watched
from frankenstein.engines import adapter_class
from frankenstein.engines.external import NOT_FRESH, external_recipe, unapplied
from frankenstein.measure.metrics import names
from frankenstein.measure.usermetrics import start_values
from frankenstein.workload.replay import ReplaySettings, prompt_count_note, reproduced
from frankenstein.workload.trace import Workload


@dataclass(frozen=True)
class Replayed:
    """A recorded replay start: its id, its outcome, and the user metrics it gave (frank.toml order)."""

    start_id: int
    out: StartOutcome
    user: tuple[str, ...]


def replay_recipe(c: Campaign, name: str, parts: Sequence[str], url: str | None) -> tuple[ResolvedRecipe, list[str]]:
    """The recipe ``name`` (``served``: the served recipe) with ``parts``; with ``url``, pointed at that running
    server, and what of its launch the server was not given (the URL is checked first)."""
    r = c.recipe(c.config.served if name == "served" else name, parts)
    if url is None:  # an unknown engine is said before anything starts, naming the campaign's file
        adapter_class(r, c.root / "frank.toml")
        return r, []
    dropped = unapplied(r)
    return external_recipe(r, url), dropped


def replay_start(
    c: Campaign,
    r: ResolvedRecipe,
    wl: Workload,
    settings: ReplaySettings,
    progress: Callable[[int, int], None] | None,
) -> Replayed:
    """One start of ``r`` over ``wl``, watched and recorded in the campaign's store."""
    with (
        phases.recording(),  # phases, cache folders, machine and load, as a design's start has them
        folder_applied(c, r, "replay"),
    ):
        out = watched(lambda: measure_start(r, wl, settings, c.logs, progress))
    user = start_values(c.config.metrics, out.rows, *out.scrapes.flat())  # frank.toml [metrics.NAME] a replay can give
    out.metrics.update(user)
    return Replayed(record_start(c.store, out), out, tuple(user))


def replay_lines(done: Replayed, wl: Workload, url: str | None) -> list[str]:
    """What ``frank replay`` prints without --json or --csv."""
    out = done.out
    lines = [f"start {done.start_id}: {out.status}{' (' + out.reason + ')' if out.reason else ''}"]
    if url is not None:
        lines.append(f"  not a fresh start: {NOT_FRESH} ({url})")
    for key in (*names(scope="step"), *names(scope="request"), *done.user):
        v = out.metrics.get(key)
        lines.append(f"  {key:<20} {'-' if v is None else f'{v:.4f}'}")
    matched, compared = reproduced(out.rows)
    if compared:
        lines.append(f"  reproduced the recorded text on {matched} of {compared} turns")
    if note := prompt_count_note(list(wl.turns[: len(out.rows)]), out.rows):
        lines.append(f"  note: {note}")
    if per := rows_percentiles(out.rows):
        lines += percentile_lines({out.recipe.name: per})
    return lines
