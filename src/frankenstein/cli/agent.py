"""Agent-task commands: ``frank tasks validate``, ``frank tasks list``, ``frank tasks draw``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from frankenstein.cli.app import app

tasks_app = typer.Typer(
    help="Agent tasks: validate a suite, list it, run one draw against an engine.", no_args_is_help=True
)
app.add_typer(tasks_app, name="tasks")

_DIR_HELP = "A suite folder (task folders inside) or one task folder; default: the shipped suite."


def _load(directory: Path | None, ids: list[str] | None = None) -> list[Any]:
    from frankenstein.agent.tasks import load_suite, load_task, shipped_suite

    folder = directory or shipped_suite()
    if (folder / "task.toml").is_file():
        return [load_task(folder)]
    return load_suite(folder, ids or None)


@tasks_app.command("validate")
def validate_cmd(
    directory: Path | None = typer.Argument(None, help=_DIR_HELP),
    k: int = typer.Option(3, "-k", min=1, help="Runs of the oracle and of the untouched workspace per task."),
) -> None:
    """Check every task: the oracle passes k of k, the untouched workspace fails k of k, repeated grader
    runs agree, the folder is small. Prints a table; exits 1 if any task fails.

    Example: frank tasks validate src/frankenstein/agent/suite -k 3
    """
    from frankenstein.agent.sandbox import detect_isolation
    from frankenstein.agent.validate import table, validate

    tasks = _load(directory)
    iso = detect_isolation()
    typer.echo(iso.summary() + "".join(f"\nnote: {n}" for n in iso.notes))
    checks = validate(tasks, k)
    for line in table(checks, k):
        typer.echo(line)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


@tasks_app.command("list")
def list_cmd(directory: Path | None = typer.Argument(None, help=_DIR_HELP)) -> None:
    """List the tasks of a suite with their version, hash and limits.

    Example: frank tasks list
    """
    for t in _load(directory):
        lim = t.config.limits
        typer.echo(
            f"{t.id}  v{t.config.version}  {t.hash[:12]}  turns={lim.turns} "
            f"context={lim.context_tokens} wall={lim.wall_time_s:g}s  {t.config.description}"
        )


def _check_base_url(value: str) -> str:
    """``http://HOST:PORT``, the server's root (requests go to its /v1/chat/completions); else a usage error."""
    from frankenstein.validation import http_root

    try:
        http_root(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value.strip().rstrip("/")


@tasks_app.command("draw")
def draw_cmd(
    base_url: str = typer.Argument(
        ..., help="OpenAI-compatible server, e.g. http://127.0.0.1:8080", callback=_check_base_url
    ),
    trace: Path = typer.Option(..., "--trace", help="Trace file (JSONL) the turns are appended to."),
    work_dir: Path = typer.Option(..., "--work-dir", help="Folder for the episodes' workspaces."),
    directory: Path | None = typer.Option(None, "--suite", help=_DIR_HELP),
    task: list[str] = typer.Option([], "--task", help="Only this task id (repeatable)."),
    draw: int = typer.Option(0, help="Draw number (also the default seed)."),
    model: str = typer.Option("tiny", help="Model name sent in requests."),
    turns: int | None = typer.Option(None, help="Override every task's turn limit."),
    output_tokens: int | None = typer.Option(None, help="Override every task's output tokens per turn."),
    campaign: Path | None = typer.Option(
        None,
        "--campaign",
        "-c",
        help="Keep the draw's outcome in this campaign, under the ledger step served now (an observation outside "
        "any design; the note summarises them per step).",
    ),
) -> None:
    """Run one draw (every task once) against a running engine and print one JSON line per episode.

    Example: frank tasks draw http://127.0.0.1:8080 --trace draw0.jsonl --work-dir /tmp/episodes -c my-campaign
    """
    from frankenstein.agent.draw import draw_outcome, run_draw
    from frankenstein.agent.sandbox import detect_isolation
    from frankenstein.campaign import open_campaign
    from frankenstein.store import ObservedDraw, now_iso

    if campaign is not None:  # a campaign that cannot be opened is refused before the draw runs
        open_campaign(campaign).close()

    overrides = {k: v for k, v in (("turns", turns), ("output_tokens", output_tokens)) if v is not None}
    suite = _load(directory, task)
    typer.echo(detect_isolation().summary(), err=True)
    results = run_draw(
        base_url, suite[0].dir.parent, suite, draw, trace, work_dir, model, limit_overrides=overrides or None
    )
    for r in results:
        typer.echo(json.dumps({k: v for k, v in r.row().items() if k != "detail"}, sort_keys=True))
    if campaign is None:
        return
    out = draw_outcome(results)
    with open_campaign(campaign) as c:
        last = c.store.last_steps(1)
        step = last[0].seq if last else None
        c.store.insert_observed_draw(
            ObservedDraw(now_iso(), step, draw, out.episodes, out.passed, out.engine_errors, out.episode_errors)
        )
    under = f"ledger step {step}" if step is not None else "the base recipe"
    typer.echo(f"draw {draw} kept in {campaign} under {under} (observational)", err=True)
