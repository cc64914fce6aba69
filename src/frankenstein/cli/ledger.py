"""Ledger and report commands: served, adopt, revert, park, stop, unpark, report."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer

from frankenstein.cli.app import app
from frankenstein.cli.design import verified_or_warn, warn_overrides

CAMPAIGN = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder.")


@app.command()
def served(
    campaign: Path = CAMPAIGN,
    force: bool = typer.Option(
        False, "--force", help="Show it although the campaign fails verification (needs --why)."
    ),
    why: str | None = typer.Option(None, "--why", help="Why it is forced; recorded in the evidence chain."),
) -> None:
    """Show the served recipe as the last adopt froze it (with its pinned files, and anything in frank.toml or
    on disk that now disagrees with it), then every adopt and revert step. The campaign is verified first
    (kept heads included: FRANK_EXPECT_HEAD, [integrity] head_mirror).

    Example: frank served -c my-campaign
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.ledger import format_served

    with open_campaign(campaign) as c:
        verified_or_warn(c, "served", force=force, why=why)
        lines = format_served(c)
    for line in lines:
        typer.echo(line)


@app.command()
def adopt(
    part: str = typer.Argument(..., help="Part name from frank.toml."),
    design: str = typer.Option(
        ..., "--design", "-d", help="The registered design whose confirmed verdict lets the part in."
    ),
    force: bool = typer.Option(False, "--force", help="Adopt although the evidence is refused (needs --why)."),
    why: str | None = typer.Option(None, "--why", help="Why it is forced; recorded in the ledger."),
    scope: list[str] = typer.Option(
        [],
        "--scope",
        help="What it is adopted for, KEY=VALUE, repeatable: concurrency, context, gpus, workload, engine_version, "
        "note (frank serve holds concurrency).",
    ),
    campaign: Path = CAMPAIGN,
) -> None:
    """Add a part to the served recipe: only on a confirmed verdict whose gates passed; one step, with its scope.

    Example: frank adopt draft --design draft-speed-1 --scope concurrency=1 --scope "note=single stream" -c my-campaign
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.ledger import adopt as do_adopt
    from frankenstein.ledger import describe_parts, format_scope
    from frankenstein.scope import adopted_for, parse_scope, scope_words

    adopted = parse_scope(scope)  # a bad --scope is refused before anything is read or written
    with open_campaign(campaign) as c:
        seen = len(c.store.overrides())
        e = do_adopt(
            c, part, design, force=force, why=why, scope=adopted
        )  # verifies first; a forced failure is recorded
        warn_overrides(c, seen)
        now = describe_parts(c, e.parts)
    typer.echo(f"step {e.seq}: adopted {part} on design {design}{' (FORCED)' if e.forced else ''}; served: {now}")
    if format_scope(e.scope):
        typer.echo("  " + format_scope(e.scope))
    if scope_words(adopted_for(e)):
        typer.echo("  adopted for: " + scope_words(adopted_for(e)))
    if adopted.concurrency is None and (n := adopted_for(e).get("concurrency")) is not None:
        typer.echo(
            f"  concurrency {n} recorded as its scope: design {design} ran at replay.concurrency = {n} "
            "(--scope concurrency=N to say otherwise)"
        )


@app.command()
def revert(
    why: str | None = typer.Option(None, "--why", help="Why; recorded in the ledger."),
    campaign: Path = CAMPAIGN,
    force: bool = typer.Option(False, "--force", help="Revert although the campaign fails verification (needs --why)."),
) -> None:
    """Undo exactly the last ledger step (a revert of a revert re-applies it).

    Example: frank revert -c my-campaign --why "slower at concurrency 4"
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.ledger import describe_parts
    from frankenstein.ledger import revert as do_revert

    with open_campaign(campaign) as c:
        seen = len(c.store.overrides())
        e = do_revert(c, why=why, force=force)  # verifies first; a forced failure is recorded
        warn_overrides(c, seen)
        now = describe_parts(c, e.parts)
    typer.echo(f"step {e.seq}: undid step {e.scope['undoes']} ({e.scope['undoes_action']} {e.part}); served: {now}")


STATUS_WHY = typer.Option(..., "--why", help="Why; recorded in the ledger step.")
STATUS_DESIGNS = typer.Option(None, "--design", "-d", help="A registered design it rests on (repeatable).")


def _status_step(action: str, part: str, why: str, designs: list[str] | None, campaign: Path) -> None:
    """One park/stop/unpark step (frankenstein.part_status), printed as one line."""
    from frankenstein import part_status
    from frankenstein.campaign import open_campaign

    step = {"park": part_status.park, "stop": part_status.stop, "unpark": part_status.unpark}[action]
    with open_campaign(campaign) as c:
        e = step(c, part, why, list(designs or []))
    rests = f" (rests on {', '.join(e.scope['designs'])})" if e.scope.get("designs") else ""
    typer.echo(f"step {e.seq}: {e.scope['status']} {part}{rests}: {e.why}")


@app.command()
def park(
    part: str = typer.Argument(..., help="Part name from frank.toml."),
    why: str = STATUS_WHY,
    design: list[str] | None = STATUS_DESIGNS,
    campaign: Path = CAMPAIGN,
) -> None:
    """Set a part aside (it may come back): one ledger step with its reason and the designs it rests on.

    Example: frank park work-claiming --why "8.2-8.7% longer per job on the CPU benchmark" -d claim-bench-1
    """
    _status_step("park", part, why, design, campaign)


@app.command()
def stop(
    part: str = typer.Argument(..., help="Part name from frank.toml."),
    why: str = STATUS_WHY,
    design: list[str] | None = STATUS_DESIGNS,
    campaign: Path = CAMPAIGN,
) -> None:
    """Give a part up: one ledger step with its reason and the designs it rests on.

    Example: frank stop own-kernel --why "no build reached the 0.079 ms saving required" -d kernel-screen-1
    """
    _status_step("stop", part, why, design, campaign)


@app.command()
def unpark(
    part: str = typer.Argument(..., help="Part name from frank.toml."),
    why: str = STATUS_WHY,
    design: list[str] | None = STATUS_DESIGNS,
    campaign: Path = CAMPAIGN,
) -> None:
    """Take a parked or stopped part back into play: one ledger step with its reason.

    Example: frank unpark work-claiming --why "new job shapes from the 1M-token workload"
    """
    _status_step("unpark", part, why, design, campaign)


@app.command()
def report(
    out: Path = typer.Option(..., "--out", "-o", help="Folder for note.md and its PNG plots."),
    since: datetime | None = typer.Option(
        None,
        "--since",
        formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"],
        help="Only designs, steps and refusals from this UTC date on.",
    ),
    campaign: Path = CAMPAIGN,
    force: bool = typer.Option(
        False, "--force", help="Write the note although the campaign fails verification (needs --why)."
    ),
    why: str | None = typer.Option(None, "--why", help="Why it is forced; recorded in the evidence chain."),
) -> None:
    """Write the progress note: summary, one section per design, what didn't work, credits; with PNG plots.

    Example: frank report --out reports/week-49 --since 2025-12-01 -c my-campaign
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.report import write_report

    day = since.date() if since is not None and since.time() == datetime.min.time() else since
    with open_campaign(campaign) as c:
        verified_or_warn(c, "report", force=force, why=why)
        path = write_report(c, out, since=day)
    typer.echo(str(path))
