"""The one typer application every CLI module adds its commands to."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="frank",
    help="Frankenstein: let an engine part in only through a registered, randomized, exact test.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Frankenstein: let an engine part in only through a registered, randomized, exact test."""
