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


def check_listen(value: str) -> str:
    """Typer callback for ``--listen``: ``HOST:PORT`` (or ``PORT``) with a port 0-65535, else a usage error (exit 2)."""
    _, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise typer.BadParameter(f"{value!r}: expected HOST:PORT with a port from 0 to 65535", param_hint="--listen")
    return value
