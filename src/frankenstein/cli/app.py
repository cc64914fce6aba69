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


def version_lines() -> list[str]:
    """frank's, Python's and each engine adapter's version line (``EngineTraits.version_line``: found without
    starting or importing an engine)."""
    import platform
    import sys

    from frankenstein import __version__
    from frankenstein.engines import version_lines as engine_lines

    return [f"frank {__version__}", f"Python {platform.python_version()} ({sys.executable})", *engine_lines()]


def _print_version(value: bool) -> None:
    if value:
        for line in version_lines():
            typer.echo(line)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print frank's, Python's and the engines' versions (no engine is started) and exit.",
    ),
) -> None:
    """Frankenstein: let an engine part in only through a registered, randomized, exact test."""


def check_listen(value: str) -> str:
    """Typer callback for ``--listen``: ``HOST:PORT`` (or ``PORT``) with a port 0-65535, else a usage error (exit 2)."""
    from frankenstein.validation import listen_address

    try:
        listen_address(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--listen") from exc
    return value
