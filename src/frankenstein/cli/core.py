"""Core commands: init, doctor."""

from __future__ import annotations

from pathlib import Path

import typer

from frankenstein.campaign import init_campaign
from frankenstein.cli.app import app


@app.command()
def init(directory: Path = typer.Argument(..., help="Campaign folder to create.")) -> None:
    """Create a campaign folder with frank.toml and frank.db.

    Example: frank init my-campaign
    """
    with init_campaign(directory) as c:
        typer.echo(f"campaign ready: {c.root} (frank.toml, frank.db)")
