"""Core commands: init, doctor, engine check."""

from __future__ import annotations

from pathlib import Path

import typer

from frankenstein.cli.app import app
from frankenstein.errors import FrankError

engine_app = typer.Typer(help="Start and check engines.", no_args_is_help=True)
app.add_typer(engine_app, name="engine")


@app.command()
def init(directory: Path = typer.Argument(..., help="Campaign folder to create.")) -> None:
    """Create a campaign folder with frank.toml and frank.db.

    Example: frank init my-campaign
    """
    from frankenstein.campaign import CONFIG_NAME, init_campaign

    if directory.exists() and not directory.is_dir():
        raise FrankError(f"{directory}: exists and is not a folder; refusing to overwrite it")
    if (directory / CONFIG_NAME).is_dir():
        raise FrankError(f"{directory / CONFIG_NAME}: is a directory, not a file")
    with init_campaign(directory) as c:
        typer.echo(f"campaign ready: {c.root} (frank.toml, frank.db)")


@app.command()
def doctor() -> None:
    """Show which engine binaries Frankenstein finds, their versions, and whether the machine looks quiet
    (load against the cores, the CPU frequency governor, other engines running).

    Example: frank doctor
    """
    from frankenstein.engines import process_names, version_lines
    from frankenstein.measure.machine import snapshot
    from frankenstein.measure.noise import other_engines, quiet_lines

    for line in version_lines():
        typer.echo(line)
    for line in quiet_lines(snapshot(), other_engines(process_names())):
        typer.echo(f"machine: {line}")


@engine_app.command("check")
def engine_check(
    recipe: str | None = typer.Argument(None, help="Recipe name (default: the served recipe)."),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder."),
    part: list[str] = typer.Option([], "--part", "-p", help="Add a part to the recipe (repeatable)."),
    port: int | None = typer.Option(None, help="Port on 127.0.0.1 (default: a free one)."),
    n_predict: int = typer.Option(48, help="Tokens to generate per request."),
    requests: int = typer.Option(4, help="Number of requests."),
) -> None:
    """Start a recipe, send a few requests, print the server's step timings, and stop it.

    Example: frank engine check base --part draft -c my-campaign
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.engines.check import check_recipe

    with open_campaign(campaign) as c:
        r = c.recipe(recipe or c.config.served, part)
        check_recipe(r, c.logs, n_predict=n_predict, requests=requests, port=port, echo=typer.echo)


@engine_app.command("command")
def engine_command(
    recipe: str | None = typer.Argument(None, help="Recipe name (default: the served recipe)."),
    campaign: Path = typer.Option(Path("."), "--campaign", "-c", help="Campaign folder."),
    part: list[str] = typer.Option([], "--part", "-p", help="Add a part to the recipe (repeatable)."),
) -> None:
    """Print the command line a start of a recipe would launch, parts applied, without starting anything.

    Example: frank engine command base --part threads2 -c my-campaign
    """
    from frankenstein.campaign import open_campaign
    from frankenstein.design.dryrun import launch_lines, recipe_launch

    with open_campaign(campaign) as c:
        r = c.recipe(recipe or c.config.served, part)
        for line in launch_lines(recipe_launch("recipe", r, c.logs)):
            typer.echo(line)


@app.command()
def demo(
    directory: Path | None = typer.Option(
        None, "--dir", help="Campaign folder for the demo (default: a new temporary one)."
    ),
    blocks: int = typer.Option(5, min=1, help="Blocks in the demo's speed design."),
    turns: int = typer.Option(4, min=2, help="Workload turns replayed per start."),
) -> None:
    """Run the whole loop on the tiny shipped models: engine, registered design, verdict, ledger, note.

    Example: frank demo --dir /tmp/frank-demo
    """
    from frankenstein.demo import run_demo

    run_demo(directory, blocks=blocks, turns=turns, echo=typer.echo)
