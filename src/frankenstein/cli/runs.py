"""Commands that run engines over workloads: replay (and, with designs, register/run/verify)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from frankenstein.cli.app import app
from frankenstein.cli.design import verified_or_warn

if TYPE_CHECKING:
    from frankenstein.campaign import Campaign
    from frankenstein.progress import RunProgress


@app.command()
def replay(
    recipe: str = typer.Argument(..., help="Recipe name from frank.toml (e.g. base, or served)."),
    workload: Path = typer.Argument(..., help="Workload JSONL file."),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder."),
    part: list[str] = typer.Option([], "--part", "-p", help="Add a part to the recipe (repeatable)."),
    concurrency: int = typer.Option(1, min=1, help="Requests in flight (1 = one at a time)."),
    warmup: int = typer.Option(1, min=0, help="Warm-up turns sent first and not measured."),
    max_turns: int = typer.Option(0, min=0, help="Replay only the first N turns (0 = all)."),
    url: str | None = typer.Option(
        None, "--url", help="Replay against a server already running at http://HOST:PORT (engine external)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the start and its per-turn rows as JSON (schema frank.replay, docs/exports.md)."
    ),
    as_csv: bool = typer.Option(False, "--csv", help="Print one CSV row per turn, with the start's metrics."),
    heartbeat: float | None = typer.Option(
        None,
        "--heartbeat",
        help="Seconds between progress lines when stderr is not a terminal (default: $FRANK_HEARTBEAT_S, else 30).",
    ),
) -> None:
    """Replay a workload against one fresh start of a recipe (or, with --url, a server already running); store
    per-turn rows and print the start's metrics and latency percentiles.

    Progress goes to stderr (a bar on a terminal; otherwise a line as the start begins and ends and a
    heartbeat with the turns done); stdout gets the metrics, or the --json/--csv export.

    With --url the turns go to a server already running (engine external: not started or stopped by frank,
    so the start is not fresh).

    Example: frank replay base workloads/demo.jsonl -c my-campaign --part draft --json
    """
    if as_json and as_csv:
        raise typer.BadParameter("--json or --csv, not both")
    if url is not None and part:
        raise typer.BadParameter(
            "parts cannot be applied to a server frank did not start (--url); start it with them yourself or drop --part",
            param_hint="--part",
        )
    from frankenstein.campaign import open_campaign
    from frankenstein.design.replayrun import replay_lines, replay_recipe, replay_start
    from frankenstein.progress import RunProgress, heartbeat_seconds
    from frankenstein.workload.replay import ReplaySettings
    from frankenstein.workload.trace import load_trace

    try:
        every = heartbeat_seconds(heartbeat)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--heartbeat") from None
    wl = load_trace(workload)
    settings = ReplaySettings(concurrency=concurrency, warmup_turns=warmup, max_turns=max_turns or None)
    with open_campaign(campaign) as c:
        r, dropped = replay_recipe(c, recipe, part, url)
        if dropped:
            typer.echo(
                f"frank replay: recipe {r.name!r} is not launched with --url, so these are not applied to the "
                f"server and the start is recorded without them: {', '.join(dropped)}",
                err=True,
            )
        with RunProgress(1, heartbeat_s=every, prefix="frank replay") as run, run.slot(f"replay {r.name}") as progress:
            done = replay_start(c, r, wl, settings, progress)
    if as_json or as_csv:
        from frankenstein.report.export import dumps, replay_csv, replay_doc

        doc = dumps(replay_doc(done.start_id, done.out)) if as_json else replay_csv(done.start_id, done.out)
        typer.echo(doc, nl=False)
    else:
        for line in replay_lines(done, wl, url):
            typer.echo(line)
    if done.out.status != "ok":
        raise typer.Exit(1)


@app.command()
def register(
    design: Path = typer.Argument(..., help="Design file (TOML)."),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder."),
) -> None:
    """Register a design: validate, freeze recipes, pin the workload hash, draw the seed, fix every block's arm order.

    Example: frank register designs/draft.toml -c my-campaign
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.design.dryrun import requirement_line
    from frankenstein.design.registry import register as do_register

    with open_campaign(campaign) as c:
        reg = do_register(c, design)
    typer.echo(f"registered {reg.design_id} (hash {reg.design_hash[:16]}, seed {reg.seed})")
    for b, order in enumerate(reg.schedule):
        typer.echo(f"  block {b + 1}: {' → '.join(order)}")
    need = requirement_line(reg.design)
    if need:
        typer.echo(need)


@app.command()
def verify(
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder."),
    expect_head: str | None = typer.Option(
        None,
        "--expect-head",
        help="A head kept elsewhere: 'SEQ HASH' (or verify's line, or a file holding it, e.g. a copy of "
        "frank.head); the chain must still hold that record with that hash.",
    ),
) -> None:
    """Check the registry, every stored design and design file, the evidence chain over every start, turn, ledger
    step and refusal (with its head file, frank.head), the registered slots and every pinned workload; with
    --expect-head, also that the chain still holds the head you kept elsewhere (nothing in the campaign folder,
    the head file included, can then be rewritten or replaced quietly). FRANK_EXPECT_HEAD, if set, is such a kept
    head too, checked by every command that verifies (analyze, adopt, revert, run, serve, report, verify).

    Example: frank verify -c my-campaign --expect-head "57 3f2a…"
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.design.registry import kept_heads
    from frankenstein.design.registry import verify as do_verify

    kept, source = expect_head, "--expect-head"
    if expect_head is not None and Path(expect_head).is_file():
        source = expect_head
        try:
            kept = Path(expect_head).read_text(errors="replace")
        except OSError as exc:
            raise typer.BadParameter(f"{expect_head}: {exc.strerror}", param_hint="--expect-head") from None
    with open_campaign(campaign) as c:
        lines = do_verify(c)  # also checks FRANK_EXPECT_HEAD, if set
        head = c.store.chain_head()
        sources = [*([(kept, source)] if kept is not None else []), *kept_heads(os.environ)]
        matched = [(c.store.verify_kept(text, where), where) for text, where in sources]
    for line in lines:
        typer.echo(line)
    typer.echo(f"registry verified: {len(lines)} designs")
    if head is not None:
        typer.echo(f"evidence chain verified: {head.seq} records, head {head.row_hash} (keep a copy elsewhere)")
    for (link, n), where in matched:
        named = "" if where == "--expect-head" or where == expect_head else f" ({where})"
        typer.echo(f"kept head verified{named}: chain record {link.seq} of {n} is {link.row_hash[:16]}…, as kept")


@app.command()
def run(
    design_id: str = typer.Argument(..., help="A registered design id (or, with --dry-run, a design file)."),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder."),
    resume: bool = typer.Option(False, "--resume", help="Continue at the first unfinished start."),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print each arm's command line and start nothing (a design file is checked, not registered).",
    ),
    force: bool = typer.Option(False, "--force", help="Resume although the campaign fails verification (needs --why)."),
    why: str | None = typer.Option(None, "--why", help="Why it is forced; recorded in the evidence chain."),
    heartbeat: float | None = typer.Option(
        None,
        "--heartbeat",
        help="Seconds between progress lines during a start when stderr is not a terminal "
        "(default: $FRANK_HEARTBEAT_S, else 30).",
    ),
    ray: str | None = typer.Option(
        None,
        "--ray",
        help='Run the blocks on a Ray cluster: "auto" or HOST:PORT (default: [cluster] ray in frank.toml; '
        "docs/cluster.md).",
    ),
) -> None:
    """Run a registered design: each block, each arm in its registered order, one fresh engine start each.

    Progress goes to stderr (bars with ETA on a terminal; plain lines as each start begins and ends, and a
    heartbeat, in a log); stdout gets one result line per start and the summary.

    Example: frank run draft-vs-base-1 -c my-campaign --resume
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.cluster.need import ray_address
    from frankenstein.design.registry import get
    from frankenstein.design.runner import run_design, unfinished
    from frankenstein.progress import RunProgress, heartbeat_seconds

    if dry_run:
        show_launches(campaign, design_id)
        return
    try:
        every = heartbeat_seconds(heartbeat)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--heartbeat") from None
    with open_campaign(campaign) as c:
        verified_or_warn(c, "run --resume" if resume else "run", force=force, why=why)
        address = ray_address(ray, c.config)
        todo, _ = unfinished(c, get(c, design_id), resume)
        with RunProgress(len(todo), heartbeat_s=every) as progress:
            if address is not None:
                summary = on_cluster(c, design_id, address, resume=resume, progress=progress)
            else:
                summary = run_design(c, design_id, resume=resume, echo=typer.echo, progress_factory=progress.slot)
    typer.echo(summary)


def show_launches(campaign: Path, design: str) -> None:
    """``frank run --dry-run``: each arm's command line; nothing starts, nothing is written."""
    from frankenstein.campaign import open_campaign
    from frankenstein.design.dryrun import design_launches, launch_lines, requirement_line

    with open_campaign(campaign) as c:
        source, frozen, launches = design_launches(c, design)
    typer.echo(f"would launch, for {source}:")
    for launch in launches:
        for line in launch_lines(launch):
            typer.echo(line)
    need = requirement_line(frozen.design)
    if need:
        typer.echo(need)


def on_cluster(c: Campaign, design_id: str, address: str, *, resume: bool, progress: RunProgress) -> str:
    """``frank run --ray``: Ray is imported only here, after saying how to install it if it is missing."""
    from frankenstein.cluster.need import need_ray

    need_ray()
    from frankenstein.cluster.driver import run_on_cluster

    return run_on_cluster(
        c, design_id, address, resume=resume, echo=typer.echo, gpus=c.config.cluster.gpus, progress=progress
    )
